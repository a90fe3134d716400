"""backend verl does what its key table says, read from what verl itself resolves: the job's overrides (as
``VerlBackend.launch_overrides`` writes them, rows included) composed by Hydra over verl 0.9.1's ``ppo_trainer``,
validated by ``validate_config`` and turned into verl's dataclasses (``omega_conf_to_dataclass``), and where verl
has a function for the thing (its sampler, its loss aggregation, its GRPO advantage) that function run on it."""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path

import pytest

from grpo.config import load_config
from grpo.sweep.backends._base import TrialFailed
from grpo.sweep.backends.verl import _render, _validate
from grpo.sweep.backends.verl.backend import VerlBackend
from grpo.sweep.backends.verl.log import project_metrics

pytest.importorskip("verl")
torch = pytest.importorskip("torch")
pq = pytest.importorskip("pyarrow.parquet")
TINY = "grpo_trainer_tiny_cpu"


def _resolved(cfg, run_dir: Path):
    """(verl's validated config, the launch) for one trial, its rows written into ``run_dir``."""
    launch = VerlBackend().launch_overrides(cfg, run_dir)
    return _validate.validate(launch.overrides), launch


def _dataclass(node):
    from verl.utils.config import omega_conf_to_dataclass

    return omega_conf_to_dataclass(node)


def _prompts(path: str) -> list[str]:
    return [row[-1]["content"] for row in pq.read_table(path).column("prompt").to_pylist()]


def test_held_out_rows_are_the_other_backends_held_out_prompts(tmp_path):
    """data.val_files holds the split's validation part of data_path (the embedded engine's held-out set), never a
    training row; data.train_files the rest."""
    from grpo.engine.data import read_examples, split_by_percent

    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+{a}=?", "label": str(2 * a)}) + "\n" for a in range(40)))
    cfg = load_config(TINY, ["engine.task=dataset", f"megatron_training.data_path={data}",
                             "megatron_training.split='80,20,0'", "engine.eval_every=5"])  # fmt: skip
    composed, launch = _resolved(cfg, tmp_path / "run")
    train, held_out = split_by_percent(read_examples(str(data)), "80,20,0")
    assert composed.data.val_files != composed.data.train_files
    assert _prompts(composed.data.val_files) == [e.prompt for e in held_out] and len(held_out) == 8
    assert _prompts(composed.data.train_files) == [e.prompt for e in train]
    assert launch.val_sources == {"grpo_sweep": 8}


def test_the_users_own_validation_file_is_the_held_out_set(tmp_path):
    data, held = tmp_path / "train.jsonl", tmp_path / "held.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+1=?", "label": str(a + 1)}) + "\n" for a in range(40)))
    held.write_text("".join(json.dumps({"prompt": f"{a}*2=?", "label": str(2 * a)}) + "\n" for a in range(5)))
    cfg = load_config(TINY, ["engine.task=dataset", f"megatron_training.data_path={data}",
                             f"engine.eval_data_path={held}", "engine.eval_every=5"])  # fmt: skip
    composed, _ = _resolved(cfg, tmp_path / "run")
    assert _prompts(composed.data.val_files) == [f"{a}*2=?" for a in range(5)]


def test_evaluation_samples_as_the_engines_eval_acc(tmp_path):
    """verl's val_kwargs default to greedy; eval/acc on the engine samples EVAL_SAMPLES responses per held-out
    prompt with the rollout's own parameters (Trainer.evaluate), so verl's RolloutConfig says the same."""
    from grpo.engine.trainer import Run

    assert inspect.signature(Run.evaluate).parameters["samples"].default == _render.EVAL_SAMPLES
    cfg = load_config(TINY, ["generate_config.sampling_config.temperature=0.9", "generate_config.sampling_config.top_p=0.8"])
    composed, _ = _resolved(cfg, tmp_path / "run")
    val = _dataclass(composed.actor_rollout_ref.rollout).val_kwargs
    assert (val.do_sample, val.n, val.temperature, val.top_p) == (True, _render.EVAL_SAMPLES, 0.9, 0.8)
    # verl's validation metrics under the project's names, each data source weighted by its held-out rows
    logged = {"val-core/a/acc/mean@4": 1.0, "val-core/b/acc/mean@4": 0.0, "val-aux/a/reward/mean@4": 0.3}
    ours = project_metrics(logged, {"a": 3, "b": 1})
    assert ours["eval/acc"] == 0.75 and ours["eval/prompts"] == 4.0


