"""The mindspeed backend: rendering, checks, environment, and the launch path end to end.

MindSpeed-RL itself cannot run here (it needs Ascend NPUs, Megatron and vLLM), so the end-to-end
tests launch tests/standin_mindspeed/cli/train_grpo.py, a STAND-IN entry point that composes the
rendered config with Hydra as MindSpeed-RL does and prints MindSpeed-style log lines; tests that use
it say so in their names.
"""

import json
import pickle
import time

import pytest
import yaml
from mindspeed_helpers import KEYS, STANDIN, Recorder, config, gone, make_weights, settings_for, standin_pid

from grpo.sweep.backends import TrialFailed, backend_class, load_backend
from grpo.sweep.backends.mindspeed._launch import launch_env
from grpo.sweep.backends.mindspeed._render import render_trial_config
from grpo.sweep.backends.mindspeed.backend import MindSpeedBackend
from grpo.sweep.spec.models import MindSpeedSpec, SweepSpec


@pytest.fixture
def weights(tmp_path):
    return make_weights(tmp_path / "weights")


# ------------------------------------------------------------------------------------- rendering
SEED_KEYS = {  # the parameters of the GRPO parameter reference (shared/seed), by section
    "megatron_training": ["stage", "global_batch_size", "data_path", "tokenizer_name_or_path", "recompute_granularity",
                          "recompute_num_layers", "recompute_method"],
    "actor_config": ["micro_batch_size", "tensor_model_parallel_size", "pipeline_model_parallel_size", "lr",
                     "lr_decay_style", "min_lr", "weight_decay", "lr_warmup_fraction", "clip_grad", "load", "save",
                     "no_load_optim", "no_load_rng", "no_save_optim", "no_save_rng"],
    "rl_config": ["use_integrated_worker", "blocking", "gamma", "lam", "actor_forward_micro_batch_size",
                  "ref_forward_micro_batch_size", "adv_estimator", "kl_penalty", "kl_ctrl_type", "init_kl_coef",
                  "mini_batch_size", "max_prompt_length", "clip_ratio", "entropy_coeff", "n_samples_per_prompt",
                  "guarantee_order", "shuffle_mini_batch", "log_max_throughput", "num_cpus_for_local_task",
                  "actor_resource", "rule_reward", "verifier_function", "verifier_weight", "use_tensorboard",
                  "use_wandb", "wandb_project", "wandb_exp_name", "wandb_save_dir"],
    "generate_config": ["infer_tensor_parallel_size", "infer_pipeline_parallel_size", "infer_expert_parallel_size",
                        "trust_remote_code", "offload_train_optimizer", "offload_train_grad", "offload_train_param",
                        "max_num_seqs", "max_model_len", "max_num_batched_tokens", "enforce_eager", "dtype",
                        "gpu_memory_utilization", "num_scheduler_steps", "sampling_config"],
}
SAMPLING_KEYS = ["logprobs", "max_tokens", "top_p", "top_k", "min_p", "temperature", "detokenize"]
# Seed keys whose default is "not set" (MindSpeed-RL's default applies): set them so they render.
SET_OPTIONAL = ["megatron_training.recompute_granularity=full", "megatron_training.recompute_method=uniform",
                "megatron_training.recompute_num_layers=1", "rl_config.log_max_throughput=true",
                "generate_config.sampling_config.seed=7", "rl_config.init_kl_coef=0.05"]


