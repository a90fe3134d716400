"""Rule rewards with MindSpeed-RL's semantics (``mindspeed_rl/models/rule_verifier.py`` and the graders it calls).

Each verifier scores decoded responses (special tokens dropped) against their labels, as the function of the
same name in MindSpeed-RL's ``verifier()`` table does (our code, their rules, bugs included where they change
a score; ``tests/data/reward_parity.yaml`` holds MindSpeed-RL's own scores for crafted responses):

- ``acc`` (``acc_worker``): text before the first ``<|im_start|>assistant`` is dropped and the text is cut at the
  first stop word (``</s>``, ``<|im_end|>``, ``<|endoftext|>``); the answer is math_eval_toolkit's
  ``extract_answer(data_name="math")`` (last ``boxed``, else "the answer is", else the last number) after
  ``strip_string``; +1 when ``math_equal`` holds, -0.5 when not, -1 when there is no answer or no "boxed"
  in the text (a bare ``<answer>85</answer>`` scores -1). 0.0 when the sympy part overruns 1 s.
- ``strict_format``: +1 for exactly one ``<think>``, ``</think>``, ``<answer>``, ``\\boxed{..}``, ``</answer>``
  in that order, the text starting with ``<think>`` and ending with ``</answer>``; else -0.5.
- ``format``: 1 when ``^<think>.*?</think>\\s*<answer>.*?</answer>$`` matches (DOTALL, MULTILINE), else 0.
- ``step``: min(1, count/3) of step markers (``Step 1:``, ``1.`` at the start, bullets, First/Second/...).
- ``base_acc``: 1 when the text fully matches ``<think>.*</think>.*<answer>.*\\boxed{.*}.*</answer>`` and
  mathruler's ``grade_answer`` accepts the last boxed content, else 0.
- ``math_17k_acc`` and ``acc_for_ppo``: 1 when mathruler's ``grade_answer`` accepts the last boxed content.
- ``acc_for_dapo`` (``math_dapo.compute_score``): the last ``Answer: ...`` line of the last 300 characters,
  normalised as Minerva does, equals the normalised label: +1, else -1.
- ``math_verify_reward``: the base_acc format and then the ``math_verify`` package's score; in ``VERIFIERS``
  only when ``math_verify`` imports, tried at the first look into ``VERIFIERS`` (not a dependency;
  ``check.py`` refuses it otherwise).

Where we differ from MindSpeed-RL (see docs/engine.md): LaTeX is read by our own converters instead of
latex2sympy2 (math_equal) and pylatexenc (mathruler), covering fractions, roots, powers, pi, products,
text/font macros and spacing; sympy runs in a child process bounded to 1 s per response (mathruler's grading
has no bound in MindSpeed-RL; an overrun there scores "not equal", which is its 0).

The total reward is ``sum(verifier_weight[i] * score_i)``. ``is_correct`` (``grpo/acc/mean``, eval accuracy) is
the engine's own: the boxed (else ``<answer>``) answer equals the label as a number or a trimmed string.

One module per upstream grader: ``math_eval`` (math_eval_toolkit), ``mathruler``, ``dapo`` (math_dapo),
``answer`` (the engine's own), the verifiers in ``verifiers`` (registered in ``_registry.VERIFIERS``),
the sympy child in ``_sympy`` (parent side, started on first use) and ``_sympy_child`` (loaded by path in the
child: standard library and sympy only). Importing the package starts nothing and imports no optional package.
Fast paths that give the full path's scores are listed in ``_fast``.

A user's own reward function (``file.py:function`` in ``verifier_function``) is loaded by ``custom``; ``score``
calls it beside the verifiers.
"""

from grpo.engine.rewards._registry import VERIFIERS, Verifier, VerifierRegistry, optional_verifier, verifier
from grpo.engine.rewards.answer import answers_equal, extract_answer, extract_boxed, is_correct
from grpo.engine.rewards.custom import UserReward, is_user_ref, load_user_reward
from grpo.engine.rewards.math_eval import extract_math_answer, math_equal, strip_string
from grpo.engine.rewards.mathruler import boxed_content, grade_answer
from grpo.engine.rewards.verifiers import (
    MATH_VERIFY_MISSING,
    TAGS,
    acc,
    acc_for_dapo,
    base_acc,
    format_,
    math_17k_acc,
    reward_means,
    score,
    step,
    strict_format,
    valid_structure,
)

__all__ = [
    "MATH_VERIFY_MISSING",
    "TAGS",
    "VERIFIERS",
    "UserReward",
    "Verifier",
    "VerifierRegistry",
    "acc",
    "acc_for_dapo",
    "answers_equal",
    "base_acc",
    "boxed_content",
    "extract_answer",
    "extract_boxed",
    "extract_math_answer",
    "format_",
    "grade_answer",
    "is_correct",
    "is_user_ref",
    "load_user_reward",
    "math_17k_acc",
    "math_equal",
    "optional_verifier",
    "reward_means",
    "score",
    "step",
    "strict_format",
    "strip_string",
    "valid_structure",
    "verifier",
]