def test_epochs_cover_train_iters_and_fewer_rows_than_a_batch_are_refused(tmp_path):
    """verl stops after trainer.total_epochs epochs of len(train) // train_batch_size steps: they must cover
    train_iters (verl's default of 30 epochs would end a 40-row run after 30 steps)."""
    cfg = load_config(TINY, ["engine.task_size=40", "megatron_training.global_batch_size=32",
                             "megatron_training.train_iters=45"])  # fmt: skip
    composed, _ = _resolved(cfg, tmp_path / "run")
    per_epoch = pq.read_metadata(composed.data.train_files).num_rows // composed.data.train_batch_size
    assert per_epoch == 1 and composed.trainer.total_epochs * per_epoch >= 45
    assert composed.trainer.total_training_steps == 45

    small = load_config(TINY, ["engine.task_size=20", "megatron_training.global_batch_size=32"])
    (line,) = VerlBackend().check(small)
    assert line == (
        f"configs/{TINY}.yaml: megatron_training.data_path: 20 training rows are fewer than one verl step of 32 "
        "prompts (data.train_batch_size; verl drops an incomplete last batch, so it would train on nothing)"
    )
    with pytest.raises(TrialFailed, match="20 training rows are fewer than one verl step"):
        VerlBackend().launch_overrides(small, tmp_path / "small")


def test_evaluation_without_held_out_rows_is_refused(tmp_path):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+1=?", "label": str(a + 1)}) + "\n" for a in range(40)))
    cfg = load_config(TINY, ["engine.task=dataset", f"megatron_training.data_path={data}",
                             "megatron_training.split='100,0,0'", "engine.eval_every=5"])  # fmt: skip
    (line,) = VerlBackend().check(cfg)
    assert "engine.eval_every: no held-out rows to evaluate on" in line


def test_dr_grpo_divides_by_the_engines_constant(tmp_path):
    """Dr. GRPO on verl: seq-mean-token-sum-norm with loss_scale_factor = max_tokens, so verl's own agg_loss gives
    the engine's loss whatever a micro batch's padded length (without it, verl divides by that length)."""
    from verl.trainer.ppo.core_algos import agg_loss

    from grpo.engine.loss import aggregate

    cfg = load_config(TINY, ["algorithm=dr_grpo"])
    composed, _ = _resolved(cfg, tmp_path / "run")
    actor = _dataclass(composed.actor_rollout_ref.actor)
    max_tokens = cfg.generate_config.sampling_config.max_tokens
    assert (actor.loss_agg_mode, actor.loss_scale_factor) == ("seq-mean-token-sum-norm", max_tokens)
    assert _dataclass(composed.algorithm).norm_adv_by_std_in_grpo is False  # group_norm_no_std
    gen = torch.Generator().manual_seed(0)
    for padded in (7, max_tokens):  # a micro batch padded to its longest response, or to max_tokens
        x = torch.randn(4, padded, generator=gen)
        mask = (torch.arange(padded) < torch.tensor([[2], [5], [7], [3]])).float()
        verl = agg_loss(x, mask, actor.loss_agg_mode, loss_scale_factor=actor.loss_scale_factor)
        assert torch.allclose(verl, aggregate(x, mask, "seq-mean-token-sum-norm", norm=max_tokens))