def test_rendering_lands_every_seed_key_where_mindspeed_expects_it(tmp_path, weights):
    """Compose the written config dir with Hydra, as MindSpeed-RL's hydra.main does, and compare."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    cfg = config(*SET_OPTIONAL)
    plan = render_trial_config(cfg, tmp_path / "run", settings_for(weights), resume=False)
    with initialize_config_dir(config_dir=str(plan.config_dir), version_base=None):
        seen = OmegaConf.to_container(compose(config_name=plan.config_name), resolve=True)
    assert seen["model"]["qwen25_7b"]["num_layers"] == 28 and seen["megatron_training"]["model"] == "qwen25_7b"
    for section, keys in SEED_KEYS.items():
        ours = getattr(cfg, section)
        for key in keys:
            assert key in seen[section], f"{section}.{key} missing"
            if key not in ("load", "save"):
                expected = getattr(ours, key)
                expected = expected.model_dump() if hasattr(expected, "model_dump") else expected
                assert seen[section][key] == expected, f"{section}.{key}"
    for key in SAMPLING_KEYS + ["seed"]:
        assert seen["generate_config"]["sampling_config"][key] == getattr(cfg.generate_config.sampling_config, key)
    # Nothing MindSpeed-RL's config classes would refuse (ValueError: The key: X is missing).
    for section, allowed in (("megatron_training", KEYS["megatron"]), ("actor_config", KEYS["megatron"]),
                             ("rl_config", KEYS["rl"]), ("generate_config", KEYS["generate"])):
        assert [k for k in seen[section] if k != "model" and k not in allowed] == []
    assert "engine" not in seen and "layout" not in seen


def test_fresh_run_loads_the_layouts_checkpoint_and_saves_into_its_own_run_dir(tmp_path, weights):
    cfg = config()  # the base config says load: ./ckpt, save: ./ckpt (MindSpeed-RL's example)
    plan = render_trial_config(cfg, tmp_path / "run", settings_for(weights), resume=False)
    actor = plan.trainer["actor_config"]
    assert actor["load"] == str(weights / "qwen7b-tp2-pp2")
    assert actor["save"] == str((tmp_path / "run" / "ckpt").resolve())  # never the shared checkout's ./ckpt
    assert actor["finetune"] is True and "integrated_mode_config" not in plan.trainer["rl_config"]
    assert plan.trainer["hydra"]["run"]["dir"].startswith(str(tmp_path))


def test_resume_sets_mindspeeds_resume_keys(tmp_path, weights):
    settings = settings_for(weights)
    first = tmp_path / "trials" / "0" / "runs" / "seed0"
    render_trial_config(config(), first, settings, resume=False)
    (first / "ckpt").mkdir(parents=True)
    (first / "ckpt" / "latest_checkpointed_iteration.txt").write_text("4")
    # As the driver retries: load = the failed attempt's save dir, finetune false.
    retry = config(f"actor_config.load={first / 'ckpt'}", "actor_config.finetune=false")
    plan = render_trial_config(retry, tmp_path / "trials" / "1" / "runs" / "seed0", settings, resume=True)
    actor = plan.trainer["actor_config"]
    assert (actor["finetune"], actor["no_load_optim"], actor["no_load_rng"]) == (False, False, False)
    assert actor["load"] == str(first / "ckpt") and plan.start_iteration == 4
    ref = plan.trainer["rl_config"]["integrated_mode_config"]["ref_model_load_path"]
    assert ref == str(weights / "qwen7b-tp2-pp2")  # the reference model keeps the original weights


def test_a_pbt_branch_launches_from_its_parents_checkpoint_cut_at_its_generations_end(tmp_path, weights):
    # MindSpeed-RL has no exit interval: the segment is a resume of the parent's Megatron checkpoint (optimizer
    # and RNG included) with train_iters cut where the generation ends; MindSpeed-RL saves at the last
    # iteration (grpo_trainer_hybrid.py: `iteration % save_interval == 0 or iteration == train_iters`).
    settings = settings_for(weights)
    parent = tmp_path / "trials" / "3" / "runs" / "seed0"
    render_trial_config(config("engine.exit_interval=10"), parent, settings, resume=False)
    (parent / "ckpt").mkdir(parents=True)
    (parent / "ckpt" / "latest_checkpointed_iteration.txt").write_text("20")
    branch = config(
        f"actor_config.load={parent / 'ckpt'}", "actor_config.finetune=false", "engine.exit_interval=10",
        "megatron_training.train_iters=50", "rl_config.clip_ratio=0.28",
    )
    plan = render_trial_config(branch, tmp_path / "trials" / "7" / "runs" / "seed0", settings, resume=True)
    actor = plan.trainer["actor_config"]
    assert actor["load"] == str(parent / "ckpt") and plan.start_iteration == 20
    assert (actor["finetune"], actor["no_load_optim"], actor["no_load_rng"]) == (False, False, False)
    assert plan.trainer["megatron_training"]["train_iters"] == 30  # the generation [20, 30), not the run's 50
    assert plan.trainer["rl_config"]["clip_ratio"] == 0.28  # its explored value, constant over the segment
    assert "engine" not in plan.trainer and "schedule" not in plan.trainer  # grpo-sweep's own keys stay here
    ref = plan.trainer["rl_config"]["integrated_mode_config"]["ref_model_load_path"]
    assert ref == str(weights / "qwen7b-tp2-pp2")  # the reference stays the starting weights
    last = config(f"actor_config.load={parent / 'ckpt'}", "engine.exit_interval=40", "megatron_training.train_iters=50")
    plan = render_trial_config(last, tmp_path / "trials" / "8" / "runs" / "seed0", settings, resume=True)
    assert plan.trainer["megatron_training"]["train_iters"] == 40


def test_resume_without_checkpoint_table_recovers_original_weights_from_the_failed_attempt(tmp_path, weights):
    first = tmp_path / "a" / "runs" / "seed0"
    with_pattern = settings_for(weights)
    render_trial_config(config(), first, with_pattern, resume=False)  # records its original weights
    (first / "ckpt").mkdir(parents=True)
    (first / "ckpt" / "latest_checkpointed_iteration.txt").write_text("2")
    bare = settings_for(weights, checkpoints={})  # weights came from actor_config.load, now the resume path
    retry = config(f"actor_config.load={first / 'ckpt'}")
    plan = render_trial_config(retry, tmp_path / "b", bare, resume=True)
    assert plan.trainer["rl_config"]["integrated_mode_config"]["ref_model_load_path"] == str(weights / "qwen7b-tp2-pp2")


def test_resume_with_no_checkpoint_anywhere_starts_afresh(tmp_path, weights):
    plan = render_trial_config(config(), tmp_path / "run", settings_for(weights), resume=True)
    assert plan.start_iteration == 0 and plan.trainer["actor_config"]["finetune"] is True
    assert plan.trainer["actor_config"]["load"] == str(weights / "qwen7b-tp2-pp2")


# ----------------------------------------------------------------------------------------- checks
def test_check_accepts_a_layout_with_its_converted_checkpoint(weights):
    assert MindSpeedBackend(settings_for(weights)).check(config()) == []


def test_check_names_the_layout_and_the_missing_checkpoint(weights):
    problems = MindSpeedBackend(settings_for(weights)).check(config(layout="tp4_pp2"))
    assert len(problems) == 1
    assert "layout tp4_pp2" in problems[0] and str(weights / "qwen7b-tp4-pp2") in problems[0]
    assert "mindspeed.checkpoints.pattern" in problems[0] and "TP4 PP2" in problems[0]


def test_check_refuses_a_checkpoint_converted_for_another_split(weights):
    settings = settings_for(weights, checkpoints={"tp2_pp2": str(weights / "qwen7b-tp4-pp1")})
    (problem,) = MindSpeedBackend(settings).check(config())
    assert "converted for TP4 PP1" in problem and "needs TP2 PP2" in problem and "checkpoints.tp2_pp2" in problem


def test_check_reports_checkout_entry_python_and_pattern_problems(tmp_path, weights):
    assert "mindspeed.path: not set" in MindSpeedBackend(MindSpeedSpec()).check(config())[0]
    # A checkout missing on this machine is a warning, not an error (issue 11: the driver often runs away
    # from the NPU nodes); run() refuses it on the node that launches (tests/test_mindspeed_launch_checks.py).
    away = MindSpeedBackend(settings_for(weights, path=tmp_path / "nope"))
    assert away.check(config()) == []
    missing = away.launch_warnings(config())
    assert "no such directory" in missing[0] and str(tmp_path / "nope") in missing[0]
    odd = settings_for(weights, entry="cli/train_ppo.py", python="/no/python", checkpoints={"pattern": "/x/{size}"})
    problems = MindSpeedBackend(odd).check(config())
    assert any("mindspeed.entry: cli/train_ppo.py not found" in p for p in problems)
    assert any("mindspeed.python: /no/python" in p for p in problems)
    assert any("mindspeed.checkpoints.pattern: bad placeholder 'size'" in p for p in problems)


def test_registry_resources_and_settings_travel_with_the_backend(weights):
    backend = backend_class("mindspeed")()
    assert backend.resources(config()) == {"num_cpus": 1, "resources": {"npu_slots": 16.0}}
    spec = SweepSpec.model_validate({"study": "s", "base": "grpo_trainer_qwen25_7b_A3", "objective": "grpo/score/mean",
                                     "backend": "mindspeed", "mindspeed": {"path": str(STANDIN), "stall_timeout": 5}})
    back = pickle.loads(pickle.dumps(load_backend(spec)))  # what Ray does to the job that carries it
    assert back.settings.checkout == STANDIN.resolve() and back.settings.stall_timeout == 5.0


def test_launch_env_outside_ray(monkeypatch):
    monkeypatch.setenv("RAY_JOB_ID", "01000000")  # a Ray worker's own flag: never inherited by a new driver
    env = launch_env(MindSpeedSpec(env={"HCCL_EXEC_TIMEOUT": "3600", "HYDRA_FULL_ERROR": "0"}), "10.0.0.1:6379")
    assert env["RAY_ADDRESS"] == "10.0.0.1:6379" and "RAY_JOB_ID" not in env
    assert env["HCCL_EXEC_TIMEOUT"] == "3600" and env["HYDRA_FULL_ERROR"] == "0"  # the spec's env wins
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    env = launch_env(MindSpeedSpec(), "local")
    assert "RAY_ADDRESS" not in env and env["HYDRA_FULL_ERROR"] == "1" and env["PYTHONUNBUFFERED"] == "1"


# ------------------------------------------------------------------------ end to end, stand-in
def test_run_streams_metrics_with_standin_mindspeed(tmp_path, weights):
    # A failure that only triggers for TP4 must not fire for this TP2 trial; a helper child that
    # outlives the main process (and holds its stdout open) must not keep the trial running.
    pidfile = tmp_path / "child.pid"
    settings = settings_for(weights, stall_timeout=20.0, env={
        "GRPO_STANDIN_COLOR": "1", "GRPO_STANDIN_CHILD_PIDFILE": str(pidfile),
        "GRPO_STANDIN_FAIL": "hccl_timeout@2:actor_config.tensor_model_parallel_size=4"})
    report = Recorder()
    run_dir = tmp_path / "run"
    started = time.monotonic()
    summary = MindSpeedBackend(settings).run(config(), run_dir, report, resume=False)
    assert time.monotonic() - started < 15 and gone(int(pidfile.read_text()))
    assert [i for i, _ in report.calls] == [1, 2, 3, 4, 5, 6]
    scores = [m["grpo/score/mean"] for _, m in report.calls]
    assert scores == sorted(scores) and scores[-1] > scores[0] + 0.1
    assert all({"e2e_tps", "actor/lr", "timing/all", "actor/pg_loss"} <= set(m) for _, m in report.calls)
    rows = [json.loads(t) for t in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4, 5, 6] and rows[-1]["grpo/score/mean"] == scores[-1]
    log = (run_dir / "train.log").read_text()
    assert "iteration: 6 / 6" in log and "\x1b[" not in log  # every line kept, colours stripped
    assert (run_dir / "ckpt" / "latest_checkpointed_iteration.txt").read_text() == "6"
    assert summary["iterations"] == 6 and summary["stopped_early"] is False and summary["returncode"] == 0


def test_pruning_kills_the_whole_process_group_with_standin_mindspeed(tmp_path, weights):
    pidfile = tmp_path / "child.pid"
    settings = settings_for(weights, kill_grace=1.0, env={
        "GRPO_STANDIN_ITER_S": "0.05", "GRPO_STANDIN_CHILD_PIDFILE": str(pidfile),
        "GRPO_STANDIN_IGNORE_SIGTERM": "1"})  # so the grace period runs out and SIGKILL follows
    report = Recorder(stop_at=3)
    started = time.monotonic()
    summary = MindSpeedBackend(settings).run(config(iters=1000), tmp_path / "run", report, resume=False)
    assert summary["stopped_early"] is True and summary["iterations"] == 3
    assert [i for i, _ in report.calls] == [1, 2, 3]
    assert gone(int(pidfile.read_text())) and gone(standin_pid(tmp_path / "run"))
    assert time.monotonic() - started < 20


def test_hccl_timeout_line_fails_the_trial_with_standin_mindspeed(tmp_path, weights):
    # This run also prints MindSpeed-RL <= 2.0's metric names (tokens/p/s, grpo/lr ...).
    settings = settings_for(weights, env={"GRPO_STANDIN_ITER_S": "0.01", "GRPO_STANDIN_FAIL": "hccl_timeout@3",
                                          "GRPO_STANDIN_NAMES": "old"})
    report = Recorder()
    with pytest.raises(TrialFailed) as failed:
        MindSpeedBackend(settings).run(config(), tmp_path / "run", report, resume=False)
    assert failed.value.reason.startswith("HCCL timeout (exit code 1): EI0002:")
    assert any("Notify register times out" in line for line in failed.value.last_log_lines)
    assert [i for i, _ in report.calls] == [1, 2]
    assert "tokens/p/s : " in (tmp_path / "run" / "train.log").read_text()
    metrics = report.calls[-1][1]
    assert {"e2e_tps", "vllm_tps", "actor/lr", "actor/grad_norm"} <= set(metrics) and "tokens/p/s" not in metrics


def test_nan_loss_fails_the_trial_as_diverged_with_standin_mindspeed(tmp_path, weights):
    settings = settings_for(weights, env={"GRPO_STANDIN_ITER_S": "0.01", "GRPO_STANDIN_FAIL": "nan@2"})
    report = Recorder()
    with pytest.raises(TrialFailed) as failed:
        MindSpeedBackend(settings).run(config(iters=50), tmp_path / "run", report, resume=False)
    assert failed.value.reason == "training diverged: actor/pg_loss is nan at iteration 2"
    assert [i for i, _ in report.calls] == [1] and gone(standin_pid(tmp_path / "run"))


def test_stall_fails_the_trial_and_kills_it_with_standin_mindspeed(tmp_path, weights):
    # The stall clock runs from launch: the stand-in's start-up (about 1-2 s) must fit in it.
    settings = settings_for(weights, stall_timeout=4.0, kill_grace=1.0,
                            env={"GRPO_STANDIN_ITER_S": "0.01", "GRPO_STANDIN_FAIL": "stall@2"})
    with pytest.raises(TrialFailed) as failed:
        MindSpeedBackend(settings).run(config(), tmp_path / "run", Recorder(), resume=False)
    assert failed.value.reason.startswith("stalled: no output for")
    assert gone(standin_pid(tmp_path / "run"))


def test_a_bad_key_fails_like_mindspeed_with_standin_mindspeed(tmp_path, weights, monkeypatch):
    """The stand-in refuses unknown keys as MindSpeed-RL's config classes do."""
    from grpo.sweep.backends.mindspeed import _render as mindspeed

    real = mindspeed.mindspeed_dict

    def misspelt(cfg):
        data = real(cfg)
        data["rl_config"]["clip_rato"] = data["rl_config"].pop("clip_ratio")
        return data

    monkeypatch.setattr(mindspeed, "mindspeed_dict", misspelt)
    with pytest.raises(TrialFailed) as failed:
        MindSpeedBackend(settings_for(weights)).run(config(iters=2), tmp_path / "run", Recorder(), resume=False)
    assert "ValueError: The key: clip_rato is missing" in failed.value.reason


