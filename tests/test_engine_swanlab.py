"""SwanLab from the engine and the sweep, read back from what SwanLab wrote offline (no network).

An offline SwanLab run is ``<logdir>/run-<time>-<id>/backup.swanlab``: SwanLab's backup file, the records
``swanlab sync`` uploads (a LevelDB-style log of JSON records: header, project, experiment, columns,
scalars, footer), plus ``files/config.yaml``. Read here with SwanLab's own reader (``swanlab.sync`` uses
``DataStore`` and ``ModelsParser`` the same way), so a project, name, tag or metric the SDK did not record
fails here. The MindSpeed side mirrors ``SwanLabLogger._init_swanlab`` (mindspeed_rl/utils/loggers.py):
it passes project, experiment name, logdir and mode, and nothing else.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo.config import load_config
from grpo.errors import UserError

swanlab = pytest.importorskip("swanlab")

SECRET = "swsecret" * 3
KEYS = ["rl_config.use_swanlab=true", "rl_config.swanlab_project=grpo-kl",
        "rl_config.swanlab_exp_name=trial-3-seed0", "rl_config.swanlab_mode=offline"]


def swanlab_backup(path: Path):
    """(project, experiment, scalars, footer) of a backup file, parsed by SwanLab's reader."""
    from swanlab.log.backup.datastore import DataStore
    from swanlab.log.backup.models import ModelsParser

    store = DataStore()
    store.open_for_scan(str(path))
    with ModelsParser() as parser:
        for record in store:
            if record is not None:
                parser.parse_record(record)
    _header, project, experiment, _logs, _runtime, _columns, scalars, _medias, footer = parser.get_parsed()
    return project, experiment, scalars, footer


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from grpo.engine import train

    tmp = tmp_path_factory.mktemp("swanlab")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp)
        mp.setenv("SWANLAB_MODE", "cloud")  # the environment asks for the cloud: the config's offline wins
        mp.setenv("SWANLAB_API_KEY", SECRET)
        mp.setenv("SWANLAB_SAVE_DIR", str(tmp / "keyfolder"))
        cfg = load_config("grpo_trainer_tiny_cpu", [
            "megatron_training.train_iters=2", "engine.eval_every=null", "engine.warm_start_steps=30",
            f"engine.cache_dir={tmp / 'cache'}", "engine.task_size=64", "megatron_training.global_batch_size=4",
            "rl_config.mini_batch_size=2", "rl_config.n_samples_per_prompt=4", "actor_config.micro_batch_size=4",
            *KEYS, "engine.swanlab_group=kl_study", "actor_config.lr=3e-5",
            "engine.trial_params={actor_config.lr:3e-5,rl_config.kl_penalty:low_var_kl}"])
        train(cfg, tmp / "run")
    return tmp / "run"


def test_an_offline_swanlab_run_is_named_grouped_configured_and_complete(run_dir):
    (backup,) = run_dir.glob("swanlog/run-*/backup.swanlab")  # offline despite SWANLAB_MODE=cloud
    project, experiment, scalars, footer = swanlab_backup(backup)
    assert project.name == "grpo-kl"
    assert experiment.name == "trial-3-seed0"
    assert "kl_study" in experiment.tags  # the study (SwanLab 0.6 has no groups; 0.7 on also gets group=)
    final = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()][-1]
    score = {s.step: s.metric["data"] for s in scalars if s.key == "grpo/score/mean"}
    assert sorted(score) == [1, 2] and score[2] == pytest.approx(final["grpo/score/mean"])
    assert footer is not None and footer.success
    config = (backup.parent / "files" / "config.yaml").read_text()
    assert "trial_params" in config and "rl_config.kl_penalty" in config and "low_var_kl" in config
    written = b"".join(p.read_bytes() for p in run_dir.rglob("*") if p.is_file())
    assert SECRET.encode() not in written


def test_init_gets_the_group_where_swanlab_has_one(tmp_path):
    from grpo.engine.swanlab_tracker import init_kwargs

    cfg = load_config("grpo_trainer_tiny_cpu", [*KEYS, "engine.swanlab_group=kl_study"])
    old = init_kwargs(cfg, tmp_path, accepted={"project", "experiment_name", "tags", "config", "logdir", "mode"})
    new = init_kwargs(cfg, tmp_path, accepted={"project", "experiment_name", "group", "tags", "config", "mode"})
    assert "group" not in old and old["tags"] == ["kl_study"] and old["mode"] == "offline"
    assert new["group"] == "kl_study" and new["logdir"] == str(tmp_path / "swanlog")


