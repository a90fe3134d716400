"""Loading valid specs: defaults, objective forms, CLI overrides, storage, fingerprint, shipped sweeps."""

from __future__ import annotations

import textwrap
from pathlib import Path

import optuna
import pytest

from grpo.sweep.spec.load import load_spec, looks_like_spec
from grpo.sweep.spec.models import SweepSpec
from grpo.sweep.spec.space import SearchSpace
from grpo.sweep.study.store import fingerprint, make_storage

REPO = Path(__file__).resolve().parents[1]
SPEC = """\
study: s1
base: grpo_trainer_tiny_cpu
search:
  rl_config.init_kl_coef: tag(log, interval(1e-4, 1e-1))
  rl_config.kl_penalty: choice(kl, mse)
objective: grpo/score/mean
"""


def write(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_defaults(tmp_path):
    spec = load_spec(write(tmp_path, SPEC))
    assert (spec.sampler.name, spec.sampler.seed, spec.pruner.name, spec.pruner.warmup_steps) == ("tpe", None, "median", 0)
    assert (spec.trials, spec.concurrency, spec.seeds, spec.retries, spec.timeout_per_trial) == (20, 1, 1, 1, None)
    assert spec.backend == "embedded" and spec.cluster.address == "local" and spec.storage is None
    assert (spec.tracking.wandb, spec.tracking.tensorboard) == ("off", False)
    assert (spec.plan.device_memory_gb, spec.plan.enabled) == (64, True)
    assert spec.mindspeed.entry == "cli/train_grpo.py" and spec.mindspeed.stall_timeout == 1800
    assert spec.study_dir == Path("studies/s1")
    assert spec.path == tmp_path / "spec.yaml" and spec.base == "grpo_trainer_tiny_cpu"
    assert spec.search["rl_config.kl_penalty"].values == "choice(kl, mse)" and spec.search["rl_config.kl_penalty"].when is None


@pytest.mark.parametrize(
    "text, expected",
    [
        ("objective: grpo/score/mean", [("grpo/score/mean", "maximize", "last", None)]),
        ("objective: {metric: actor/pg_loss, direction: minimize, reduce: min}", [("actor/pg_loss", "minimize", "min", None)]),
        ("objective: {metric: m, reduce: mean_last_k}", [("m", "maximize", "mean_last_k", 5)]),
        ("objective: [a, {metric: b, reduce: auc}, {metric: c, reduce: mean_last_k, k: 3}]",
         [("a", "maximize", "last", None), ("b", "maximize", "auc", None), ("c", "maximize", "mean_last_k", 3)]),
    ],
)
def test_objective_forms(tmp_path, text, expected):
    spec = load_spec(write(tmp_path, SPEC.replace("objective: grpo/score/mean", text)))
    assert [(o.metric, o.direction, o.reduce, o.k) for o in spec.objectives] == expected
    assert spec.objectives[-1].reducer().reduce([1.0, 3.0]) in (1.0, 2.0, 3.0)


def test_yaml_off_is_wandb_off(tmp_path):
    spec = load_spec(write(tmp_path, SPEC + "tracking: {wandb: off, tensorboard: true}\n"))
    assert spec.tracking.wandb == "off" and spec.tracking.tensorboard is True


def test_cli_overrides(tmp_path):
    spec = load_spec(write(tmp_path, SPEC + "cluster: {address: auto}\n"), address="ray://head:10001", concurrency=4, trials=7)
    assert (spec.cluster.address, spec.concurrency, spec.trials) == ("ray://head:10001", 4, 7)


def test_base_as_a_path_beside_the_spec(tmp_path):
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "mine.yaml").write_text((REPO / "configs" / "grpo_trainer_tiny_cpu.yaml").read_text())
    spec = load_spec(write(tmp_path, SPEC.replace("grpo_trainer_tiny_cpu", "cfg/mine.yaml")))
    assert spec.base == str((tmp_path / "cfg" / "mine.yaml").resolve())


def test_base_as_a_path_from_the_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    sub = tmp_path / "deep"
    sub.mkdir()
    spec = load_spec(write(sub, SPEC.replace("grpo_trainer_tiny_cpu", "configs/grpo_trainer_tiny_cpu.yaml")))
    assert spec.base == str(REPO / "configs" / "grpo_trainer_tiny_cpu.yaml")