def test_group_norm_no_std_is_verls_advantage_without_the_std(tmp_path):
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    from grpo.engine.loss import group_mean_advantages

    composed, _ = _resolved(load_config(TINY, ["engine.advantage_estimator=group_norm_no_std"]), tmp_path / "run")
    algo = _dataclass(composed.algorithm)
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    rewards = torch.zeros(6, 3)
    rewards[:, -1] = scores
    adv, _ = compute_grpo_outcome_advantage(rewards, torch.ones(6, 3), index=__import__("numpy").array(
        [0, 0, 0, 1, 1, 1]), norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo)  # fmt: skip
    assert torch.allclose(adv[:, 0], group_mean_advantages(scores, 3))


def test_gspo_aggregates_as_verls_gspo_recipe(tmp_path):
    composed, _ = _resolved(load_config(TINY, ["algorithm=gspo"]), tmp_path / "run")
    actor = _dataclass(composed.actor_rollout_ref.actor)
    assert (actor.policy_loss.loss_mode, actor.loss_agg_mode) == ("gspo", "seq-mean-token-mean")
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.use_kl_loss) == (0.0003, 0.0004, False)


def test_the_seed_orders_the_prompts_and_no_shuffle_keeps_file_order(tmp_path):
    """megatron_training.seed is verl's prompt order (data.seed: without it verl's RandomSampler is unseeded), its
    mini-batch shuffle seed and vLLM's seed; no_shuffle is data.shuffle false. Where torchdata (verl's dependency)
    is installed, verl's own sampler (create_rl_sampler) runs on the composed data config."""
    import importlib.util

    composed = {name: _resolved(load_config(TINY, overrides), tmp_path / name)[0] for name, overrides in (
        ("a", ["megatron_training.seed=7", "generate_config.sampling_config.seed=null"]),
        ("b", ["megatron_training.seed=8"]),
        ("c", ["megatron_training.no_shuffle=true"]))}  # fmt: skip
    seven = composed["a"]
    assert (seven.data.seed, seven.data.shuffle) == (7, True) and composed["b"].data.seed == 8
    assert seven.actor_rollout_ref.actor.data_loader_seed == 7 and seven.actor_rollout_ref.rollout.seed == 7
    assert composed["c"].data.shuffle is False
    if importlib.util.find_spec("torchdata") is None:
        return
    from verl.trainer.ppo.utils import create_rl_sampler

    def order(name):
        return list(create_rl_sampler(composed[name].data, list(range(50))))

    assert order("a") == order("a") != order("b") and order("c") == list(range(50))


