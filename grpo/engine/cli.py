"""`grpo-train`: one GRPO run as a Hydra app over the shipped configs (``configs/`` in a checkout).

    grpo-train --config-name grpo_trainer_tiny_cpu rl_config.clip_ratio=0.25
    grpo-train --config-dir . --config-name best                             # ./best.yaml (grpo-sweep best --export)
    grpo-train --multirun rl_config.clip_ratio=0.1,0.2,0.3                   # Hydra's basic launcher
    grpo-train --multirun hydra/launcher=ray rl_config.kl_penalty=kl,low_var_kl   # one Ray task per job

Config names are looked up as in Hydra, first match first: ``--config-dir DIR`` (Hydra's "add a config
folder"), then the app's config path: ``--config-path DIR`` (relative to the working directory, not to this
file as Hydra would take it), else ``$GRPO_CONFIG_DIR``, else the configs shipped with the package; the
shipped folder stays last on the search path, so a user's config still finds the shipped ``model/`` and
``layout/`` groups. ``--config-name`` is a name (``best``, ``best.yaml``); a file path there is one line
saying which command runs it. The default config is ``grpo_trainer_tiny_cpu``. Each job trains into Hydra's
output dir (``outputs/<date>/<time>/`` or ``multirun/<date>/<time>/<job>/``): metrics.jsonl, train.log, and
checkpoints when actor_config.save is set.

Before Hydra starts, every job of the sweep is composed and validated with ``grpo.config.load_config``,
so a misspelt key, a wrong type or an infeasible layout is one ``error: ...`` line per problem on stderr
and exit code 2, before anything runs (Hydra's own error would be exit 1 with a long report). Hydra's own
keys (``hydra.*``, ``hydra/launcher=...``) are left to Hydra. Inside the job the composed config is
validated again by the same schema, so what trains is exactly what was checked.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import shlex
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from grpo.errors import UserError, first_line

if TYPE_CHECKING:
    from omegaconf import DictConfig

DEFAULT_CONFIG = "grpo_trainer_tiny_cpu"
_FLAGS_WITH_VALUE = {"--config-name", "-cn", "--config-path", "-cp", "--config-dir", "-cd", "--experimental-rerun"}
_INFO_FLAGS = {
    "--help",
    "-h",
    "--hydra-help",
    "--info",
    "-i",
    "--cfg",
    "-c",
    "--resolve",
    "--package",
    "-p",
    "--shell-completion",
    "-sc",
    "--version",
}


@dataclass
class _Args:
    """What ``grpo-train``'s command line says about the config (Hydra's flags) and the overrides."""

    name: str = DEFAULT_CONFIG
    config_path: Path | None = None  # --config-path: the app's config folder (replaces the default)
    config_dir: Path | None = None  # --config-dir: a folder searched before it (Hydra prepends it)
    overrides: list[str] | None = None
    multirun: bool = False
    info: bool = False

    def dirs(self) -> list[Path] | None:
        """The folders a config name is looked up in before the shipped configs (None: the defaults)."""
        from grpo.config import default_config_dir

        if self.config_dir is None and self.config_path is None:
            return None
        return [d for d in (self.config_dir, self.config_path or default_config_dir()) if d is not None]


def _split_argv(argv: list[str]) -> _Args:
    """Hydra's command line: config name, config path and dir, overrides, multirun?, info only?"""
    args = _Args(overrides=[])
    i = 0
    while i < len(argv):
        arg = argv[i]
        flag, eq, value = arg.partition("=")
        if flag in _FLAGS_WITH_VALUE:
            if not eq:
                i += 1
                value = argv[i] if i < len(argv) else ""
            if flag in ("--config-name", "-cn"):
                args.name = value
            elif flag in ("--config-path", "-cp"):
                args.config_path = Path(value).expanduser().resolve()
            elif flag in ("--config-dir", "-cd"):
                args.config_dir = Path(value).expanduser().resolve()
        elif arg in ("--multirun", "-m"):
            args.multirun = True
        elif flag in _INFO_FLAGS:
            args.info = True
        elif not arg.startswith("-"):
            assert args.overrides is not None
            args.overrides.append(arg)
        i += 1
    return args


