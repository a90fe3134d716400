"""The switch of the rewards' fast paths (tests turn it off to score by the full path and compare).

On: strip_string skips its unit loop when no unit pattern matches (math_eval.py), mathruler compares two
canonical integers without sympy (mathruler.py), and answers the sympy child gave are remembered (_sympy.py).
Each gives the full path's result by construction; tests/test_engine_rewards_fast.py checks it on generated
responses.
"""

ENABLED = True
