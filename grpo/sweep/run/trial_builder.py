"""Building one trial from a sampled point: its configs (one per seed), its checks, its Ray options, its
seed jobs (one per seed: they run in parallel, each with the trial's Ray options).

Every trial config is composed the one way configs are composed (``grpo.config.load_config``: Hydra's
compose API): the spec's base with the spec's fixed overrides, the sampled parameters, and the keys that
place each seed's run (its save dir, its seed, the checkpoint a retry resumes from, tracking names).
A point whose config breaks a rule, that the backend cannot run, or that the memory planner rejects
raises ``UserError`` with every reason: the driver prunes it before launch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from grpo._fs import RESUME_KEYS, checkpoint_iteration, read_jsonl
from grpo.config import GRPOConfig, load_config
from grpo.engine.rewards.custom import anchored
from grpo.errors import UserError
from grpo.sweep.backends import RayOptions, TrialBackend
from grpo.sweep.execution.trial_storage import RunStorage, join, local_folder, open_storage, run_path, study_location
from grpo.sweep.execution.worker import SeedJob, SeedRun
from grpo.sweep.run.preflight import trial_problems
from grpo.sweep.spec.models import SweepSpec
from grpo.sweep.spec.space import SearchSpace

_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml when present: 10x faster
# Config paths a Ray worker must see as absolute (it may run in another cwd or on another node).
PATH_KEYS = (
    "megatron_training.data_path", "megatron_training.tokenizer_name_or_path", "actor_config.load",
    "engine.eval_data_path",
)  # fmt: skip
RESUME_OVERRIDES = tuple(f"{key}=false" for key in RESUME_KEYS)  # a run resuming from its own checkpoint


@dataclass(frozen=True)
class Segment:
    """What makes a trial a pbt segment for the builder: it stops at the end of its generation
    (``interval``: ``engine.exit_interval``) and, with no checkpoint of its own, starts from its parent's."""

    interval: int
    parent_dir: str | None  # the parent trial's folder; None in generation 0


@dataclass
class TrialPlan:
    """A trial ready to launch: what to run (``jobs``, one per seed), where (``options``, per seed), and
    what to record."""

    jobs: list[SeedJob]
    options: RayOptions
    overrides: list[str]  # the spec's fixed overrides + the sampled parameters, as Hydra overrides
    config: dict[str, Any]  # the first seed's resolved config, as stored with the trial

    @property
    def runs(self) -> list[SeedRun]:
        return [job.run for job in self.jobs]

    @property
    def resumed(self) -> bool:
        """Some seed continues from a checkpoint of the trial this one retries."""
        return any(job.resume for job in self.jobs)

    @property
    def train_iters(self) -> int:
        return int(self.jobs[0].run.cfg.megatron_training.train_iters)

    def write_files(self, trial_dir: Path) -> None:
        """``config.yaml`` and ``overrides.yaml`` in the trial dir (what a person reads to rerun it).

        With trial storage: the marker its seeds look for, and, when the storage is a local (or NFS) path,
        ``runs`` as a link to the trial's runs there, so the report and a person find them as without it."""
        trial_dir.mkdir(parents=True, exist_ok=True)
        (trial_dir / "config.yaml").write_text(yaml.dump(self.config, Dumper=_Dumper, sort_keys=False))
        (trial_dir / "overrides.yaml").write_text(yaml.dump(self.overrides, Dumper=_Dumper, sort_keys=False))
        stored = self.jobs[0].run.storage
        if stored is not None:
            open_storage(stored.study).ensure_marker()
            folder = local_folder(stored.study)
            link = trial_dir / "runs"
            if folder is not None and not link.exists() and not link.is_symlink():
                link.symlink_to(folder / Path(stored.run).parent, target_is_directory=True)


