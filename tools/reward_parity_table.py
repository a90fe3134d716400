"""Score crafted responses with MindSpeed-RL's own rule verifiers and write ``tests/data/reward_parity.yaml``.

    python tools/reward_parity_table.py --mirror PATH \\
        --python /tmp/msrl_venv/bin/python --math-verify-python /tmp/msrl_mv_venv/bin/python

The ground truth of ``tests/test_engine_rewards.py``. The script exports MindSpeed-RL's verifier files from a
checkout (``--mirror``, default ``$MINDSPEED_RL_SOURCE``: a clone of https://gitee.com/ascend/MindSpeed-RL, a
work tree or a bare mirror, read with ``git show``; the table was made at its commit 05a90d7) into a
temporary folder and runs them, unchanged, in scratch interpreters created OUTSIDE the project (never the
project's venv):

- ``--python``: a venv with MindSpeed-RL's pins for the rule verifier, e.g.
  ``python3 -m venv /tmp/msrl_venv && /tmp/msrl_venv/bin/pip install mathruler==0.1.0 pylatexenc==2.10
  sympy==1.14.0 word2number regex latex2sympy2 tqdm`` (latex2sympy2 brings antlr4-python3-runtime 4.7.2);
- ``--math-verify-python``: a venv with ``math-verify[antlr4_13_2]`` (and the same packages but latex2sympy2),
  because math-verify's latex2sympy2_extended needs antlr4 4.13 while latex2sympy2 needs 4.7.2: the two
  cannot share one environment (MindSpeed-RL's requirements.txt lists both).

Only the heavy imports are stubbed, in the scratch interpreter: ``torch`` (rule_verifier.py uses it only in
``compute_verifier_score``, which is not called), ``mindspeed_rl.utils.loggers.Loggers`` (a no-op logger),
``mindspeed_rl.utils.utils.mstx_timer_decorator`` (identity), the package ``__init__`` files (they import the
whole framework) and, in the math-verify interpreter only, ``latex2sympy2`` (math_eval_toolkit imports it; that
interpreter scores math_verify_reward alone, which never reaches it). Each verifier is called through
rule_verifier.py's own ``verifier()`` dispatch, so ``acc`` and ``strict_format`` run in its process pool, with
its timeout raised from 1 s to 30 s (see ``worker``): a case that hangs still scores 0.0.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "reward_parity.yaml"
FILES = (
    "mindspeed_rl/models/rule_verifier.py",
    "mindspeed_rl/models/math_dapo.py",
    "mindspeed_rl/models/math_verify.py",
    "mindspeed_rl/utils/math_eval_toolkit/__init__.py",
    "mindspeed_rl/utils/math_eval_toolkit/grader.py",
    "mindspeed_rl/utils/math_eval_toolkit/parser.py",
)
VERIFIERS = (
    "acc", "strict_format", "format", "step", "base_acc", "math_17k_acc", "acc_for_dapo", "acc_for_ppo",
)  # fmt: skip
MATH_VERIFY = "math_verify_reward"
TIMEOUT_S = 30
PACKAGES = (
    "sympy", "mathruler", "pylatexenc", "latex2sympy2", "antlr4-python3-runtime", "word2number", "regex",
    "math-verify", "latex2sympy2_extended",
)  # fmt: skip

GOOD = "<think>7+8=15</think><answer>\\boxed{85}</answer>"
CHAT = "<|im_start|>user\nWhat is 7+78?<|im_end|>\n<|im_start|>assistant\n"

# (name, label, response): the tiny task's shapes first, then MindSpeed-RL's normalisation corners.
CASES: list[tuple[str, str, str]] = [
    ("boxed_int", "85", GOOD),
    ("boxed_wrong", "85", "<think>x</think><answer>\\boxed{84}</answer>"),
    ("bare_answer", "85", "<think>x</think><answer>85</answer>"),
    ("bare_answer_wrong", "85", "<think>x</think><answer>86</answer>"),
    ("no_answer_number", "85", "the sum is 85"),
    ("no_answer_text", "85", "I do not know"),
    ("boxed_decimal_zero", "85", "<answer>\\boxed{85.0}</answer>"),
    ("two_boxes_last_wins", "85", "\\boxed{80} then \\boxed{85}"),
    ("two_boxes_last_wrong", "85", "<think>a</think><answer>\\boxed{85}\\boxed{8}</answer>"),
    ("empty_box", "85", "<answer>\\boxed{}</answer>"),
    ("unbalanced_box", "85", "<think>a</think><answer>\\boxed{85</answer>"),
    ("nested_braces", "85", "<think>a</think><answer>\\boxed{{85}}</answer>"),
    ("chat_prefix", "85", CHAT + GOOD),
    ("stop_word_im_end", "85", GOOD + "<|im_end|>\n\\boxed{12}"),
    ("stop_word_s", "85", GOOD + "</s> and then \\boxed{12}"),
    ("stop_word_endoftext", "85", "<think>a</think><answer>\\boxed{84}</answer><|endoftext|>\\boxed{85}"),
    ("box_only_after_stop", "85", "<think>a</think><answer>85</answer><|im_end|>\\boxed{85}"),
    ("answer_is_phrase", "85", "<think>a</think>The answer is 85"),
    ("thousands_comma", "1000", "<think>a</think><answer>\\boxed{1,000}</answer>"),
    ("thousands_latex_comma", "1000", "<think>a</think><answer>\\boxed{1{,}000}</answer>"),
    ("thousands_thin_space", "1000", "<think>a</think><answer>\\boxed{1\\,000}</answer>"),
    ("frac_vs_decimal", "0.5", "<think>a</think><answer>\\boxed{\\frac{1}{2}}</answer>"),
    ("decimal_vs_frac", "\\frac{1}{2}", "<think>a</think><answer>\\boxed{0.5}</answer>"),
    ("dfrac", "\\frac{1}{2}", "<think>a</think><answer>\\boxed{\\dfrac{1}{2}}</answer>"),
    ("slash_vs_frac", "\\frac{1}{2}", "<think>a</think><answer>\\boxed{1/2}</answer>"),
    ("frac_shorthand", "\\frac{3}{4}", "<think>a</think><answer>\\boxed{\\frac34}</answer>"),
    ("unreduced_frac", "\\frac{1}{2}", "<think>a</think><answer>\\boxed{\\frac{2}{4}}</answer>"),
    ("percent_latex", "50", "<think>a</think><answer>\\boxed{50\\%}</answer>"),
    ("percent_vs_fraction", "0.5", "<think>a</think><answer>\\boxed{50\\%}</answer>"),
    ("units_text_cm", "12", "<think>a</think><answer>\\boxed{12 \\text{ cm}}</answer>"),
    ("units_word", "5", "<think>a</think><answer>\\boxed{5 meters}</answer>"),
    ("dollars", "20", "<think>a</think><answer>\\boxed{\\$20}</answer>"),
    ("degrees", "90", "<think>a</think><answer>\\boxed{90^\\circ}</answer>"),
    ("x_equals", "3", "<think>a</think><answer>\\boxed{x=3}</answer>"),
    ("trailing_dot", "85", "<think>a</think><answer>\\boxed{85.}</answer>"),
    ("latex_spaces", "85", "<think>a</think><answer>\\boxed{ 8 5 }</answer>"),
    ("sqrt_shorthand", "\\sqrt{2}", "<think>a</think><answer>\\boxed{\\sqrt2}</answer>"),
    ("sqrt_symbolic", "2\\sqrt{2}", "<think>a</think><answer>\\boxed{\\sqrt{8}}</answer>"),
    ("tolerance_inside", "3.14159", "<think>a</think><answer>\\boxed{3.1416}</answer>"),
    ("tolerance_outside", "3.14159", "<think>a</think><answer>\\boxed{3.15}</answer>"),
    ("tuple", "(1, 2)", "<think>a</think><answer>\\boxed{(1,2)}</answer>"),
    ("word_number", "5", "<think>a</think><answer>\\boxed{five}</answer>"),
    ("negative", "-3", "<think>a</think><answer>\\boxed{-3}</answer>"),
    ("expression", "x+1", "<think>a</think><answer>\\boxed{1+x}</answer>"),
    ("pi_numeric", "\\pi", "<think>a</think><answer>\\boxed{3.14159}</answer>"),
    ("huge_power_hangs", "1", "<think>a</think><answer>\\boxed{9^{9^{9^{9}}}}</answer>"),
    ("strict_trailing_newline", "85", GOOD + "\n"),
    ("strict_leading_space", "85", " " + GOOD),
    ("strict_two_thinks", "85", "<think>a</think><think>b</think><answer>\\boxed{85}</answer>"),
    ("strict_answer_in_think", "85", "<think>a<answer></think>\\boxed{85}</answer>"),
    ("strict_text_around_box", "85", "<think>a</think> <answer>so \\boxed{85} it is</answer>"),
    ("strict_answer_first", "85", "<answer>\\boxed{85}</answer><think>a</think>"),
    ("format_text_between", "85", "<think>a</think>x<answer>\\boxed{85}</answer>"),
    ("format_newline_tail", "85", GOOD + "\nmore"),
    ("steps", "85", "Step 1: add units. Step 2: carry.\n- tens\nFinally, \\boxed{85}"),
    ("numbered_steps", "85", "1. units\n2. tens\n* done\n\\boxed{85}"),
    ("dapo_answer_line", "85", "<think>7+8=15</think>Answer: 85"),
    ("dapo_answer_boxed", "85", "<think>a</think>Answer: \\boxed{85}"),
    ("dapo_answer_units", "85", "reasoning\nanswer: 85 dollars"),
    ("dapo_answer_commas", "1000", "Answer: 1,000"),
    ("dapo_last_line_wins", "85", "Answer: 3\nAnswer: 85"),
    ("dapo_answer_wrong", "85", "Answer: 86"),
    ("dapo_answer_dollar_math", "\\frac{1}{2}", "Answer: $\\frac12$"),
]


def export(mirror: Path, rev: str, dest: Path) -> str:
    """Write MindSpeed-RL's verifier files at ``rev`` under ``dest``; return the commit."""
    commit = subprocess.run(
        ["git", "-C", str(mirror), "rev-parse", rev], check=True, capture_output=True, text=True
    ).stdout.strip()
    for name in FILES:
        text = subprocess.run(
            ["git", "-C", str(mirror), "show", f"{commit}:{name}"], check=True, capture_output=True, text=True
        ).stdout
        path = dest / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in ("mindspeed_rl", "mindspeed_rl/models", "mindspeed_rl/utils"):
        (dest / package / "__init__.py").write_text("")  # the real ones import the whole framework
    (dest / "mindspeed_rl/utils/loggers.py").write_text(
        "class Loggers:\n    def __init__(self, *a, **k): pass\n"
        "    def __getattr__(self, name): return lambda *a, **k: None\n"
    )
    (dest / "mindspeed_rl/utils/utils.py").write_text("def mstx_timer_decorator(fn):\n    return fn\n")
    (dest / "torch.py").write_text("# stub: rule_verifier uses torch only in compute_verifier_score\n")
    return commit


