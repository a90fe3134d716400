"""The `grpo-sweep` command: run/resume a study, validate, status, best, report, export.

Every user mistake surfaces as a UserError: one `error: ...` line per problem on stderr, exit code 2.
Imports are lazy so `grpo-sweep validate` answers without starting Ray or importing torch.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn

from grpo.errors import StudyStopped, UserError, did_you_mean

SUBCOMMANDS = ("run", "validate", "status", "best", "report", "export", "dashboard", "init")


class _Parser(argparse.ArgumentParser):
    """argparse with its errors as one line, ``error: grpo-sweep run: <what>``, and exit code 2 (no usage block)."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="grpo-sweep",
        description="Declarative Optuna sweeps of GRPO training runs on Ray.",
        epilog="`grpo-sweep SPEC` is short for `grpo-sweep run SPEC`.",
    )
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run or resume the study, then write its report")
    run.add_argument("spec")
    run.add_argument("--address", help="Ray cluster: local | host:port | ray://host:port | auto (overrides the spec)")
    run.add_argument("--concurrency", type=int, help="trials at once (overrides the spec)")
    run.add_argument("--trials", type=int, help="finished trials to reach (overrides the spec)")
    run.add_argument("--fork", metavar="NEW_NAME", help="start a new study from a changed spec")
    run.add_argument("--no-plan", action="store_true", help="do not prune layouts the memory planner rejects")
    run.add_argument("--no-report", action="store_true", help="skip writing the HTML report")
    run.add_argument("--quiet", action="store_true", help="no live table")

    val = sub.add_parser("validate", help="check a sweep spec or a grpo_trainer config; print what it resolves to")
    val.add_argument("target", help="sweep spec (sweeps/*.yaml), config name or config path")
    val.add_argument("overrides", nargs="*", help="Hydra overrides (configs only), e.g. rl_config.clip_ratio=0.3")
    val.add_argument("--section", help="print only this config section, e.g. rl_config")
    val.add_argument(
        "--backend",
        choices=("embedded", "mindspeed"),
        default="embedded",
        help="configs only: the backend whose launch checks apply (default embedded: what the engine would not "
        "carry out is an error; mindspeed: MindSpeed-RL's own launch checks)",
    )

    st = sub.add_parser("status", help="table of the study's trials")
    st.add_argument("spec")
    st.add_argument("--json", action="store_true")

    best = sub.add_parser("best", help="the best trial; --export writes its full grpo_trainer YAML")
    best.add_argument("spec")
    best.add_argument("--export", metavar="FILE")

    rep = sub.add_parser("report", help="(re)build reports/<study>/index.html")
    rep.add_argument("spec")
    rep.add_argument("--out", help="output folder (default reports/<study>)")

    exp = sub.add_parser("export", help="write the trial and metric frames")
    exp.add_argument("spec")
    exp.add_argument("--format", choices=("csv", "parquet", "json"), default="csv")
    exp.add_argument("--out", help="output folder (default reports/<study>/export)")

    init = sub.add_parser("init", help="write NAME.yaml: a sweep of your model, data and reward to start from")
    init.add_argument("name", help="the study name; the spec is written to NAME.yaml (never overwritten)")
    init.add_argument("--backend", required=True, choices=("embedded", "trl", "verl", "mindspeed"))
    init.add_argument("--model", metavar="DIR", help="a Hugging Face model folder (config.json is the architecture)")
    init.add_argument("--data", metavar="FILE", help="training records (GSM8K, MATH, verl parquet, TRL; jsonl/parquet)")
    init.add_argument("--eval-data", metavar="FILE", help="held-out records, same formats")
    init.add_argument("--reward", metavar="FILE:FUNCTION", help="your reward function (TRL or verl form)")

    dash = sub.add_parser("dashboard", help="serve the study in optuna-dashboard (Optuna's web UI)")
    dash.add_argument("spec")
    dash.add_argument("--host", default="127.0.0.1")
    dash.add_argument("--port", type=int, default=8080)
    return p


def _check_fork(spec: str, name: str) -> None:
    from grpo.sweep.spec.models import MAX_STUDY_NAME, STUDY_NAME

    if not STUDY_NAME.fullmatch(name) or len(name) > MAX_STUDY_NAME:
        raise UserError(
            f"{spec}: --fork: study names use letters, digits, '-' and '_' only, at most {MAX_STUDY_NAME} "
            f"(got {name!r})"
        )


def _unknown_command(word: str) -> str | None:
    """The line for ``grpo-sweep statuss spec.yaml``: a word that is no subcommand, no file and no spec name."""
    if os.path.exists(word) or word.endswith((".yaml", ".yml")) or "/" in word or os.sep in word:
        return None
    hint = did_you_mean(word, SUBCOMMANDS)
    if hint is None:
        return None  # maybe the name of a shipped example sweep: the spec loader decides
    return f"grpo-sweep: unknown command {word}; did you mean {hint}? (commands: {', '.join(SUBCOMMANDS)})"


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "run" and args.fork is not None:
        _check_fork(args.spec, args.fork)
    if args.command == "validate":
        from grpo.sweep.spec.load import looks_like_spec

        if looks_like_spec(args.target):
            from grpo.sweep.commands.handlers import validate_spec

            return validate_spec(args)
        from grpo.config import cli_validate
        from grpo.sweep.backends.embedded import EmbeddedBackend  # no torch: the engine's config check only
        from grpo.sweep.backends.mindspeed.rules import launch_rule_problems

        check = EmbeddedBackend().check if args.backend == "embedded" else launch_rule_problems
        return cli_validate(args.target, args.overrides, section=args.section, check=check)
    if args.command == "init":
        from grpo.sweep.commands.init import cmd_init

        return cmd_init(args)
    from grpo.sweep.commands import handlers as commands

    return getattr(commands, f"cmd_{args.command}")(args)


def sweep_main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in SUBCOMMANDS and not argv[0].startswith("-"):
        unknown = _unknown_command(argv[0])
        if unknown is not None:
            print(f"error: {unknown}", file=sys.stderr)
            return 2
        argv.insert(0, "run")
    try:
        args = _parser().parse_args(argv)
    except SystemExit as done:  # --help (0) or an argparse error already printed as one line (2)
        return done.code if isinstance(done.code, int) else 2
    try:
        code = _dispatch(args)
        sys.stdout.flush()  # inside the try: a closed pipe surfaces here, not at interpreter exit
        return code
    except UserError as err:
        for line in err.problems:
            print(f"error: {line}", file=sys.stderr)
        return 2
    except StudyStopped as err:  # a full disk or another I/O error in the driver: stopped cleanly, resumable
        print(f"error: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `grpo-sweep status --json | head`: the reader left; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's recipe: no second error at exit
        return 1


if __name__ == "__main__":
    sys.exit(sweep_main())