def config_file(args: _Args) -> Path:
    """The YAML file Hydra composes as the primary config; a one-line UserError when there is none.

    ``--config-name`` takes a name, with or without ``.yaml``. A name that is no config on the search path
    but a file from the working directory (``--config-name best.yaml``) gets the command that runs it.
    """
    from grpo.config import find_config, resolve_target

    name = args.name
    stem = name.removesuffix(".yaml").removesuffix(".yml")
    found = find_config(stem, args.dirs()) if stem else None
    if found is not None:
        return found
    as_file = Path(name if name.endswith((".yaml", ".yml")) else f"{name}.yaml").expanduser()
    if stem and as_file.is_file():
        folder = shlex.quote(str(as_file.parent))
        raise UserError(
            f"--config-name {name}: a config name, looked up in the config folders, not a file; "
            f"run it as: grpo-train --config-dir {folder} --config-name {shlex.quote(as_file.stem)}"
        )
    return resolve_target(stem or name, args.dirs())  # raises: no config named ... (available: ...)


def _is_hydra_key(override: str) -> bool:
    key = override.lstrip("+~").split("=", 1)[0]
    return key == "hydra" or key.startswith(("hydra.", "hydra/"))


def jobs_of(overrides: list[str], multirun: bool) -> list[list[str]]:
    """The override list of every job Hydra's basic sweeper launches: the product of the sweeps, in order."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    mine = [o for o in overrides if not _is_hydra_key(o)]
    if not multirun:
        return [mine]
    try:
        parsed = OverridesParser.create().parse_overrides(mine)
    except OverrideParseException as err:
        raise UserError(f"override: {first_line(err)}") from None
    axes: dict[str, list[str]] = {}  # one axis per key; a key given twice keeps its last value
    for override in parsed:
        key = override.get_key_element()
        if not override.is_sweep_override():
            axes[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep():
            axes[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            raise UserError(
                f"override '{override.input_line}': Hydra's basic sweeper enumerates choices and ranges only"
            )
    return [list(job) for job in itertools.product(*axes.values())]


def precheck(argv: list[str]) -> None:
    """Compose and validate every job before Hydra runs; UserError lists the problems."""
    from grpo.config import load_config
    from grpo.config.inert import lint, override_keys
    from grpo.engine.check import check_config

    args = _split_argv(argv)
    if args.info:
        return
    path = config_file(args)
    problems: list[str] = []
    if "hydra/launcher=ray" in (o.lstrip("+") for o in args.overrides or []) and not _has_ray_launcher():
        problems.append(
            "hydra/launcher=ray: hydra-ray-launcher is not installed: pip install 'grpo-sweep[ray-launcher]' "
            "(it needs cloudpickle<3, so not in MindSpeed-RL's environment, which pins cloudpickle 3.1.1)"
        )
    inert: list[str] = []
    for job in jobs_of(args.overrides or [], args.multirun):
        try:
            cfg = load_config(path, job, config_dir=args.dirs())
        except UserError as err:
            problems += [p for p in err.problems if p not in problems]
            continue
        problems += [p for p in check_config(cfg) if p not in problems]  # what the engine would not carry out
        inert += [f"{cfg._source}: {w}" for w in lint(cfg, override_keys(job)) if f"{cfg._source}: {w}" not in inert]
    for line in inert:  # overridden knobs this config keeps from changing training: a warning at the start
        print(f"warning: {line}", file=sys.stderr)
    if problems:
        raise UserError(problems[0], problems=problems)


def _has_ray_launcher() -> bool:
    """hydra-ray-launcher is an extra (``ray-launcher``): without it Hydra's own answer is a long report."""
    try:
        return importlib.util.find_spec("hydra_plugins.hydra_ray_launcher") is not None
    except ModuleNotFoundError:  # no hydra_plugins package at all
        return False