def worker(src: str, names: list[str], stub_latex2sympy: bool) -> None:
    """Runs inside the scratch interpreter: score every case (JSON on stdin) with each verifier in ``names``."""
    sys.path.insert(0, src)
    if stub_latex2sympy:
        import types

        stub = types.ModuleType("latex2sympy2")

        def latex2sympy(text: str) -> None:
            raise RuntimeError("latex2sympy2 is not installed in this interpreter")

        stub.latex2sympy = latex2sympy  # type: ignore[attr-defined]
        sys.modules["latex2sympy2"] = stub
    from types import SimpleNamespace

    from mindspeed_rl.models import rule_verifier  # type: ignore[import-not-found]

    # MindSpeed-RL bounds acc and strict_format by 1 s per response (timeout -> 0.0). On this shared 2-core
    # machine the first latex2sympy call in each of its 16 pool workers alone can take ~1 s, so a 1 s bound makes
    # the table depend on the load; 30 s keeps the semantics (a hanging case still scores 0.0) without that noise.
    rule_verifier.acc_subprocess.__defaults__ = (TIMEOUT_S,)
    rule_verifier.strict_format_subprocess.__defaults__ = (TIMEOUT_S,)
    cases = json.load(sys.stdin)
    responses, labels = [c[2] for c in cases], [c[1] for c in cases]
    out: dict[str, list[float]] = {}
    for name in names:
        config = SimpleNamespace(verifier_function=[name], verifier_weight=[1.0])
        _, metrics = rule_verifier.verifier(responses, {"labels": labels}, config)
        out[name] = [float(s) for s in metrics[f"{name}_rewards/mean"]]
    versions = {}
    from importlib import metadata

    for package in PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    print(json.dumps({"scores": out, "versions": versions, "python": platform.python_version()}))
    sys.stdout.flush()
    import multiprocessing

    # A case that timed out leaves its pool worker computing (for ever); it holds our stdout open, so end it.
    for child in multiprocessing.active_children():
        child.kill()
    os._exit(0)


