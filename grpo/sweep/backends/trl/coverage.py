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
    "(shuffle_sequence_dict), always, once: each epoch replays the same mini batches (the engine reshuffles per "
    "epoch); false is refused with several mini batches per generation",
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
    f"{M}.min_lr": "lr_scheduler_kwargs: min_lr (cosine_with_min_lr) or lr_end (polynomial, linear); transformers "
    "reaches it after the last step, the engine at it",
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
    f"{E}.eval_data_path": "held-out prompts from a file (engine.task=dataset; issue 41)",
    f"{E}.data_fields": "a dataset's prompt and label columns (engine.task=dataset; issue 41)",
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
    f"{E}.advantage_estimator": "scale_rewards: group (group_norm; TRL divides by std + 1e-4, the engine by std "
    "+ 1e-6) or none (group_norm_no_std, Dr. GRPO)",
    "trl": "TRL's own GRPOConfig fields (trl.args.<field>: fixed, or searched as search: trl.args.<field>), beside "
    "the spec's trl.args; validated by constructing TRL's GRPOConfig; a field a mapped key sets is refused naming it",
}
ARCH_SOURCE = (
    "the Qwen2 is built from it as the embedded engine builds it, then saved as the HF folder TRL loads; a model "
    "folder of another architecture (actor_config.load) is its config.json's, loaded by transformers as it is"
)
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


