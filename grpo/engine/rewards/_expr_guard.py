"""What may reach sympy's ``parse_expr``: a mathematical expression and nothing else.

``parse_expr`` is Python's ``eval`` with sympy's namespace (and the builtins): a policy's ``\\boxed{}`` holding
``exec(...)`` or an attribute walk runs with the user's rights. Every string the graders parse passes
``check`` first, a lexer that knows only

- numbers (``12``, ``0.5``, ``1e-3``), ASCII only: no Unicode names (NFKC folds ``ｅｘｅｃ`` into ``exec``);
- names from ``MATH_NAMES`` (sympy's functions and constants that answers use) or a symbol: one letter,
  optionally with digits or ``_`` and a subscript (``x``, ``x2``, ``a_n``); no other name, so no builtin,
  keyword (``lambda``, ``import``), dunder or sympy helper (``sympify``, ``S``-strings need quotes) passes;
- arithmetic, comparison and factorial operators, brackets and commas; no quote, no backslash, no ``.``
  outside a number (no attribute access), no ``:``, ``;``, ``@``, ``#``, ``~``, ``|``, ``&``;
- at most ``MAX_LENGTH`` characters, brackets nested at most ``MAX_DEPTH`` deep, integers of at most
  ``MAX_DIGITS`` digits (deep nesting crashes Python's compiler; huge literals are memory, not answers).

Anything else is refused before parsing (the caller scores it as unparsed, which is "not equal"). Standard
library only: the sympy child loads this file by path, as it is loaded itself.
"""

from __future__ import annotations

import re

MAX_LENGTH = 1000
MAX_DEPTH = 24
MAX_DIGITS = 400

# sympy names a math answer may use (functions are called, constants stand alone); all of them are plain
# sympy functions or numbers: none reads a string, a file or an attribute.
MATH_NAMES = frozenset(
    """
    sqrt root cbrt exp log ln sin cos tan cot sec csc asin acos atan acot asec acsc atan2 sinh cosh tanh coth
    asinh acosh atanh pi oo zoo nan E I Abs abs sign floor ceiling frac factorial binomial gcd lcm Rational
    Integer Float Matrix Min Max re im conjugate arg Mod
    """.split()  # noqa: SIM905
)
_SYMBOL = re.compile(r"[A-Za-z](?:[0-9]+|_[A-Za-z0-9]+)?")
_TOKEN = re.compile(
    r"""(?P<space>[ \t\n\r]+)
    |(?P<number>(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)
    |(?P<name>[A-Za-z_][A-Za-z0-9_]*)
    |(?P<op>\*\*|==|<=|>=|!=|[-+*/^=<>!%,])
    |(?P<open>[(\[{])
    |(?P<close>[)\]}])""",
    re.VERBOSE,
)
_PAIRS = {")": "(", "]": "[", "}": "{"}


def refusal(text: str) -> str | None:
    """Why ``text`` may not be parsed (None: it is a mathematical expression as defined above)."""
    if len(text) > MAX_LENGTH:
        return f"longer than {MAX_LENGTH} characters"
    stack: list[str] = []
    at = 0
    while at < len(text):
        m = _TOKEN.match(text, at)
        if m is None:
            return f"character {text[at]!r} at {at}"
        kind, token = m.lastgroup, m.group()
        if kind == "number" and len(token.split(".")[0]) > MAX_DIGITS:
            return f"a number of more than {MAX_DIGITS} digits"
        if kind == "name" and token not in MATH_NAMES and not _SYMBOL.fullmatch(token):
            return f"name {token!r}"
        if kind == "open":
            stack.append(token)
            if len(stack) > MAX_DEPTH:
                return f"brackets nested deeper than {MAX_DEPTH}"
        if kind == "close" and (not stack or stack.pop() != _PAIRS[token]):
            return f"unbalanced {token!r} at {at}"
        at = m.end()
    return None


def check(text: str) -> str:
    """``text`` itself when it may be parsed; ``ValueError`` naming why not otherwise."""
    why = refusal(text)
    if why is not None:
        raise ValueError(f"not a mathematical expression ({why})")
    return text