def run_worker(python: str, src: Path, names: list[str], stub_latex2sympy: bool) -> dict:
    cmd = [python, str(Path(__file__).resolve()), "--worker", str(src), "--names", ",".join(names)]
    if stub_latex2sympy:
        cmd.append("--stub-latex2sympy")
    done = subprocess.run(cmd, input=json.dumps(CASES), capture_output=True, text=True, cwd=src, timeout=600)
    if done.returncode != 0:
        sys.exit(f"error: {python}: the MindSpeed-RL verifiers failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = os.environ.get("MINDSPEED_RL_SOURCE")
    parser.add_argument("--mirror", type=Path, default=Path(source) if source else None,
                        help="MindSpeed-RL git checkout or bare mirror (default: $MINDSPEED_RL_SOURCE)")  # fmt: skip
    parser.add_argument("--rev", default="HEAD")
    parser.add_argument("--python", help="scratch venv's python for the verifiers (see the docstring)")
    parser.add_argument("--math-verify-python", help="scratch venv's python with math-verify (optional)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--names", help=argparse.SUPPRESS)
    parser.add_argument("--stub-latex2sympy", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.names.split(","), args.stub_latex2sympy)
        return
    if args.mirror is None or args.python is None:
        parser.error("--mirror (or MINDSPEED_RL_SOURCE) and --python are required")

    import yaml

    with tempfile.TemporaryDirectory() as tmp:
        commit = export(args.mirror, args.rev, Path(tmp))
        main_run = run_worker(args.python, Path(tmp), list(VERIFIERS), stub_latex2sympy=False)
        mv_run: dict | None = None
        mv_why = ""
        if Path(args.math_verify_python).exists():
            mv_run = run_worker(args.math_verify_python, Path(tmp), [MATH_VERIFY], stub_latex2sympy=True)
        else:
            mv_why = f"no math-verify interpreter at {args.math_verify_python}"
    cases = []
    for i, (name, label, response) in enumerate(CASES):
        scores = {v: main_run["scores"][v][i] for v in VERIFIERS}
        if mv_run is not None:
            scores[MATH_VERIFY] = mv_run["scores"][MATH_VERIFY][i]
        cases.append({"name": name, "label": label, "response": response, "scores": scores})
    table = {
        "source": {
            "repository": "Ascend/MindSpeed-RL",
            "commit": commit,
            "files": list(FILES),
            "python": main_run["python"],
            "packages": main_run["versions"],
            "math_verify_packages": mv_run["versions"] if mv_run else mv_why,
            "produced_by": "tools/reward_parity_table.py (MindSpeed-RL's own verifier() in scratch venvs)",
            "timeout_s": TIMEOUT_S,
        },
        "cases": cases,
    }
    header = "# Generated by tools/reward_parity_table.py from MindSpeed-RL's own rule verifiers; do not edit.\n"
    args.out.write_text(header + yaml.safe_dump(table, sort_keys=False, allow_unicode=True, width=200))
    print(f"{len(cases)} cases x {len(VERIFIERS) + (mv_run is not None)} verifiers -> {args.out}")


if __name__ == "__main__":
    main()
