"""Every config key, classified for ``backend: trl``: applied (rendered into GRPOConfig or used to build the run),
refused (TRL's GRPOTrainer has no such thing: a value other than the default is an error naming the key and
the backend), or no effect (cannot change what a TRL run trains: layout, speed, memory, logging).

The key list is the embedded engine's table (grpo/engine/coverage.py: every MindSpeed-RL manifest key and every
schema key); this module re-classifies it for TRL, so no key can be missing. The key table that ends
``docs/backend_trl.md`` is ``KEYS.key_table()``; ``python -m grpo.sweep.backends.trl.coverage --write
docs/backend_trl.md`` rewrites it, keeping the prose above it; tests/test_trl_backend.py fails when the doc is
stale. No torch or trl here (the driver imports it).
"""

from __future__ import annotations

from grpo.engine.coverage import TABLE, KeyClass, Kind
from grpo.sweep.backends._coverage import ARCH, BackendKeys

M, RL, S, E = "megatron", "rl_config", "generate_config.sampling_config", "engine"

# key -> how a TRL run applies it (the GRPOConfig field, or what the backend builds from it)
APPLIED: dict[str, str] = {
    f"{RL}.init_kl_coef": "beta",
    f"{RL}.n_samples_per_prompt": "num_generations",
    f"{RL}.epochs": "num_iterations",
    f"{RL}.clip_ratio": "epsilon (when clip_higher_enable is false)",
    f"{RL}.clip_higher_enable": "epsilon / epsilon_high from clip_ratio_low / clip_ratio_high",
    f"{RL}.clip_ratio_low": "epsilon (clip_higher_enable)",
    f"{RL}.clip_ratio_high": "epsilon_high (clip_higher_enable)",
    f"{RL}.token_level_loss": "loss_type dapo (token mean) or grpo (sequence mean)",
    f"{RL}.mini_batch_size": "gradient_accumulation_steps = mini_batch_size * n / (micro_batch_size * processes)",
    f"{RL}.shuffle_mini_batch": "true: TRL shuffles a generation before splitting it into mini batches "
    "(shuffle_sequence_dict), always; false is refused with several mini batches per generation",
    f"{RL}.entropy_coeff": "entropy_coef (TRL adds the mean per-token entropy of each micro batch whatever the "
    "loss_type; the engine aggregates it with the policy loss, the same for token-mean)",
    f"{RL}.verifier_function": "one TRL reward function per verifier",
    f"{RL}.verifier_weight": "reward_weights",
    f"{RL}.rule_reward": "the verifiers are the reward (true is the only value TRL runs)",
    f"{RL}.max_prompt_length": "longer prompts dropped, as the engine does",
    f"{RL}.adv_estimator": "group_norm only (GRPO's group-normalised advantage, scale_rewards=group)",
    f"{RL}.kl_ctrl_type": "fixed only (beta is constant in TRL)",
    f"{RL}.kl_penalty": "low_var_kl only (TRL's k3 estimator)",
    f"{S}.temperature": "temperature",
    f"{S}.top_p": "top_p",
    f"{S}.top_k": "top_k (-1 -> 0)",
    f"{S}.min_p": "min_p",
    f"{S}.max_tokens": "max_completion_length",
    f"{S}.seed": "the sampling generator: torch's global one (TRL samples from it), reseeded when training begins",
    "generate_config.sampling_config": "the section",
    "generate_config.max_model_len": "caps max_completion_length after the longest prompt",
    f"{M}.lr": "learning_rate",
    f"{M}.lr_decay_style": "lr_scheduler_type: constant (constant_with_warmup with a warmup), linear (polynomial "
    "with power 1 to min_lr > 0), cosine (cosine_with_min_lr to min_lr > 0)",
    f"{M}.lr_warmup_fraction": "warmup_steps = round(fraction * optimizer steps), as the engine; transformers "
    "ramps from 0 (step s: lr * s / warmup; the engine lr * (s + 1) / warmup)",
    f"{M}.min_lr": "lr_scheduler_kwargs: min_lr (cosine_with_min_lr) or lr_end (polynomial, linear)",
    f"{M}.no_shuffle": "shuffle_dataset = not no_shuffle",
    **{
        f"{M}.{k}": "peft_config: peft's LoraConfig (r, lora_alpha, the target modules mapped to the Qwen2 "
        "projections as the engine maps them, dropout 0)"
        for k in ("lora_r", "lora_alpha", "lora_target_modules")
    },
    f"{M}.weight_decay": "weight_decay",
    f"{M}.clip_grad": "max_grad_norm",
    f"{M}.adam_beta1": "adam_beta1",
    f"{M}.adam_beta2": "adam_beta2",
    f"{M}.train_iters": "max_steps = train_iters * optimizer steps per iteration",
    f"{M}.save_interval": "save_steps (checkpoint-N folders)",
    f"{M}.seed": "seed: the prompt order (TRL's RepeatSampler)",
    f"{M}.global_batch_size": "prompts per generation: steps_per_generation = global_batch_size * n / (micro * "
    "processes), so the same prompts on any trl.num_processes",
    f"{M}.micro_batch_size": "per_device_train_batch_size (completions)",
    f"{M}.save": "output_dir (checkpoint-N folders)",
    f"{M}.load": "a HF folder to start from, or a TRL save dir to resume from",
    f"{M}.finetune": "true: start from actor_config.load's weights without resuming",
    f"{M}.tokenizer_name_or_path": "the tokenizer",
    f"{M}.data_path": "prompts (engine.task=dataset)",
    f"{M}.split": "train / held-out split (engine.task=dataset)",
    f"{M}.init_method_std": "the warm start's init",
    f"{E}.task": "the prompts",
    f"{E}.task_size": "the prompts",
    f"{E}.task_seed": "the prompts and the warm start",
    f"{E}.warm_start_steps": "the starting weights",
    f"{E}.eval_every": "held-out evaluation interval",
    f"{E}.eval_size": "held-out prompts",
    f"{E}.exit_interval": "a pbt segment's end (checkpoint, then stop)",
    f"{E}.num_threads": "torch threads of the worker",
    f"{E}.device": "cpu (use_cpu), cuda, or auto (cuda when there is one)",
    f"{E}.loss_agg_mode": "loss_type (seq-mean-token-mean grpo, token-mean dapo, seq-mean-token-sum-norm dr_grpo: "
    "the token sum over max_completion_length, the engine's constant max_tokens)",
    f"{E}.policy_loss": "vanilla, or gspo as TRL's recipe: importance_sampling_level sequence with loss_type grpo "
    "(loss_agg_mode seq-mean-token-mean, else refused)",
    f"{E}.advantage_estimator": "scale_rewards: group (group_norm) or none (group_norm_no_std, Dr. GRPO)",
}
ARCH_SOURCE = "the Qwen2 is built from it as the embedded engine builds it, then saved as the HF folder TRL loads"
NO_EFFECT: dict[str, str] = {
    **{f"{M}.{k}": "TRL's checkpoint-N always holds optimizer, scheduler and rng state; the driver's resumes set "
       "it false, and a fresh run loads nothing" for k in ("no_load_optim", "no_load_rng", "no_save_optim",
                                                         "no_save_rng")},
    f"{RL}.kl_target": "read only by the adaptive KL controller, which backend trl refuses",
    f"{RL}.kl_horizon": "read only by the adaptive KL controller, which backend trl refuses",
    f"{RL}.actor_forward_micro_batch_size": "memory and speed only",
    f"{RL}.ref_forward_micro_batch_size": "memory and speed only",
}  # fmt: skip