@pytest.mark.parametrize(("overrides", "expect"), [
    (["rl_config.use_swanlab=true"], "rl_config.use_swanlab=true needs rl_config.swanlab_project (got '')"),
    (KEYS[:2] + KEYS[3:], "rl_config.use_swanlab=true needs rl_config.swanlab_exp_name (got '')"),
    (KEYS[:3], "rl_config.swanlab_mode must be one of cloud, local, offline, disabled"),
    ([*KEYS[:3], "rl_config.swanlab_mode=online"], "(got 'online')"),
])
def test_use_swanlab_without_what_mindspeed_needs_is_one_line(overrides, expect):
    with pytest.raises(UserError) as err:
        load_config("grpo_trainer_tiny_cpu", overrides)
    assert len(err.value.problems) == 1 and expect in err.value.problems[0], err.value.problems


def test_use_swanlab_without_swanlab_installed_is_one_line(monkeypatch, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "swanlab" else real(name, *a))
    with pytest.raises(UserError) as err:
        load_config("grpo_trainer_tiny_cpu", KEYS)
    (line,) = err.value.problems
    assert line.endswith(": rl_config.use_swanlab=true with swanlab_mode=offline: needs SwanLab: "
                         "pip install 'grpo-sweep[swanlab]'"), line
    # a sweep asking for SwanLab is refused at validate too, not at its first trial
    from grpo.sweep.spec.load import load_spec
    from sweep_helpers import write_spec

    with pytest.raises(UserError) as err:
        load_spec(str(write_spec(tmp_path, tracking={"swanlab": "offline"})))
    assert err.value.problems == [f"{tmp_path / 's.yaml'}: tracking.swanlab: needs SwanLab: "
                                  "pip install 'grpo-sweep[swanlab]'"], err.value.problems


def test_a_sweep_names_each_seed_run_groups_the_study_and_passes_it_to_mindspeed(tmp_path, monkeypatch):
    from grpo.config.render import mindspeed_dict
    from grpo.sweep.backends import load_backend
    from grpo.sweep.backends.mindspeed._render import tracking_env
    from grpo.sweep.spec.load import load_spec
    from grpo.sweep.spec.space import SearchSpace
    from grpo.sweep.run.trial_builder import TrialBuilder
    from sweep_helpers import write_spec

    monkeypatch.chdir(tmp_path)
    spec = load_spec(str(write_spec(tmp_path, tracking={"swanlab": "offline", "project": "kl"}, seeds=2,
                                    search={"rl_config.kl_penalty": "choice(kl, low_var_kl)"})))
    builder = TrialBuilder(spec, SearchSpace.from_spec(spec), load_backend(spec),
                           load_config(spec.base, spec.overrides), ("h", 1), no_plan=True)
    plan = builder.build(7, {"rl_config.kl_penalty": "kl"}, tmp_path / "trials" / "7", None, builder.seeds([0, 1]))
    runs = [job.run.cfg for job in plan.jobs]
    assert [cfg.rl_config.swanlab_exp_name for cfg in runs] == ["trial-7-seed0", "trial-7-seed1"]
    assert all(cfg.rl_config.use_swanlab and cfg.rl_config.swanlab_mode == "offline" for cfg in runs)
    assert {cfg.engine.swanlab_group for cfg in runs} == {spec.study}
    assert runs[0].engine.trial_params == {"rl_config.kl_penalty": "kl"}
    assert not runs[0].rl_config.use_wandb
    # MindSpeed-RL: the same keys in its rl_config (SwanLabLogger reads them), the group through the environment
    rendered = mindspeed_dict(runs[0])["rl_config"]
    assert {k: rendered[k] for k in ("use_swanlab", "swanlab_project", "swanlab_exp_name", "swanlab_mode")} == {
        "use_swanlab": True, "swanlab_project": "kl", "swanlab_exp_name": "trial-7-seed0", "swanlab_mode": "offline"}
    assert tracking_env(runs[0]) == {"SWANLAB_GROUP": spec.study}


def test_the_report_names_each_trials_swanlab_run_and_how_to_upload_it(run_dir, tmp_path):
    from grpo.report.tracking import tracking_facts

    trial_dir = tmp_path / "trials" / "3"
    (trial_dir / "runs").mkdir(parents=True)
    (trial_dir / "runs" / "seed0").symlink_to(run_dir)  # the seed run written offline above
    config = load_config("grpo_trainer_tiny_cpu", [*KEYS, "engine.swanlab_group=kl_study"]).to_dict()
    ((label, html),) = tracking_facts(config, 3, trial_dir)
    (folder,) = (trial_dir / "runs").glob("seed0/swanlog/run-*")
    assert label == "SwanLab" and "project grpo-kl, experiments trial-3-seed*, group kl_study (offline)" in html
    assert f"<code>swanlab sync {folder}</code>" in html
    assert tracking_facts({"rl_config": {"use_swanlab": False}}, 3, trial_dir) == []