def _task(hydra_cfg: DictConfig) -> float | None:
    """One job: validate Hydra's composed config, train into the job's output dir."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from grpo.config import config_from_dict
    from grpo.engine.trainer import train

    hc = HydraConfig.get()
    composed = OmegaConf.to_container(hydra_cfg, resolve=True)
    assert isinstance(composed, dict)
    data = {str(k): v for k, v in composed.items()}
    for group in ("layout", "algorithm"):  # the preset groups' choices, as load_config records them
        if hc.runtime.choices.get(group) is not None:
            data[group] = hc.runtime.choices[group]
    try:
        cfg = config_from_dict(data, f"{hc.job.config_name}.yaml")
        summary = train(cfg, Path(hc.runtime.output_dir))
    except UserError as err:
        for line in err.problems:
            print(f"error: {line}", file=sys.stderr)
        if hc.mode == RunMode.RUN:
            sys.exit(2)
        raise
    final = summary.get("metrics", {})
    print(
        f"grpo-train: {summary['iterations']} iterations in {summary['wall_s']:.1f}s; "
        f"score {final.get('grpo/score/mean', float('nan')):.3f} acc {final.get('grpo/acc/mean', float('nan')):.3f}"
        f" -> {summary['run_dir']}"
    )
    return final.get("grpo/score/mean")  # what a Hydra sweeper (e.g. Optuna's) optimises


def _absolute_config_path(argv: list[str]) -> list[str]:
    """``--config-path P`` with P made absolute against the working directory (Hydra would take a relative
    P against this file's folder, which no user means)."""
    out, i = [], 0
    while i < len(argv):
        flag, eq, value = argv[i].partition("=")
        if flag in ("--config-path", "-cp"):
            if not eq:
                i += 1
                value = argv[i] if i < len(argv) else ""
            if value and not value.startswith("pkg://"):
                value = str(Path(value).expanduser().resolve())
            out.append(f"{flag}={value}")
        else:
            out.append(argv[i])
        i += 1
    return out


def _searchpath_override(args: _Args, primary: Path) -> list[str]:
    """``hydra.searchpath=[...]`` adding the folders of the config search path Hydra would not search (the
    shipped configs behind a user's ``--config-path`` or ``$GRPO_CONFIG_DIR``), after any the primary
    config names itself; none when the user sets ``hydra.searchpath`` or nothing is missing."""
    from omegaconf import OmegaConf

    from grpo._yaml import read_yaml
    from grpo.config import config_search_path, default_config_dir
    from grpo.config.compose import quoted

    if any(o.lstrip("+").startswith("hydra.searchpath=") for o in args.overrides or []):
        return []
    searched = {d for d in (args.config_dir, args.config_path or default_config_dir()) if d is not None}
    missing = [d for d in config_search_path(args.dirs()) if d not in searched and d != primary.parent]
    if not missing:
        return []
    try:
        own = OmegaConf.select(OmegaConf.create(read_yaml(primary, kind="config") or {}), "hydra.searchpath")
    except Exception:  # the config's own errors are reported by the composition, not here
        own = None
    paths = [str(p) for p in (own or [])] + [f"file://{d}" for d in missing]
    return ["hydra.searchpath=[" + ",".join(map(quoted, paths)) + "]"]


def hydra_argv(argv: list[str]) -> list[str]:
    """The command line as Hydra gets it: plain ``a.b=v`` overrides spelt ``++a.b=v``, as ``load_config``
    sends them; ``--config-path`` absolute; the shipped configs on the search path behind a user's folder.

    A key the YAML does not spell (e.g. ``actor_config.no_save_optim``, a schema field with a default) then
    sets it instead of failing Hydra's struct check; unknown keys were already rejected by ``precheck``.
    """
    from grpo.config import hydra_overrides

    argv = _absolute_config_path(argv)
    args = _split_argv(argv)
    if args.info:  # --cfg job, --help ...: no precheck ran, Hydra says what it finds
        try:
            return argv + _searchpath_override(args, config_file(args))
        except UserError:
            return argv
    path = config_file(args)
    mine = [o for o in args.overrides or [] if not _is_hydra_key(o)]
    rewritten = dict(zip(mine, hydra_overrides(path, mine, config_dir=args.dirs()), strict=True))
    return [rewritten.get(a, a) for a in argv] + _searchpath_override(args, path)


# Hydra flags that print and exit without running a job.
PRINT_ONLY_FLAGS = frozenset(
    {"--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--shell-completion", "-sc"}
)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: precheck, then hand the command line to Hydra."""
    import hydra

    from grpo.config import default_config_dir

    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    from grpo.config.compose import quote_split

    sys.argv = [sys.argv[0], *quote_split(sys.argv[1:])]  # split=80,20,0 unquoted is the split, not a sweep
    try:
        precheck(sys.argv[1:])
        sys.argv = [sys.argv[0], *hydra_argv(sys.argv[1:])]
        if not any(a.lstrip("+").startswith("hydra.job.name=") for a in sys.argv[1:]):
            sys.argv.append("hydra.job.name=grpo-train")  # the job log is grpo-train.log, not cli.log
    except UserError as err:
        for line in err.problems:
            print(f"error: {line}", file=sys.stderr)
        sys.exit(2)
    app = hydra.main(config_path=str(default_config_dir()), config_name=DEFAULT_CONFIG, version_base="1.3")(_task)
    if PRINT_ONLY_FLAGS.intersection(a.split("=")[0] for a in sys.argv[1:]):
        # Hydra prints (and catches its own errors while printing): a closed pipe ends the process quietly,
        # as it does `cat`, instead of a traceback from inside Hydra.
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        app()
        sys.stdout.flush()  # inside the try: a closed pipe surfaces here, not at interpreter exit
    except BrokenPipeError:  # `grpo-train --help | head`: the reader left; no traceback (as grpo-sweep does)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's recipe: no second error at exit
        sys.exit(1)


if __name__ == "__main__":
    main()