class TrialBuilder:
    """Builds trials for one study (``spec``, its search space, its backend and its composed base config)."""

    def __init__(
        self,
        spec: SweepSpec,
        space: SearchSpace,
        backend: TrialBackend,
        base_cfg: GRPOConfig,
        driver: tuple[str, int],
        *,
        no_plan: bool,
    ):
        self.spec, self.space, self.backend, self.base_cfg = spec, space, backend, base_cfg
        self.driver_host, self.driver_pid = driver
        self.no_plan = no_plan
        self.base_seed = int(base_cfg.megatron_training.seed)
        # The study's folder in trial storage (None: runs live in the trial dirs, on a shared file system).
        self.storage = study_location(spec.trial_storage, spec.study) if spec.trial_storage else None

    def _sampling_seed(self, seed: int) -> list[str]:
        """The rollout sampler's seed moves with the run's seed: replicates that shared vLLM's (or the engine's)
        sampling stream would not be independent (MindSpeed-RL seeds Megatron and vLLM separately)."""
        base = self.base_cfg.generate_config.sampling_config.seed
        return [] if base is None else [f"generate_config.sampling_config.seed={base + seed - self.base_seed}"]

    def seeds(self, offsets: list[int]) -> list[int]:
        """Seed numbers: the base config's seed plus each offset (``range(spec.seeds)`` for a search trial)."""
        return [self.base_seed + k for k in offsets]

    def build(
        self,
        number: int,
        params: dict[str, Any],
        trial_dir: Path,
        resume_from: str | None,
        seeds: list[int],
        *,
        segment: Segment | None = None,
        schedule: dict[str, dict[int, Any]] | None = None,
        promoted: str | None = None,
    ) -> TrialPlan:
        """The plan of trial ``number`` running ``seeds``; UserError (every problem) when it must not launch.

        Seed ``k`` of the list runs in ``runs/seed<k>``; a retry (``resume_from``: the retried trial's dir)
        continues each seed from that trial's ``runs/seed<k>/ckpt`` when it has a checkpoint there. With trial
        storage, both live in the study's folder there (``trials/<N>/runs/seed<k>``, ``N`` the trial's number,
        the name of its dir) and the worker runs the seed in node-local scratch (grpo.sweep.execution.trial_storage).
        """
        spec = self.spec
        base, fixed = self.base_and_overrides(promoted)
        sampled = self.space.to_overrides(params)
        param_overrides = list(sampled)
        if not self.backend.keeps_relative_paths:
            param_overrides += absolute_paths(self.base_cfg, sampled)
        if segment is not None:  # a pbt segment stops (with a checkpoint) at the end of its generation
            param_overrides.append(f"engine.exit_interval={segment.interval}")
        # What a seed resumes from, first with a checkpoint: the trial's own retry folder, then a branch's parent.
        sources = [s for s in (resume_from, segment.parent_dir if segment is not None else None) if s]
        jobs = []
        for k, seed in enumerate(seeds):
            run_dir = (trial_dir / "runs" / f"seed{k}").resolve()
            stored = RunStorage(self.storage, run_path(number, k)) if self.storage else None
            # With trial storage the config names the run's place there; the worker swaps in its scratch path.
            save = _quoted(join(stored.location, "ckpt")) if stored else str(run_dir / "ckpt")
            extra = [
                f"actor_config.save={save}",
                f"megatron_training.seed={seed}",
                *self._sampling_seed(seed),
                f"engine.keep_checkpoints={spec.keep_checkpoints or 'null'}",
            ]
            extra += tracking_overrides(spec, number, k, sampled)
            resume = False
            if stored is not None:
                for source in sources:
                    old_run = run_path(int(Path(source).name), k)
                    if open_storage(stored.study).iteration(old_run) is not None:
                        # actor_config.load stays the config's own (a backend may check it names weights here):
                        # the worker points it at the checkpoint it downloads into scratch.
                        extra += list(RESUME_OVERRIDES)
                        stored, resume = replace(stored, resume=old_run), True
                        break
            else:
                for source in sources:
                    old_ckpt = (Path(source) / "runs" / f"seed{k}" / "ckpt").resolve()
                    if checkpoint_iteration(old_ckpt) is not None:
                        extra += [f"actor_config.load={old_ckpt}", *RESUME_OVERRIDES]
                        resume = True
                        break
            if segment is not None and segment.parent_dir is not None and not resume:
                raise UserError(
                    f"trial {number} branches from {segment.parent_dir}, which holds no checkpoint for seed {k}"
                )
            cfg = load_config(base, [*fixed, *param_overrides, *extra])
            # A user reward file is relative to the spec's folder; the trial may run anywhere (issue 41).
            at = spec.path.parent if spec.path else Path.cwd()
            cfg.rl_config.verifier_function = [anchored(n, at) for n in cfg.rl_config.verifier_function]
            if schedule:
                cfg.schedule = schedule  # validated on assignment (grpo.config.schedule)
            run = SeedRun(seed=seed, cfg=cfg, run_dir=str(run_dir), storage=stored)
            jobs.append(SeedJob(number, k, self.backend, run, resume, self.driver_host, self.driver_pid))
        first = jobs[0].run.cfg
        problems = trial_problems(spec, first, self.backend, no_plan=self.no_plan)
        if problems:
            raise UserError(problems[0], problems)
        options = self.backend.resources(first)
        overrides = [*fixed, *sampled]
        return TrialPlan(jobs, options, overrides, first.to_dict())

    def base_and_overrides(self, promoted: str | None) -> tuple[str, list[str]]:
        """The config a trial composes: the spec's base and overrides, or a promoted confirmation's
        (``confirm.base`` and ``confirm.overrides``)."""
        confirm = self.spec.confirm
        if promoted is not None and confirm is not None and confirm.base is not None:
            return promoted, list(confirm.overrides)
        return self.spec.base, list(self.spec.overrides)