# The key probe (tests/test_trl_probe.py): every applied key is moved off the probe's base in a real TRL run, which
# must then differ from the base run (its metrics, its checkpoint folders or the model config TRL loads). A probe
# is (context, moved): the run with context + moved is compared with the run with context alone, so a key that
# acts only beside another (clip_ratio_low needs clip_higher_enable) is compared with that other key set.
# "{save}" is the base run's save dir. WARM: a 2-step warm start (the keys that change the starting weights would
# otherwise retrain the 250-step one).
PROBE_BASE = (
    "megatron_training.global_batch_size=4", "rl_config.mini_batch_size=2", "rl_config.n_samples_per_prompt=4",
    "actor_config.micro_batch_size=8", "rl_config.epochs=1", "rl_config.shuffle_mini_batch=true",
    "rl_config.token_level_loss=false", "generate_config.sampling_config.max_tokens=16",
    "megatron_training.train_iters=1", "megatron_training.save_interval=1", "actor_config.lr=1e-3",
    "actor_config.lr_warmup_fraction=0", "engine.eval_every=null", "engine.eval_size=8", "engine.device=cpu",
    "engine.keep_checkpoints=null", "engine.task_size=256",
)  # fmt: skip
WARM = ("engine.warm_start_steps=2",)
TWO = ("megatron_training.train_iters=2", "megatron_training.save_interval=2")
EVAL = ("engine.eval_every=2", "megatron_training.train_iters=2")
CLIP_HIGHER = ("rl_config.clip_higher_enable=true",)
LORA = ("actor_config.lora_target_modules=[linear_qkv]",)
DATA = ("engine.task=dataset", "actor_config.load={model}", "megatron_training.data_path={data}")
PROBES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    f"{RL}.clip_higher_enable": ((), ("rl_config.clip_higher_enable=true",)),
    f"{RL}.clip_ratio": ((), ("rl_config.clip_ratio=0.01",)),
    f"{RL}.clip_ratio_low": (CLIP_HIGHER, ("rl_config.clip_ratio_low=0.01",)),
    # a second epoch: the first mini batch again after its own update (ratios above 1 + high where A > 0)
    f"{RL}.clip_ratio_high": ((*CLIP_HIGHER, "rl_config.clip_ratio_low=0.001", "rl_config.epochs=2"),
                              ("rl_config.clip_ratio_high=0.001",)),
    f"{RL}.entropy_coeff": ((), ("rl_config.entropy_coeff=0.5",)),
    f"{RL}.epochs": ((), ("rl_config.epochs=2",)),
    f"{RL}.init_kl_coef": ((), ("rl_config.init_kl_coef=1.0",)),
    f"{RL}.mini_batch_size": ((), ("rl_config.mini_batch_size=4",)),
    f"{RL}.n_samples_per_prompt": ((), ("rl_config.n_samples_per_prompt=2", "actor_config.micro_batch_size=4")),
    f"{RL}.token_level_loss": ((), ("rl_config.token_level_loss=true",)),
    f"{RL}.verifier_function": ((), ("rl_config.verifier_function=[acc]", "rl_config.verifier_weight=[1.0]")),
    f"{RL}.verifier_weight": ((), ("rl_config.verifier_weight=[1.0,1.0]",)),
    f"{S}.max_tokens": ((), ("generate_config.sampling_config.max_tokens=8",)),
    f"{S}.min_p": ((), ("generate_config.sampling_config.min_p=0.3",)),
    f"{S}.seed": ((), ("generate_config.sampling_config.seed=99",)),
    f"{S}.temperature": ((), ("generate_config.sampling_config.temperature=0.3",)),
    f"{S}.top_k": ((), ("generate_config.sampling_config.top_k=1",)),
    f"{S}.top_p": ((), ("generate_config.sampling_config.top_p=0.3",)),
    "generate_config.max_model_len": ((), ("generate_config.max_model_len=23", "megatron_training.seq_length=23",
                                           "rl_config.max_prompt_length=16")),
    f"{M}.adam_beta1": ((), ("actor_config.adam_beta1=0.5",)),
    f"{M}.adam_beta2": ((), ("actor_config.adam_beta2=0.5",)),
    f"{M}.clip_grad": ((), ("actor_config.clip_grad=0.05",)),
    f"{M}.global_batch_size": ((), ("megatron_training.global_batch_size=8",)),
    f"{M}.lr": ((), ("actor_config.lr=1e-5",)),
    f"{M}.lr_decay_style": ((), ("actor_config.lr_decay_style=cosine",)),
    f"{M}.lr_warmup_fraction": ((), ("actor_config.lr_warmup_fraction=0.5",)),
    f"{M}.min_lr": (("actor_config.lr_decay_style=cosine",), ("actor_config.min_lr=5e-4",)),
    f"{M}.micro_batch_size": ((), ("actor_config.micro_batch_size=4",)),
    f"{M}.no_shuffle": ((), ("megatron_training.no_shuffle=true",)),
    f"{M}.lora_target_modules": ((), LORA),
    f"{M}.lora_r": (LORA, ("actor_config.lora_r=2",)),
    f"{M}.lora_alpha": (LORA, ("actor_config.lora_alpha=64",)),
    f"{M}.load": ((), ("actor_config.load={save}/checkpoint-2",)),
    f"{M}.finetune": (("actor_config.load={save}", "megatron_training.train_iters=2"),
                      ("actor_config.finetune=false",)),
    f"{M}.save_interval": (TWO, ("megatron_training.save_interval=1",)),
    f"{M}.seed": ((), ("megatron_training.seed=7",)),
    f"{M}.train_iters": ((), ("megatron_training.train_iters=2",)),
    f"{M}.weight_decay": ((), ("actor_config.weight_decay=0.5",)),
    f"{M}.init_method_std": (WARM, ("megatron_training.init_method_std=0.2",)),
    f"{E}.advantage_estimator": ((), ("engine.advantage_estimator=group_norm_no_std",)),
    "trl": ((), ("trl.args.top_entropy_quantile=0.2",)),  # a TRL-native field, as a search sets it
    f"{E}.eval_every": (EVAL, ("engine.eval_every=1",)),
    f"{E}.eval_size": (EVAL, ("engine.eval_size=4",)),
    f"{E}.exit_interval": (TWO, ("engine.exit_interval=1",)),
    f"{E}.loss_agg_mode": ((), ("engine.loss_agg_mode=seq-mean-token-sum-norm",)),
    f"{E}.policy_loss": ((), ("engine.policy_loss=gspo",)),
    f"{E}.task_seed": (WARM, ("engine.task_seed=5",)),
    f"{E}.task_size": ((), ("engine.task_size=64",)),
    f"{E}.warm_start_steps": (WARM, ("engine.warm_start_steps=3",)),
    # a dataset run of a HF folder (tests/hf_folder.py): {model}, {model2} (the same but its chat template),
    # {data}, {data2} (GSM8K rows) are made by the probe
    # (a generated task writes its prompts to data_path, so the file is named only beside task=dataset)
    f"{E}.task": (("actor_config.load={model}",), ("engine.task=dataset", "megatron_training.data_path={data}")),
    f"{M}.data_path": (DATA, ("megatron_training.data_path={data2}",)),
    f"{M}.split": (DATA, ("megatron_training.split='50,50,0'",)),
    f"{M}.tokenizer_name_or_path": (DATA, ("megatron_training.tokenizer_name_or_path={model2}",)),
    f"{E}.eval_data_path": ((*DATA, "engine.eval_every=1"), ("engine.eval_data_path={data2}",)),
    **{f"{M}.{k}": (WARM, (f"model.tiny_qwen.{k}={v}",)) for k, v in (
        ("num_layers", 1), ("hidden_size", 32), ("ffn_hidden_size", 64), ("num_attention_heads", 8),
        ("group_query_attention", "false"), ("num_query_groups", 4), ("padded_vocab_size", 256),
        ("max_position_embeddings", 512), ("rotary_base", 100), ("norm_epsilon", 0.1), ("add_qkv_bias", "false"),
        ("untie_embeddings_and_output_weights", "false"))},
}  # fmt: skip
QWEN2_ONLY = "the Qwen2 value is the only one a run takes (others are refused)"
# Applied keys no probe run can show, and why (the key table says so in their row).
NOT_PROBED: dict[str, str] = {
    **{f"{M}.{k}": QWEN2_ONLY for k in ("kv_channels", "position_embedding_type", "normalization", "swiglu",
                                         "qk_layernorm", "num_experts", "multi_latent_attention",
                                         "disable_bias_linear")},
    **{f"{RL}.{k}": "its one value is the only one a run takes (others are refused)"
       for k in ("adv_estimator", "kl_ctrl_type", "kl_penalty", "rule_reward")},
    f"{RL}.shuffle_mini_batch": "true is the only value a run with several mini batches takes; with one it orders "
    "nothing",
    f"{RL}.max_prompt_length": "the generated prompts all have 15 tokens (a bound below drops every prompt)",
    f"{M}.model": "picks a model file; the tiny config loads one",
    f"{M}.save": "where checkpoints go (the probe sets it for every run; tests/test_trl_backend.py reads them there)",
    f"{E}.data_fields": "a dataset's column names (read by grpo.engine.datasets: tests/test_own_run_data.py)",
    f"{E}.device": "cpu is the only device of a CPU run (cuda needs a GPU; auto is cpu there)",
    f"{E}.num_threads": "speed only",
    "generate_config.sampling_config": "a section (its keys are probed one by one)",
}  # fmt: skip


def classify(name: str) -> KeyClass:
    """A table key (grpo/engine/coverage.py's name) as backend trl sees it."""
    entry = TABLE[name]
    if name in APPLIED or name in ARCH:
        how = APPLIED.get(name, ARCH_SOURCE)
        if name in NOT_PROBED:  # the key table says where there is no probe evidence
            how += f" (no probe run shows it: {NOT_PROBED[name]})"
        return KeyClass(name, Kind.APPLIED, how)
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
