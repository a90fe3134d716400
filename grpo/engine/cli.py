"""`grpo-train`: one GRPO run as a Hydra app over the repository's configs/.

    grpo-train --config-name grpo_trainer_tiny_cpu rl_config.clip_ratio=0.25
    grpo-train --multirun rl_config.clip_ratio=0.1,0.2,0.3                   # Hydra's basic launcher
    grpo-train --multirun hydra/launcher=ray rl_config.kl_penalty=kl,low_var_kl   # one Ray task per job

The config path is the repository's ``configs/`` (``$GRPO_CONFIG_DIR`` overrides it); the default config is
``grpo_trainer_tiny_cpu``. Each job trains into Hydra's output dir (``outputs/<date>/<time>/`` or
``multirun/<date>/<time>/<job>/``): metrics.jsonl, train.log, and checkpoints when actor_config.save is set.

Before Hydra starts, every job of the sweep is composed and validated with ``grpo.config.load_config``,
so a misspelt key, a wrong type or an infeasible layout is one ``error: ...`` line per problem on stderr
and exit code 2, before anything runs (Hydra's own error would be exit 1 with a long report). Hydra's own
keys (``hydra.*``, ``hydra/launcher=...``) are left to Hydra. Inside the job the composed config is
validated again by the same schema, so what trains is exactly what was checked.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from grpo.errors import UserError

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


def _split_argv(argv: list[str]) -> tuple[str, Path | None, list[str], bool, bool]:
    """(config name, config path, overrides, multirun?, info-only?) from Hydra's command line."""
    name, path, overrides, multirun, info = DEFAULT_CONFIG, None, [], False, False
    i = 0
    while i < len(argv):
        arg = argv[i]
        flag, eq, value = arg.partition("=")
        if flag in _FLAGS_WITH_VALUE:
            if not eq:
                i += 1
                value = argv[i] if i < len(argv) else ""
            if flag in ("--config-name", "-cn"):
                name = value
            elif flag in ("--config-path", "-cp"):
                path = Path(value)
        elif arg in ("--multirun", "-m"):
            multirun = True
        elif flag in _INFO_FLAGS:
            info = True
        elif not arg.startswith("-"):
            overrides.append(arg)
        i += 1
    return name, path, overrides, multirun, info


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
        raise UserError(f"override: {str(err).splitlines()[0]}") from None
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

    name, path, overrides, multirun, info = _split_argv(argv)
    if info:
        return
    problems: list[str] = []
    for job in jobs_of(overrides, multirun):
        try:
            load_config(name, job, config_dir=path)
        except UserError as err:
            problems += [p for p in err.problems if p not in problems]
    if problems:
        raise UserError(problems[0], problems=problems)


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
    layout = hc.runtime.choices.get("layout")
    if layout is not None:
        data["layout"] = layout
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


def hydra_argv(argv: list[str]) -> list[str]:
    """The command line with plain ``a.b=v`` overrides spelt ``++a.b=v``, as ``load_config`` sends them.

    A key the YAML does not spell (e.g. ``actor_config.no_save_optim``, a schema field with a default) then
    sets it instead of failing Hydra's struct check; unknown keys were already rejected by ``precheck``.
    """
    from grpo.config import hydra_overrides

    name, path, overrides, _, info = _split_argv(argv)
    if info:
        return argv
    mine = [o for o in overrides if not _is_hydra_key(o)]
    rewritten = dict(zip(mine, hydra_overrides(name, mine, config_dir=path), strict=True))
    return [rewritten.get(a, a) for a in argv]


def main(argv: list[str] | None = None) -> None:
    """Console entry point: precheck, then hand the command line to Hydra."""
    import hydra

    from grpo.config import default_config_dir

    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
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
    app()


if __name__ == "__main__":
    main()