def test_lora_is_verls_peft_lora_on_the_engines_modules(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    from hf_folder import make_qwen2_folder

    folder = make_qwen2_folder(tmp_path / "qwen")
    cfg = load_config(TINY, ["megatron_training.lora_target_modules=[linear_qkv,linear_fc2]",
                             "megatron_training.lora_r=16", "megatron_training.lora_alpha=32",
                             f"megatron_training.tokenizer_name_or_path={folder}"])  # fmt: skip
    composed, _ = _resolved(cfg, tmp_path / "run")
    model = _dataclass(composed.actor_rollout_ref.model)  # HFModelConfig: loads the folder's config and tokenizer
    assert (model.lora_rank, model.lora_alpha) == (16, 32)
    assert sorted(model.target_modules) == ["down_proj", "k_proj", "q_proj", "v_proj"]


def test_dynamic_sampling_is_verls_filter_groups(tmp_path):
    dapo = ["rl_config.filter_groups_enable=true", "rl_config.filter_groups_metric=acc",
            "+rl_config.filter_groups_train_batch_size=32", "+rl_config.filter_groups_max_batches=0"]  # fmt: skip
    composed, _ = _resolved(load_config(TINY, dapo), tmp_path / "run")
    groups = _dataclass(composed.algorithm).filter_groups
    # the acc verifier's score, as the generated compute_score names it (its "acc" is eval's fraction correct)
    assert (groups.enable, groups.metric, composed.data.train_batch_size) == (True, "acc_rewards", 32)

    limited = load_config(TINY, [*dapo[:3], "+rl_config.filter_groups_max_batches=3"])
    (line,) = VerlBackend().check(limited)
    assert "rl_config.filter_groups_max_batches: 3: backend verl refuses a limit" in line
    other = load_config(TINY, [*dapo[:2], "+rl_config.filter_groups_train_batch_size=16", dapo[3]])
    (line,) = VerlBackend().check(other)
    assert "megatron_training.global_batch_size: 32: backend verl has no generation batch" in line


def test_verl_scores_with_the_trials_verifiers(tmp_path):
    """reward.custom_reward_function names the generated module; verl's own loader (get_custom_reward_fn) loads it
    and the function scores a response with the trial's verifiers. Its ``acc`` (verl's held-out val-core metric) is
    the engine's eval/acc, the fraction correct, not the acc verifier's score (negative when wrong)."""
    from verl.trainer.ppo.reward import get_custom_reward_fn

    cfg = load_config(TINY, ["rl_config.verifier_function=[acc]", "rl_config.verifier_weight=[1.0]"])
    composed, _ = _resolved(cfg, tmp_path / "run")
    fn = get_custom_reward_fn(composed)
    right = fn("grpo_sweep", "<think>x</think><answer>\\boxed{85}</answer>", "85", {})
    wrong = fn("grpo_sweep", "<think>x</think><answer>\\boxed{84}</answer>", "85", {})
    assert right["score"] > wrong["score"]
    assert (right["acc"], wrong["acc"], right["acc_rewards"]) == (1.0, 0.0, 1.0) and wrong["acc_rewards"] < 0
    held_out = {"val-core/grpo_sweep/acc/mean@4": (1.0 + 0.0) / 2}  # two responses: one right, one wrong
    assert project_metrics(held_out, {"grpo_sweep": 1})["eval/acc"] == 0.5


def test_dynamic_sampling_on_a_metric_no_verifier_reports_is_refused():
    dapo = ["rl_config.filter_groups_enable=true", "rl_config.filter_groups_metric=step",
            "+rl_config.filter_groups_train_batch_size=32", "+rl_config.filter_groups_max_batches=0"]  # fmt: skip
    (line,) = VerlBackend().check(load_config(TINY, dapo))
    assert "rl_config.filter_groups_metric: 'step' is not one of verifier_function" in line


def test_the_lr_schedule_is_verls_cosine_to_min_lr_after_warmup(tmp_path):
    """actor_config.min_lr / lr_warmup_fraction / lr_decay_style through verl's FSDPOptimizerConfig and the
    schedule verl's FSDP engine builds from it (_build_lr_scheduler: warmup steps = ratio x total steps)."""
    from verl.utils.torch_functional import get_cosine_schedule_with_warmup

    cfg = load_config(TINY, ["actor_config.lr=1e-5", "actor_config.min_lr=1e-6", "actor_config.lr_decay_style=cosine",
                             "actor_config.lr_warmup_fraction=0.1", "megatron_training.train_iters=100"])  # fmt: skip
    composed, _ = _resolved(cfg, tmp_path / "run")
    optim = _dataclass(composed.actor_rollout_ref.actor.optim)
    assert (optim.lr_scheduler_type, optim.lr_warmup_steps_ratio) == ("cosine", 0.1)
    assert optim.min_lr_ratio == pytest.approx(0.1)
    total = composed.trainer.total_training_steps  # verl sets optim.total_training_steps from it at runtime
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=optim.lr)
    schedule = get_cosine_schedule_with_warmup(opt, int(optim.lr_warmup_steps_ratio * total), total,
                                               min_lr_ratio=optim.min_lr_ratio, num_cycles=optim.num_cycles)  # fmt: skip
    lrs = []
    for _ in range(total):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        schedule.step()
    assert lrs[0] == 0.0 and max(lrs) == pytest.approx(1e-5) and lrs.index(max(lrs)) == 10
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-6)  # min_lr at the end of the decay