def _quoted(value: str) -> str:
    """A Hydra override value quoted (a URI's ``?``, ``=`` and ``:`` are no grammar then)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def absolute_paths(cfg: GRPOConfig, overrides: list[str]) -> list[str]:
    """Overrides that make the config's relative paths absolute against the driver's working directory
    (keys the sampled ``overrides`` already set are left alone)."""
    out = []
    for key in PATH_KEYS:
        if any(o.startswith(f"{key}=") for o in overrides):
            continue
        section, name = key.split(".")
        value = getattr(getattr(cfg, section), name)
        if not isinstance(value, str) or not value or Path(value).is_absolute():
            continue
        path = (Path.cwd() / value).resolve()
        if path.exists() or key == "megatron_training.data_path":  # data is generated on first use
            out.append(f"{key}={path}")
    return out


def tracking_overrides(spec: SweepSpec, number: int, seed_index: int, sampled: list[str] | None = None) -> list[str]:
    """W&B / TensorBoard / SwanLab keys of one seed's run, as the spec's ``tracking`` section asks: the run is named
    ``trial-N-seedK`` in both (TensorBoard: its folder ``tensorboard/trial-N-seedK``) and carries the
    trial's ``sampled`` overrides as ``engine.trial_params`` (TensorBoard's HParams)."""
    out = []
    if spec.tracking.wandb != "off" or spec.tracking.tensorboard or spec.tracking.swanlab != "off":
        out.append(f"rl_config.wandb_exp_name=trial-{number}-seed{seed_index}")
        if sampled:  # Hydra's dict grammar takes dotted keys: {rl_config.clip_ratio:0.2,layout:tp2}
            out.append("engine.trial_params={" + ",".join(o.replace("=", ":", 1) for o in sampled) + "}")
    if spec.tracking.wandb != "off":
        out += [
            "rl_config.use_wandb=true",
            f"rl_config.wandb_project={spec.tracking.project}",
            f"engine.wandb_group={spec.study}",  # the study's runs side by side in W&B's group view
            f"engine.wandb_mode={spec.tracking.wandb}",  # offline stays offline whatever the environment says
        ]
    if spec.tracking.tensorboard:
        out += ["rl_config.use_tensorboard=true"]
    if spec.tracking.swanlab != "off":  # as W&B: named per trial and seed, the study as group, mode as asked
        out += [
            "rl_config.use_swanlab=true",
            f"rl_config.swanlab_project={spec.tracking.project}",
            f"rl_config.swanlab_exp_name=trial-{number}-seed{seed_index}",
            f"rl_config.swanlab_mode={spec.tracking.swanlab}",
            f"engine.swanlab_group={spec.study}",
        ]
    return out


def adopted_history(resume_from: str, jobs: list[SeedJob]) -> tuple[dict[int, int], list[tuple[int, int, dict]]]:
    """What a retried trial inherits: (seed -> iteration its checkpoint holds, the metric rows up to it).

    Each seed keeps the rows up to its own checkpoint (the seeds of a trial checkpoint independently; a
    seed without one starts over). Rows are what the dead driver persisted (``<old trial>/metrics.jsonl``),
    completed from the old runs' own metrics files: iterations the worker finished and checkpointed but
    whose metrics never reached the driver.
    """
    start_at = {job.run.seed: _resumed_at(job) for job in jobs}
    rows: dict[tuple[int, int], dict] = {}
    for row in read_jsonl(Path(resume_from) / "metrics.jsonl"):
        rows[(row.get("seed", -1), row.get("iteration", 0))] = row
    for job in jobs:
        seed, stored = job.run.seed, job.run.storage
        if stored is not None:  # the old run's own file is in trial storage
            old_rows = open_storage(stored.study).read_jsonl(
                run_path(int(Path(resume_from).name), job.index) + "/metrics.jsonl"
            )
        else:
            old_rows = read_jsonl(Path(resume_from) / "runs" / f"seed{job.index}" / "metrics.jsonl")
        for row in old_rows:
            rows.setdefault((seed, row.get("iteration", 0)), {**row, "seed": seed})
    history = []
    for (seed, iteration), row in sorted(rows.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        if seed in start_at and 0 <= iteration <= start_at[seed]:  # 0: the base policy, evaluated only once
            history.append((seed, iteration, {k: v for k, v in row.items() if k not in ("iteration", "seed")}))
    return start_at, history


def _resumed_at(job: SeedJob) -> int:
    """The iteration a seed job continues from (0: a fresh start)."""
    if not job.resume:
        return 0
    stored = job.run.storage
    if stored is not None and stored.resume is not None:
        return open_storage(stored.study).iteration(stored.resume) or 0
    return checkpoint_iteration(Path(str(job.run.cfg.actor_config.load))) or 0