# Applied with only some values (check() refuses the others in one line).
VALUES: dict[str, tuple[object, ...]] = {
    f"{RL}.adv_estimator": ("group_norm",),
    f"{RL}.kl_ctrl_type": ("fixed",),
    f"{RL}.kl_penalty": ("low_var_kl",),
    f"{RL}.rule_reward": (True,),
    f"{E}.policy_loss": ("vanilla", "gspo"),
    f"{E}.device": ("auto", "cpu", "cuda"),
    f"{M}.hidden_dropout": (0.0,),  # refused keys whose default TRL does carry out
    f"{M}.attention_dropout": (0.0,),
}


def classify(name: str) -> KeyClass:
    """A table key (grpo/engine/coverage.py's name) as backend trl sees it."""
    entry = TABLE[name]
    if name in APPLIED:
        return KeyClass(name, Kind.APPLIED, APPLIED[name])
    if name in ARCH:
        return KeyClass(name, Kind.APPLIED, ARCH_SOURCE)
    if name in NO_EFFECT:
        return KeyClass(name, Kind.NO_EFFECT, NO_EFFECT[name])
    if entry.kind is Kind.NO_EFFECT:
        return KeyClass(name, Kind.NO_EFFECT, entry.reason)
    if entry.kind is Kind.APPLIED and name.count(".") == 0:  # a section or top-level choice
        return KeyClass(name, Kind.APPLIED, "the section")
    return KeyClass(name, Kind.REFUSED, "TRL's GRPOTrainer has no such setting; backend: embedded applies it"
                    if entry.kind is Kind.APPLIED else entry.reason)  # fmt: skip


KEYS = BackendKeys(
    backend="trl",
    run="a TRL run",
    classify=classify,
    values=VALUES,
    intro="rendered into TRL's `GRPOConfig`",
)

if __name__ == "__main__":
    import sys

    KEYS.main(sys.argv[1:])