def test_failed_run_resumes_from_its_checkpoint_with_standin_mindspeed(tmp_path, weights):
    marker = tmp_path / "failed-once"
    settings = settings_for(weights, env={"GRPO_STANDIN_ITER_S": "0.01", "GRPO_STANDIN_FAIL": "exit3@5",
                                          "GRPO_STANDIN_FAIL_ONCE": str(marker)})
    run_dir = tmp_path / "run"
    first = Recorder()
    with pytest.raises(TrialFailed):
        MindSpeedBackend(settings).run(config(), run_dir, first, resume=False)
    assert [i for i, _ in first.calls] == [1, 2, 3, 4] and marker.exists()
    second = Recorder()
    summary = MindSpeedBackend(settings).run(config(), run_dir, second, resume=True)
    assert [i for i, _ in second.calls] == [5, 6] and summary["resumed_from"] == 4
    rows = [json.loads(t)["iteration"] for t in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows == [1, 2, 3, 4, 5, 6]
    rendered = yaml.safe_load((run_dir / "mindspeed_config" / "grpo_trainer.yaml").read_text())
    assert rendered["actor_config"]["finetune"] is False and rendered["actor_config"]["no_load_optim"] is False
    assert "loading checkpoint from" in (run_dir / "train.log").read_text()