def test_storage_url_and_make_storage_write_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = load_spec(write(tmp_path, SPEC))
    assert spec.storage_url() == "journal:studies/s1/journal.log"
    assert not (tmp_path / "studies").exists()  # validating writes nothing
    storage = make_storage(spec)
    assert isinstance(storage, optuna.storages.JournalStorage)
    study = optuna.create_study(study_name="s1", storage=storage)
    study.enqueue_trial({"x": 1})
    assert (tmp_path / "studies" / "s1" / "journal.log").is_file()

    spec = load_spec(write(tmp_path, SPEC + "storage: sqlite:///db/s1.db\n"))
    assert spec.storage_url() == "sqlite:///db/s1.db"
    storage = make_storage(spec)
    assert isinstance(storage, optuna.storages.RDBStorage)
    optuna.create_study(study_name="s1", storage=storage)
    assert (tmp_path / "db" / "s1.db").is_file()

    spec = load_spec(write(tmp_path, SPEC + "storage: journal:elsewhere/j.log\n"))
    make_storage(spec)
    assert (tmp_path / "elsewhere").is_dir()


def test_fingerprint(tmp_path):
    base = fingerprint(load_spec(write(tmp_path, SPEC)))
    same = [
        SPEC + "trials: 3\nconcurrency: 4\nseeds: 2\nsampler: random\npruner: none\n",
        SPEC.replace("interval(1e-4, 1e-1)", "interval(0.0001,   0.1)"),  # same distribution, other spelling
    ]
    for text in same:
        assert fingerprint(load_spec(write(tmp_path, text))) == base
    changed = [
        SPEC.replace("interval(1e-4, 1e-1)", "interval(1e-4, 1e-2)"),
        SPEC.replace("choice(kl, mse)", "choice(kl, mse, abs)"),
        SPEC + "overrides: [megatron_training.train_iters=5]\n",
        SPEC.replace("objective: grpo/score/mean", "objective: {metric: grpo/score/mean, reduce: auc}"),
        SPEC.replace("grpo_trainer_tiny_cpu", "grpo_trainer_qwen25_7b_A3"),
        SPEC.replace("search:\n", "search:\n  rl_config.clip_ratio: choice(0.1, 0.2)\n"),
        SPEC.replace("search:\n", "search:\n  rl_config.epochs: choice(1, 2)\n"),
        SPEC.replace("search:\n", "search:\n  rl_config.epochs: choice(1, 2)\n").replace(
            "rl_config.kl_penalty: choice(kl, mse)",
            "rl_config.kl_penalty: {values: 'choice(kl, mse)', when: {rl_config.epochs: 2}}"),
    ]
    prints = {fingerprint(load_spec(write(tmp_path, text))) for text in changed}
    assert base not in prints and len(prints) == len(changed)


def test_to_dict_round_trips(tmp_path):
    spec = load_spec(write(tmp_path, SPEC + "pruner: {name: median, warmup_steps: 2}\n"))
    again = SweepSpec.model_validate(spec.to_dict())
    assert again.to_dict() == spec.to_dict()
    assert spec.to_dict()["objective"] == [{"metric": "grpo/score/mean", "direction": "maximize", "reduce": "last", "k": None}]


def test_looks_like_spec(tmp_path):
    assert looks_like_spec(str(write(tmp_path, SPEC)))
    assert looks_like_spec(str(write(tmp_path, "search:\n  a: [1, 2\n", name="broken.yaml")))
    assert not looks_like_spec(str(REPO / "configs" / "grpo_trainer_tiny_cpu.yaml"))
    assert not looks_like_spec("grpo_trainer_tiny_cpu")
    assert not looks_like_spec(str(tmp_path / "missing.yaml"))
    assert not looks_like_spec(str(tmp_path))
    assert not looks_like_spec(str(write(tmp_path, "- 1\n", name="list.yaml")))


SHIPPED = sorted(p for p in (REPO / "sweeps").glob("*.yaml") if p.name != "layout_study.yaml")


def test_the_draft_sweeps_are_shipped():
    assert {p.name for p in SHIPPED} >= {"kl_study.yaml", "clip_study.yaml", "sampling_study.yaml", "quickstart.yaml"}


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_shipped_sweep_loads(path):
    spec = load_spec(path)
    assert spec.study == path.stem
    space = SearchSpace.from_spec(spec)
    assert len(space) >= 1
    study = optuna.create_study(directions=spec.directions)
    for _ in range(3):
        trial = study.ask()
        assert space.to_overrides(space.suggest(trial))


def test_kl_study_is_the_kl_study():
    spec = load_spec(REPO / "sweeps" / "kl_study.yaml")
    dists = SearchSpace.from_spec(spec).distributions()
    assert dists["rl_config.init_kl_coef"] == optuna.distributions.FloatDistribution(1e-4, 0.1, log=True)
    assert set(dists["rl_config.kl_penalty"].choices) == {"kl", "abs", "mse", "low_var_kl"}
    assert spec.base == "grpo_trainer_tiny_cpu"
