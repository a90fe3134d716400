"""backend: trl proven against what TRL itself resolved (issue 40): a constructed ``GRPOTrainer`` (``build_trainer``:
the object a trial trains), its args, its ``lr_scheduler`` (built by transformers' own
``create_optimizer_and_scheduler``), its loss, advantage scaling, entropy bonus, LoRA model and data order; and
``GRPOConfig``'s own batch arithmetic under a world size of 2 (its ``__post_init__`` reads ``args.world_size``)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from grpo.config import load_config
from grpo.engine.rollout import SamplingParams
from grpo.sweep.backends import backend_class
from grpo.sweep.backends.trl.backend import build_trainer, render

trl = pytest.importorskip("trl", reason="trl not installed (pip install -e .[trl])")

TINY = [
    "megatron_training.global_batch_size=4", "rl_config.mini_batch_size=4", "rl_config.n_samples_per_prompt=4",
    "actor_config.micro_batch_size=16", "rl_config.epochs=1", "generate_config.sampling_config.max_tokens=16",
    "engine.eval_every=null", "engine.device=cpu", "megatron_training.train_iters=8",
]  # fmt: skip
LOG = logging.getLogger("test_trl_resolved")


def cfg_of(*overrides: str):
    return load_config("grpo_trainer_tiny_cpu", [*TINY, *overrides])


def trainer_of(tmp_path: Path, *overrides: str):
    return build_trainer(cfg_of(*overrides), tmp_path, lambda i, m: False, LOG, SamplingParams).trainer


def lrs(trainer) -> list[float]:
    """The learning rate of every optimizer step and after the last one, from the scheduler transformers builds
    for this trainer."""
    steps = trainer.args.max_steps
    trainer.create_optimizer_and_scheduler(num_training_steps=steps)
    lam = trainer.lr_scheduler.lr_lambdas[0]
    return [trainer.args.learning_rate * lam(s) for s in range(steps + 1)]


def test_constant_with_warmup_warms_up_then_holds(tmp_path):
    # 8 iterations x 1 step, warmup 0.25: 2 warmup steps (round(0.25 * 8), as the engine's update.lr_at).
    trainer = trainer_of(tmp_path, "actor_config.lr_decay_style=constant", "actor_config.lr_warmup_fraction=0.25",
                         "actor_config.lr=1e-4")  # fmt: skip
    assert trainer.args.lr_scheduler_type == "constant_with_warmup"
    got = lrs(trainer)
    assert got[0] == 0.0 and got[1] == pytest.approx(5e-5)  # transformers ramps from 0 (step s: lr * s / warmup)
    assert got[2:] == pytest.approx([1e-4] * 7)  # then the constant lr
    no_warmup = lrs(trainer_of(tmp_path / "b", "actor_config.lr_decay_style=constant",
                               "actor_config.lr_warmup_fraction=0", "actor_config.lr=1e-4"))  # fmt: skip
    assert no_warmup == pytest.approx([1e-4] * 9)


def test_decays_end_at_min_lr(tmp_path):
    over = ("actor_config.lr=1e-4", "actor_config.min_lr=1e-5", "actor_config.lr_warmup_fraction=0")
    cosine = trainer_of(tmp_path / "c", "actor_config.lr_decay_style=cosine", *over)
    assert cosine.args.lr_scheduler_type == "cosine_with_min_lr"
    got = lrs(cosine)
    # transformers reaches min_lr after the last step (the engine at it): 8 steps, got[8] is the end
    assert got[0] == pytest.approx(1e-4) and got[8] == pytest.approx(1e-5) and min(got) == pytest.approx(1e-5)
    linear = trainer_of(tmp_path / "l", "actor_config.lr_decay_style=linear", *over)
    got = lrs(linear)
    assert linear.args.lr_scheduler_type == "polynomial" and got[0] == pytest.approx(1e-4)
    assert [got[i] - got[i + 1] for i in range(8)] == pytest.approx([9e-5 / 8] * 8)  # linear, down to min_lr
    too_high = cfg_of("actor_config.lr_decay_style=linear", "actor_config.lr=1e-5", "actor_config.min_lr=1e-5")
    (problem,) = backend_class("trl")().check(too_high)
    assert "actor_config.min_lr: 1e-05 is not below actor_config.lr" in problem


@pytest.mark.parametrize("processes", [1, 2, 4])
def test_global_and_mini_batch_are_the_same_prompts_on_any_number_of_processes(tmp_path, monkeypatch, processes):
    import transformers

    # GRPOConfig.__post_init__ derives the generation batch from args.world_size: give it the world size.
    monkeypatch.setattr(transformers.TrainingArguments, "world_size", property(lambda self: processes))
    cfg = cfg_of("megatron_training.global_batch_size=8", "rl_config.mini_batch_size=4",
                 "actor_config.micro_batch_size=4", "rl_config.shuffle_mini_batch=true")  # fmt: skip
    args = trl.GRPOConfig(**render(cfg, tmp_path, processes)[0])
    assert args.world_size == processes
    # prompts per generation, as GRPOTrainer._get_train_sampler hands them to RepeatSampler
    assert args.generation_batch_size // args.num_generations == 8
    # completions per optimizer step: per device x processes x accumulation = one mini batch of 4 prompts x 4
    assert args.per_device_train_batch_size * processes * args.gradient_accumulation_steps == 4 * 4
    assert args.steps_per_generation // args.gradient_accumulation_steps == 2  # two optimizer steps per generation


def test_losses_advantages_entropy_lora_and_data_order_reach_the_trainer(tmp_path):
    pytest.importorskip("peft")
    trainer = trainer_of(
        tmp_path, "engine.policy_loss=gspo", "engine.loss_agg_mode=seq-mean-token-mean",
        "engine.advantage_estimator=group_norm_no_std", "rl_config.entropy_coeff=0.01",
        "megatron_training.no_shuffle=true", "actor_config.lora_target_modules=[linear_qkv]",
        "actor_config.lora_r=4", "actor_config.lora_alpha=8",
    )  # fmt: skip
    # TRL's GSPO recipe: sequence-level ratio with the sequence-mean loss (no length-weighting warning)
    assert (trainer.importance_sampling_level, trainer.loss_type) == ("sequence", "grpo")
    assert trainer.scale_rewards == "none"  # group_norm_no_std: the group mean only
    assert trainer.entropy_coef == 0.01 and trainer._entropy_bonus_enabled
    assert trainer.shuffle_dataset is False and trainer._get_train_sampler().shuffle is False
    lora = trainer.model.peft_config["default"]
    assert (lora.r, lora.lora_alpha, sorted(lora.target_modules)) == (4, 8, ["k_proj", "q_proj", "v_proj"])
    names = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    trainable = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in names}
    assert trainable == {"q_proj", "k_proj", "v_proj"}  # only the adapters train


def test_dr_grpo_divides_by_the_engines_constant(tmp_path):
    cfg = cfg_of("engine.loss_agg_mode=seq-mean-token-sum-norm", "generate_config.sampling_config.max_tokens=1000")
    built = build_trainer(cfg, tmp_path, lambda i, m: False, LOG, SamplingParams)
    trainer = built.trainer
    assert trainer.loss_type == "dr_grpo"
    # The engine's norm: max_tokens capped by max_model_len after the longest prompt (grpo/engine/trainer.py)
    longest = max(len(built.callback.base.held_out.prompt_ids[e.prompt]) for e in built.callback.base.train_set)
    room = cfg.generate_config.max_model_len - longest
    assert trainer.max_completion_length == room < 1000


def test_gspo_with_a_token_summing_loss_is_one_line():
    problems = backend_class("trl")().check(cfg_of("engine.policy_loss=gspo"))  # token_level_loss: token-mean
    assert len(problems) == 1 and "engine.policy_loss: gspo: backend trl runs TRL's GSPO" in problems[0]
    assert "engine.loss_agg_mode: seq-mean-token-mean (not token-mean)" in problems[0]


def test_the_sampling_seed_seeds_the_sampler_and_the_prompt_order_seed_the_data(tmp_path):
    import torch

    built = build_trainer(cfg_of("generate_config.sampling_config.seed=7", "megatron_training.seed=11"), tmp_path,
                          lambda i, m: False, LOG, SamplingParams)  # fmt: skip
    assert built.trainer.args.seed == 11 and built.trainer._get_train_sampler().seed == 11
    torch.manual_seed(0)
    built.callback.on_train_begin(built.trainer.args, built.trainer.state, built.trainer.control)
    after = torch.rand(3)
    torch.manual_seed(7)
    assert torch.equal(after, torch.rand(3))  # TRL's generate draws from this generator


def test_mini_batches_in_generation_order_are_refused_since_trl_shuffles():
    backend = backend_class("trl")()
    two = ("megatron_training.global_batch_size=8", "rl_config.mini_batch_size=4")
    (problem,) = backend.check(cfg_of(*two, "rl_config.shuffle_mini_batch=false"))
    assert "rl_config.shuffle_mini_batch: false: backend trl always shuffles" in problem
    assert backend.check(cfg_of(*two, "rl_config.shuffle_mini_batch=true")) == []
    assert backend.check(cfg_of("rl_config.shuffle_mini_batch=false")) == []  # one mini batch: order is moot


def test_trl_args_are_grpo_config_fields_the_render_does_not_set(tmp_path):
    from grpo.sweep.backends.trl.backend import TrlBackend
    from grpo.sweep.backends.trl.keys import RENDERED
    from grpo.sweep.spec.models import TrlSpec

    cfg = cfg_of()
    assert set(render(cfg, tmp_path)[0]) <= set(RENDERED)  # every rendered field names the key that sets it

    def problems(**args):
        return TrlBackend(TrlSpec(args=args), source="s.yaml").check(cfg)

    assert problems(beta=0.1) == [
        "s.yaml: trl.args.beta: set from rl_config.init_kl_coef by backend trl; set that key instead"
    ]
    assert problems(no_such_field=1) == [
        f"s.yaml: trl.args.no_such_field: not a field of TRL {trl.__version__}'s GRPOConfig"
    ]
    (bad,) = problems(auto_find_batch_size=True)  # GRPOConfig.__post_init__'s own ValueError, one line
    assert bad.startswith("s.yaml: trl.args: TRL's GRPOConfig refuses them: auto_find_batch_size is not supported")
    native = {"mask_truncated_completions": True, "top_entropy_quantile": 0.5}
    assert problems(**native) == []
    trainer = build_trainer(cfg, tmp_path, lambda i, m: False, LOG, SamplingParams, native=native).trainer
    assert trainer.mask_truncated_completions is True and trainer.top_entropy_quantile == 0.5


def test_a_lora_run_evaluates_the_merged_policy_and_trains_only_the_adapters(tmp_path):
    pytest.importorskip("peft")
    import torch

    from grpo.sweep.backends.trl.model import copy_into

    cfg = cfg_of("actor_config.lora_target_modules=[linear_qkv,linear_fc1]", "megatron_training.train_iters=1",
                 "engine.eval_every=1", "engine.eval_size=8", "actor_config.lr=1e-2")  # fmt: skip
    built = build_trainer(cfg, tmp_path, lambda i, m: False, LOG, SamplingParams)
    trainer, base = built.trainer, built.callback.base
    before = {k: v.clone() for k, v in copy_into(base.evaluator, trainer.model).state_dict().items()}
    trainer.train()
    after = copy_into(base.evaluator, trainer.model).state_dict()
    changed = {k.split(".")[-2] for k in before if not torch.equal(before[k], after[k])}
    assert changed == {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"}  # the adapted projections, merged
    assert not any(".base_layer." in n for n, p in trainer.model.named_parameters() if p.requires_grad)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1] and all("eval/acc_greedy" in r for r in rows)


def test_a_batch_the_processes_do_not_divide_is_one_line():
    from grpo.sweep.backends.trl.backend import TrlBackend
    from grpo.sweep.spec.models import TrlSpec

    cfg = cfg_of("engine.device=cuda")  # 4 prompts x 4 samples per mini batch: 16 completions
    assert TrlBackend(TrlSpec(launcher="accelerate", num_processes=2)).check(cfg) == []
    (problem,) = TrlBackend(TrlSpec(launcher="accelerate", num_processes=3)).check(cfg)
    assert "rl_config.mini_batch_size: backend trl needs" in problem and "trl.num_processes (3)" in problem
