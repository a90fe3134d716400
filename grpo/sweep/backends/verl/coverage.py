"""Every config key, classified for ``backend: verl``: applied (rendered as an override over verl's ``ppo_trainer``,
or used to build the launch), refused (verl 0.9's GRPO has no such thing here: a value other than the default is an
error naming the key and the backend), or no effect (cannot change what a verl run trains: speed, memory, the
embedded engine's own toy task, logging).

The key list is the embedded engine's table (grpo/engine/coverage.py: every MindSpeed-RL manifest key and every
schema key), re-classified here, so no key can be missing. The key table that ends ``docs/backend_verl.md`` is
``KEYS.key_table()`` (``python -m grpo.sweep.backends.verl.coverage --write docs/backend_verl.md``);
tests/test_verl_coverage.py fails when the doc is stale, and checks every applied key's verl path against verl's
real composed config. No verl import here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpo.engine.coverage import TABLE, KeyClass, Kind
from grpo.sweep.backends._coverage import ARCH, BackendKeys
from grpo.sweep.backends.verl._render import EVAL_SAMPLES

if TYPE_CHECKING:
    from grpo.config import GRPOConfig

M, RL, S, E, G = "megatron", "rl_config", "generate_config.sampling_config", "engine", "generate_config"
A, R, REF = "actor_rollout_ref.actor", "actor_rollout_ref.rollout", "actor_rollout_ref.ref"

# key -> how a verl run applies it (the verl key it renders, or what the backend builds from it)
APPLIED: dict[str, str] = {
    f"{RL}.adv_estimator": "algorithm.adv_estimator=grpo (group_norm only)",
    f"{RL}.gamma": "algorithm.gamma",
    f"{RL}.lam": "algorithm.lam",
    f"{RL}.n_samples_per_prompt": f"{R}.n",
    f"{RL}.mini_batch_size": f"{A}.ppo_mini_batch_size (prompts in both; verl multiplies by rollout.n)",
    f"{RL}.epochs": f"{A}.ppo_epochs",
    f"{RL}.shuffle_mini_batch": f"{A}.shuffle (each epoch's mini batches drawn in a random order seeded by "
    f"{A}.data_loader_seed; off: in rollout order, as on the engine)",
    f"{RL}.max_prompt_length": "data.max_prompt_length",
    f"{RL}.clip_ratio": f"{A}.clip_ratio_low and clip_ratio_high (both, since both default to 0.2 and win)",
    f"{RL}.clip_higher_enable": f"{A}.clip_ratio_low / clip_ratio_high from clip_ratio_low / clip_ratio_high",
    f"{RL}.clip_ratio_low": f"{A}.clip_ratio_low (clip_higher_enable)",
    f"{RL}.clip_ratio_high": f"{A}.clip_ratio_high (clip_higher_enable)",
    f"{RL}.entropy_coeff": f"{A}.entropy_coeff",
    f"{RL}.token_level_loss": f"{A}.loss_agg_mode token-mean (true) or seq-mean-token-mean (false)",
    f"{RL}.filter_groups_enable": "algorithm.filter_groups.enable (DAPO dynamic sampling; verl 0.9.1's v1 trainer, "
    "main_ppo's default, refills prompts until data.train_batch_size groups are kept)",
    f"{RL}.filter_groups_metric": "algorithm.filter_groups.metric (the verifier whose scores must differ within a "
    "group; the trial's reward function reports each verifier's score)",
    f"{RL}.filter_groups_train_batch_size": "data.train_batch_size with filter_groups_enable (the kept groups "
    "trained on per step)",
    f"{RL}.init_kl_coef": f"{A}.kl_loss_coef with use_kl_loss (KL as loss), or algorithm.kl_ctrl.kl_coef (in reward)",
    f"{RL}.kl_penalty": f"{A}.kl_loss_type, or algorithm.kl_penalty (in reward)",
    f"{RL}.use_kl_in_reward": "algorithm.use_kl_in_reward (then use_kl_loss false: never both)",
    f"{RL}.kl_ctrl_type": "algorithm.kl_ctrl.type (KL in reward; the KL-loss coefficient is fixed)",
    f"{RL}.kl_target": "algorithm.kl_ctrl.target_kl (KL in reward)",
    f"{RL}.kl_horizon": "algorithm.kl_ctrl.horizon (KL in reward)",
    f"{RL}.actor_forward_micro_batch_size": f"{R}.log_prob_micro_batch_size_per_gpu (verl's default is None)",
    f"{RL}.ref_forward_micro_batch_size": f"{REF}.log_prob_micro_batch_size_per_gpu (verl's default is None)",
    f"{RL}.actor_resource": "trainer.nnodes / n_gpus_per_node from num_npus (8 per node)",
    f"{S}.temperature": f"{R}.temperature and {R}.val_kwargs.temperature (eval/acc samples as the rollout "
    "does; 0: greedy, val_kwargs.do_sample false)",
    f"{S}.top_p": f"{R}.top_p and {R}.val_kwargs.top_p",
    f"{S}.top_k": f"{R}.top_k and {R}.val_kwargs.top_k (-1 is off in both)",
    f"{S}.max_tokens": "data.max_response_length",
    f"{S}.seed": f"{R}.seed (vLLM's seed; unset: megatron_training.seed)",
    "generate_config.sampling_config": "the section",
    f"{G}.infer_tensor_parallel_size": f"{R}.tensor_model_parallel_size (verl's default is 2)",
    f"{G}.gpu_memory_utilization": f"{R}.gpu_memory_utilization",
    f"{M}.lr": f"{A}.optim.lr",
    f"{M}.lr_decay_style": f"{A}.optim.lr_scheduler_type (verl's FSDP optimizer: constant or cosine)",
    f"{M}.lr_warmup_fraction": f"{A}.optim.lr_warmup_steps_ratio",
    f"{M}.min_lr": f"{A}.optim.min_lr_ratio = min_lr / lr",
    f"{M}.weight_decay": f"{A}.optim.weight_decay (verl's default is 0.01)",
    f"{M}.adam_beta1": f"{A}.optim.betas[0]",
    f"{M}.adam_beta2": f"{A}.optim.betas[1]",
    f"{M}.clip_grad": f"{A}.optim.clip_grad",
    f"{M}.train_iters": "trainer.total_training_steps (one verl step is one iteration: train_batch_size prompts) "
    "and trainer.total_epochs covering it (verl also stops after total_epochs, default 30); a run that ends "
    "earlier is a failed trial",
    f"{M}.save_interval": "trainer.save_freq (global_step_N folders)",
    f"{M}.seed": "data.seed (the prompt order: verl's sampler is unseeded without it), "
    f"{A}.data_loader_seed (the mini-batch shuffle) and {R}.seed unless sampling_config.seed is set",
    f"{M}.no_shuffle": "data.shuffle false (prompts in file order)",
    f"{M}.lora_r": "actor_rollout_ref.model.lora_rank (with lora_target_modules; verl's FSDP LoRA, peft)",
    f"{M}.lora_alpha": "actor_rollout_ref.model.lora_alpha (with lora_target_modules)",
    f"{M}.lora_target_modules": "actor_rollout_ref.model.target_modules, Megatron's names mapped to the Hugging "
    "Face projections as the engine maps them (linear_qkv: q_proj, k_proj, v_proj; linear_fc1: gate_proj, "
    "up_proj ...); unset: no LoRA",
    f"{M}.global_batch_size": "data.train_batch_size (prompts in both); with filter_groups_enable verl has no "
    "generation batch (it refills prompt by prompt), so it must equal filter_groups_train_batch_size",
    f"{M}.micro_batch_size": f"{A}.ppo_micro_batch_size_per_gpu (responses per GPU in both)",
    f"{M}.save": "trainer.default_local_dir (absolute; global_step_N folders)",
    f"{M}.load": "a Hugging Face model folder: actor_rollout_ref.model.path (the weights, config and tokenizer "
    "verl trains); a verl save folder: trainer.resume_from_path=<load>/global_step_N (resume_mode=resume_path), N "
    "from latest_checkpointed_iteration.txt",
    f"{M}.finetune": "true: never resume from actor_config.load",
    f"{M}.no_load_optim": f"{A}.checkpoint.load_contents without optimizer",
    f"{M}.no_load_rng": f"{A}.checkpoint.load_contents without extra (scheduler and rng)",
    f"{M}.tokenizer_name_or_path": "actor_rollout_ref.model.path (the Hugging Face folder: weights, tokenizer) "
    "unless actor_config.load is one; beside it, only a folder holding the same tokenizer files "
    "(actor_rollout_ref.model.tokenizer_path): verl's vLLM rollout reads model.path's own tokenizer",
    f"{M}.data_path": "data.train_files: the trial's training rows (read in any format grpo.engine.datasets "
    "knows), written as verl's parquet in the run folder",
    f"{M}.split": "data.val_files: the split's validation part of data_path, as the embedded engine splits it, "
    "written as verl's parquet (the held-out prompts every backend evaluates)",
    f"{E}.eval_data_path": "data.val_files: the held-out file's rows instead of the split's, written as verl's parquet",
    f"{E}.data_fields": "the prompt and label columns data.train_files and data.val_files are written from",
    f"{E}.eval_every": f"trainer.test_freq, with {R}.val_kwargs n={EVAL_SAMPLES} sampled responses per held-out "
    "prompt: eval/acc is verl's val-core/<data_source>/acc/mean@N (the engine's eval/acc_greedy has no verl "
    "counterpart: one validation configuration per run)",
    **{
        f"{E}.{k}": "the generated task's rows (engine.task arithmetic), written as verl's parquet: "
        "data.train_files and data.val_files"
        for k in ("task", "task_size", "task_seed", "eval_size")
    },
    f"{E}.exit_interval": "a pbt segment's end: trainer.total_training_steps cut at the next multiple",
    f"{E}.loss_agg_mode": f"{A}.loss_agg_mode (verl's own modes); seq-mean-token-sum-norm with "
    f"{A}.loss_scale_factor = max_tokens, the engine's constant (verl's default divides by each micro batch's "
    "padded length)",
    f"{E}.policy_loss": f"{A}.policy_loss.loss_mode (vanilla, gspo; the gspo preset aggregates "
    "seq-mean-token-mean as verl's GSPO recipe)",
    f"{E}.advantage_estimator": "group_norm: algorithm.norm_adv_by_std_in_grpo true; group_norm_no_std: false",
    f"{RL}.verifier_function": "reward.custom_reward_function: a compute_score generated in the run folder scores "
    "each response with the trial's verifiers and user functions (grpo.engine.rewards.score, as the engine and "
    "TRL do), reporting each one's score beside the total",
    f"{RL}.verifier_weight": "the weights of the generated compute_score's total (reward.custom_reward_function)",
    f"{RL}.rule_reward": "the verifiers are the reward (true is the only value verl runs here)",
    "verl": "verl's own keys by verl's config path (verl.<path>: fixed or searched), rendered after the mapped keys "
    "and validated by verl's composition; a path a mapped key or the launch sets is refused naming that key",
}
NO_EFFECT: dict[str, str] = {
    f"{RL}.filter_groups_max_batches": "verl 0.9.1's v1 replay buffer has no limit (it ignores "
    "algorithm.filter_groups.max_num_gen_batches, trainer_base.py warns, and refills until the batch is full): "
    "with filter_groups_enable a limit (> 0) is refused, 0 (no limit) is what verl does",
    f"{E}.warm_start_steps": "the embedded engine's warm start of its own model: verl starts from model.path's weights",
    f"{E}.recompute_old_logprobs": "an embedded-engine switch: verl's actor recomputes the old log-probs itself",
    f"{E}.device": "verl runs on the trial's GPUs (trainer.device cuda)",
    f"{E}.num_threads": "threads of the embedded engine; a verl trial's worker only supervises its job",
    f"{M}.no_save_optim": "verl's checkpoints always hold the optimizer (save_contents default)",
    f"{M}.no_save_rng": "verl's checkpoints always hold the scheduler and rng (extra)",
    f"{M}.init_method_std": "verl starts from model.path's weights, never a random init",
    f"{G}.max_model_len": "verl sizes the rollout from max_prompt_length + max_response_length",
    f"{S}.min_p": "verl's rollout has no min_p; refused unless 0",
}
ARCH_REASON = (
    "verl builds the model from actor_rollout_ref.model.path's config.json (actor_config.load's Hugging Face folder, "
    "else tokenizer_name_or_path)"
)

# Applied with only some values (check() refuses the others in one line).
VALUES: dict[str, tuple[object, ...]] = {
    f"{RL}.adv_estimator": ("group_norm",),
    f"{E}.advantage_estimator": ("group_norm", "group_norm_no_std"),
    f"{E}.policy_loss": ("vanilla", "gspo"),
    f"{RL}.rule_reward": (True,),
    f"{S}.min_p": (0.0,),
    f"{M}.hidden_dropout": (0.0,),  # refused keys whose default verl does carry out (HF models: no dropout)
    f"{M}.attention_dropout": (0.0,),
}
REFUSED_REASON = "not rendered by backend verl; backend: embedded applies it"
_FROM_MODEL = "verl takes it from model.path's own files (config.json, tokenizer, chat template), not from this config"
_DAPO_REWARD = "not rendered yet (verl's DAPO reward manager: reward.reward_kwargs.overlong_buffer_cfg)"
# Refused keys, with why on verl (a value other than the default is a check() error naming the key).
REFUSED: dict[str, str] = {
    **{f"{RL}.{k}": _DAPO_REWARD
       for k in ("overlong_buffer_enable", "overlong_buffer", "overlong_buffer_penalty_factor", "rollout_max_tokens")},
    **{f"{M}.{k}": _FROM_MODEL for k in ("attention_bias", "attention_mask_type", "noop_layers", "rope_scaling_type",
                                       "rope_scaling_factor", "vocab_extra_ids", "mm_model", "tokenizer_type",
                                       "prompt_type", "prompt_type_path")},
    f"{M}.hidden_dropout": "verl trains model.path's model as its config.json has it; 0 (MindSpeed-RL's recipes) only",
    f"{M}.attention_dropout": "verl trains model.path's model as its config.json has it; 0 (MindSpeed-RL's recipes) "
    "only",
    f"{M}.optimizer": "verl's FSDP actor optimizer is AdamW (optim.optimizer): adam only",
    f"{M}.pretrained_checkpoint": "verl starts from model.path only",
    f"{M}.skip_train": "verl always trains",
    f"{RL}.critic_resource": "a critic (PPO): backend verl runs GRPO only",
    f"{RL}.integrated_mode_config": "a separate reference checkpoint: verl's reference is model.path's weights",
    f"{RL}.is_multimodal": "multimodal: not rendered yet (verl's VLM path needs image data and processor settings)",
    f"{RL}.vit_resource": "multimodal: not rendered yet (verl's VLM path needs image data and processor settings)",
    f"{RL}.multi_turn_enable": "multi-turn tool rollouts: not rendered yet (verl's agent loop, rollout.multi_turn)",
    f"{RL}.partial_rollout_max_split": "partial rollouts: not rendered yet",
    f"{RL}.reward_resource": "a reward model: not rendered yet (verl's reward.reward_model)",
}  # fmt: skip


def dynamic_sampling_problems(cfg: GRPOConfig, source: str) -> list[str]:
    """DAPO's keys that verl 0.9.1's v1 trainer cannot carry out (see APPLIED): a generation-batch limit, and a
    generation batch other than the trained one."""
    from grpo.engine.variants import problems as engine_problems

    rl = cfg.rl_config
    if not getattr(rl, "filter_groups_enable", False):
        return []
    # the engine's own checks of these keys (a metric that is none of the verifiers: verl would fail mid-run on a
    # group missing it), then what verl's v1 trainer cannot do
    prefix = f"{cfg._source}: rl_config.filter_groups"
    out = [line for line in engine_problems(cfg) if line.startswith(prefix)]
    most = getattr(rl, "filter_groups_max_batches", 0)
    if isinstance(most, int) and most > 0:
        out.append(
            f"{source}: rl_config.filter_groups_max_batches: {most}: backend verl refuses a limit (verl 0.9.1's v1 "
            "replay buffer ignores max_num_gen_batches and refills until the batch is full); set it to 0"
        )
    kept, gbs = getattr(rl, "filter_groups_train_batch_size", None), cfg.megatron_training.global_batch_size
    if kept != gbs:
        out.append(
            f"{source}: megatron_training.global_batch_size: {gbs}: backend verl has no generation batch under "
            f"dynamic sampling (it refills prompt by prompt until rl_config.filter_groups_train_batch_size={kept} "
            "groups are kept); set both to the same number"
        )
    return out


def classify(name: str) -> KeyClass:
    """A table key (grpo/engine/coverage.py's name) as backend verl sees it."""
    entry = TABLE[name]
    if name in APPLIED:
        return KeyClass(name, Kind.APPLIED, APPLIED[name])
    if name in NO_EFFECT:
        return KeyClass(name, Kind.NO_EFFECT, NO_EFFECT[name])
    if name in ARCH:
        return KeyClass(name, Kind.NO_EFFECT, ARCH_REASON)
    if entry.kind is Kind.NO_EFFECT:
        return KeyClass(name, Kind.NO_EFFECT, entry.reason)
    if entry.kind is Kind.APPLIED and name.count(".") == 0:  # a section or top-level choice
        return KeyClass(name, Kind.APPLIED, "the section")
    return KeyClass(name, Kind.REFUSED, REFUSED.get(name, REFUSED_REASON))


KEYS = BackendKeys(
    backend="verl",
    run="a verl run",
    classify=classify,
    values=VALUES,
    intro="rendered as an override over verl's `ppo_trainer`",
)

if __name__ == "__main__":
    import sys

    KEYS.main(sys.argv[1:])
