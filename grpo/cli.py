"""The `grpo-sweep` command: run/resume a study, validate, status, best, report, export.

Every user mistake surfaces as a UserError: one `error: ...` line per problem on stderr, exit code 2.
Imports are lazy so `grpo-sweep validate` answers without starting Ray or importing torch.
"""

from __future__ import annotations

import argparse
import os
import sys

from grpo.errors import UserError

SUBCOMMANDS = ("run", "validate", "status", "best", "report", "export")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="grpo-sweep",
        description="Declarative Optuna sweeps of GRPO training runs on Ray.",
        epilog="`grpo-sweep SPEC` is short for `grpo-sweep run SPEC`.",
    )
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run or resume the study, then write its report")
    run.add_argument("spec")
    run.add_argument("--address", help="Ray cluster: local | auto | ray://host:port (overrides the spec)")
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
    return p


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "validate":
        from grpo.sweep.load import looks_like_spec

        if looks_like_spec(args.target):
            from grpo.sweep.commands import validate_spec

            return validate_spec(args)
        from grpo.config import cli_validate

        return cli_validate(args.target, args.overrides, section=args.section)
    from grpo.sweep import commands

    return getattr(commands, f"cmd_{args.command}")(args)


def sweep_main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in SUBCOMMANDS and not argv[0].startswith("-"):
        argv.insert(0, "run")
    args = _parser().parse_args(argv)
    try:
        code = _dispatch(args)
        sys.stdout.flush()  # inside the try: a closed pipe surfaces here, not at interpreter exit
        return code
    except UserError as err:
        for line in err.problems:
            print(f"error: {line}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `grpo-sweep status --json | head`: the reader left; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's recipe: no second error at exit
        return 1


if __name__ == "__main__":
    sys.exit(sweep_main())
