"""A trial's verl config composed and validated by verl's own code, on a CPU, before anything launches.

What runs is verl's: its ``ppo_trainer`` config from the installed verl (``verl/trainer/config``), composed by
Hydra; the trial's overrides applied by Hydra's own override step (``ConfigLoaderImpl._apply_overrides_to_config``,
the step ``compose`` ends with: an unknown key is "Could not override", as on ``python -m verl.trainer.main_ppo``);
then what ``verl.trainer.main_ppo.main`` runs before ``ray.init`` (``validate_config`` with ``need_reference_policy``
and ``need_critic``: batch divisibility, micro batches, the actor as ``FSDPActorConfig`` through
``omega_conf_to_dataclass``), and the dataclasses verl's workers build from the algorithm and rollout sections
(``AlgoConfig``, ``RolloutConfig``). The model section (``HFModelConfig``) is not built: it loads the model's
``config.json``, which lives where trials launch.

The base is composed once per process (Hydra's compose, ~1 s) and copied per trial, so a ``validate`` of 64
points costs seconds, not minutes; tests/test_verl_validate.py checks that copy-and-override equals a full
compose. A failure is one line naming the grpo-sweep key behind the verl key verl complains about (``explain``).

Importing verl pulls torch, tensordict, transformers and ray (~8 s); nothing here imports it at module level.
"""

from __future__ import annotations

import contextlib
import copy
import io
import linecache
import os
import re
import traceback
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any

CONFIG_NAME = "ppo_trainer"
# verl key (dotted, or a word verl's messages use) -> the grpo-sweep key a user sets it through.
SOURCES: dict[str, str] = {
    "algorithm.adv_estimator": "rl_config.adv_estimator",
    "algorithm.gamma": "rl_config.gamma",
    "algorithm.lam": "rl_config.lam",
    "algorithm.kl_penalty": "rl_config.kl_penalty",
    "algorithm.kl_ctrl.type": "rl_config.kl_ctrl_type",
    "algorithm.kl_ctrl.kl_coef": "rl_config.init_kl_coef",
    "algorithm.kl_ctrl.target_kl": "rl_config.kl_target",
    "algorithm.kl_ctrl.horizon": "rl_config.kl_horizon",
    "algorithm.use_kl_in_reward": "rl_config.use_kl_in_reward",
    "data.train_batch_size": "megatron_training.global_batch_size",
    "data.max_prompt_length": "rl_config.max_prompt_length",
    "data.max_response_length": "generate_config.sampling_config.max_tokens",
    "actor_rollout_ref.actor.ppo_mini_batch_size": "rl_config.mini_batch_size",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "actor_config.micro_batch_size",
    "actor_rollout_ref.actor.ppo_epochs": "rl_config.epochs",
    "actor_rollout_ref.actor.optim.lr": "actor_config.lr",
    "actor_rollout_ref.actor.optim.lr_scheduler_type": "actor_config.lr_decay_style",
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": "actor_config.lr_warmup_fraction",
    "actor_rollout_ref.actor.optim.min_lr_ratio": "actor_config.min_lr",
    "actor_rollout_ref.actor.optim.weight_decay": "actor_config.weight_decay",
    "actor_rollout_ref.actor.optim.betas": "actor_config.adam_beta1",
    "actor_rollout_ref.actor.optim.clip_grad": "actor_config.clip_grad",
    "actor_rollout_ref.actor.clip_ratio": "rl_config.clip_ratio",
    "actor_rollout_ref.actor.clip_ratio_low": "rl_config.clip_ratio_low",
    "actor_rollout_ref.actor.clip_ratio_high": "rl_config.clip_ratio_high",
    "actor_rollout_ref.actor.entropy_coeff": "rl_config.entropy_coeff",
    "actor_rollout_ref.actor.loss_agg_mode": "rl_config.token_level_loss",
    "actor_rollout_ref.actor.use_kl_loss": "rl_config.init_kl_coef",
    "actor_rollout_ref.actor.kl_loss_coef": "rl_config.init_kl_coef",
    "actor_rollout_ref.actor.kl_loss_type": "rl_config.kl_penalty",
    "actor_rollout_ref.rollout.n": "rl_config.n_samples_per_prompt",
    "actor_rollout_ref.rollout.temperature": "generate_config.sampling_config.temperature",
    "actor_rollout_ref.rollout.top_p": "generate_config.sampling_config.top_p",
    "actor_rollout_ref.rollout.top_k": "generate_config.sampling_config.top_k",
    "actor_rollout_ref.rollout.seed": "generate_config.sampling_config.seed",
    "actor_rollout_ref.rollout.gpu_memory_utilization": "generate_config.gpu_memory_utilization",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "generate_config.infer_tensor_parallel_size",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": "rl_config.actor_forward_micro_batch_size",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": "rl_config.ref_forward_micro_batch_size",
    "trainer.n_gpus_per_node": "rl_config.actor_resource.num_npus",
    "trainer.nnodes": "rl_config.actor_resource.num_npus",
    "trainer.total_training_steps": "megatron_training.train_iters",
    "trainer.save_freq": "megatron_training.save_interval",
    "trainer.test_freq": "engine.eval_every",
    "trainer.total_epochs": "megatron_training.train_iters",
    "data.seed": "megatron_training.seed",
    "data.shuffle": "megatron_training.no_shuffle",
    "data.train_files": "megatron_training.data_path",
    "data.val_files": "megatron_training.split",
    "actor_rollout_ref.actor.data_loader_seed": "megatron_training.seed",
    "actor_rollout_ref.actor.shuffle": "rl_config.shuffle_mini_batch",
    "actor_rollout_ref.actor.loss_scale_factor": "generate_config.sampling_config.max_tokens",
    "actor_rollout_ref.actor.policy_loss.loss_mode": "engine.policy_loss",
    "algorithm.norm_adv_by_std_in_grpo": "engine.advantage_estimator",
    "algorithm.filter_groups.enable": "rl_config.filter_groups_enable",
    "algorithm.filter_groups.metric": "rl_config.filter_groups_metric",
    "actor_rollout_ref.rollout.val_kwargs.do_sample": "generate_config.sampling_config.temperature",
    "actor_rollout_ref.rollout.val_kwargs.temperature": "generate_config.sampling_config.temperature",
    "actor_rollout_ref.rollout.val_kwargs.top_p": "generate_config.sampling_config.top_p",
    "actor_rollout_ref.rollout.val_kwargs.top_k": "generate_config.sampling_config.top_k",
    "actor_rollout_ref.model.lora_rank": "megatron_training.lora_r",
    "actor_rollout_ref.model.lora_alpha": "megatron_training.lora_alpha",
    "actor_rollout_ref.model.target_modules": "megatron_training.lora_target_modules",
}
# Words verl's validate_config messages use for a value it computed from the keys above.
ALIASES: dict[str, str] = {
    "real_train_batch_size": "megatron_training.global_batch_size",
    "minimal possible batch size": "rl_config.actor_resource.num_npus",
    "n_gpus": "rl_config.actor_resource.num_npus",
    "model_parallel_size": "rl_config.actor_resource.num_npus",
}


class VerlMissing(RuntimeError):
    """verl cannot be imported here (the message says how to install it)."""


def verl_config_dir() -> Path:
    """The installed verl's own ``trainer/config`` folder (found without importing verl)."""
    import importlib.util

    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise VerlMissing(
            "verl is not installed here (pip install --no-deps verl==0.9.1 && pip install 'grpo-sweep[verl]', "
            "docs/backend_verl.md)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config"


def compose(overrides: list[str] | tuple[str, ...] = ()) -> Any:
    """verl's ``ppo_trainer`` composed by Hydra with ``overrides`` (a full compose, as main_ppo's ``@hydra.main``)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.initialize import get_gh_backup, restore_gh_from_backup

    backup = get_gh_backup()  # a Hydra app already running in this process (grpo-train) keeps its state
    try:
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
            return hydra_compose(config_name=CONFIG_NAME, overrides=list(overrides))
    finally:
        restore_gh_from_backup(backup)


@lru_cache(maxsize=1)
def _base() -> Any:
    return compose()


def apply(overrides: list[str] | tuple[str, ...]) -> Any:
    """A copy of the composed base with ``overrides`` applied by Hydra's own override step."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.override_parser.overrides_parser import OverridesParser

    cfg = copy.deepcopy(_base())
    parsed = OverridesParser.create().parse_overrides(list(overrides))
    ConfigLoaderImpl._apply_overrides_to_config(parsed, cfg)
    return cfg


def _import_verl() -> Any:
    os.environ.setdefault("VERL_USE_EXTERNAL_PLUGINS", "none")  # no third-party plugin runs in the driver
    try:
        with warnings.catch_warnings():  # torch.cuda's pynvml notice and the like: not the user's concern here
            warnings.simplefilter("ignore")
            import verl.utils.config as verl_config
            from verl.trainer.ppo import utils as ppo_utils
    except ImportError as err:
        raise VerlMissing(
            f"verl cannot be imported here ({type(err).__name__}: {err}); pip install --no-deps verl==0.9.1 && "
            "pip install 'grpo-sweep[verl]' (docs/backend_verl.md)"
        ) from None
    return verl_config, ppo_utils


def validate(overrides: list[str] | tuple[str, ...]) -> Any:
    """The trial's verl config, composed and validated by verl (raises what verl raises; VerlMissing without verl)."""
    verl_config, ppo_utils = _import_verl()
    cfg = apply(overrides)
    checked = _lora_rank_checked_here(cfg)
    # validate_config prints a line per check and warns about deprecated keys: the preflight's output is ours
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        verl_config.validate_config(
            config=checked,
            use_reference_policy=ppo_utils.need_reference_policy(cfg),
            use_critic=ppo_utils.need_critic(cfg),
        )
        verl_config.omega_conf_to_dataclass(cfg.algorithm)  # AlgoConfig (the trainer builds it)
        verl_config.omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)  # RolloutConfig (the rollout workers)
    return cfg


# verl-0.9.1:verl/workers/rollout/vllm_rollout/utils.py get_vllm_max_lora_rank: vLLM's MaxLoRARanks when vLLM is
# not importable (its own fallback list).
VLLM_MAX_LORA_RANK = 512


def _lora_rank_checked_here(cfg: Any) -> Any:
    """``cfg``, or where vLLM is not installed (a CPU driver) and LoRA is on, a copy with ``lora_rank`` 0 after
    checking the rank as verl would: ``validate_config`` imports vLLM for that one check (a LoRA rank vLLM can
    serve) and would fail here on the import, not on the config."""
    import importlib.util

    rank = int(cfg.actor_rollout_ref.model.get("lora_rank", 0) or 0)
    if rank <= 0 or cfg.actor_rollout_ref.rollout.name != "vllm" or importlib.util.find_spec("vllm") is not None:
        return cfg
    if rank > VLLM_MAX_LORA_RANK:
        raise ValueError(f"lora_rank must be less than or equal to {VLLM_MAX_LORA_RANK}, but got {rank}")
    copied = copy.deepcopy(cfg)
    copied.actor_rollout_ref.model.lora_rank = 0
    return copied


def message(err: BaseException) -> str:
    """verl's message on one line: the innermost cause's (Hydra's instantiate wraps a dataclass's error), and for a
    bare ``assert`` the asserting source line."""
    inner = err
    while (inner.__cause__ or inner.__context__) is not None:
        inner = inner.__cause__ or inner.__context__  # type: ignore[assignment]
    text = str(inner).strip()
    if not text:
        frames = traceback.extract_tb(inner.__traceback__)
        if frames:
            last = frames[-1]
            line = (last.line or linecache.getline(last.filename, last.lineno or 0)).strip()
            text = f"{Path(last.filename).name}: {line}"
    return " ".join(text.split())[:400]


def explain(err: BaseException, settings: dict[str, Any], source: str) -> str:
    """One line for verl's error: ``<source>: <grpo-sweep key>: verl refuses <verl key>=<value>: <verl's words>``."""
    text = message(err)
    found: list[tuple[int, str, str | None]] = []  # (where in the message, grpo-sweep key, verl key)
    for verl_key, ours in SOURCES.items():
        leaf = verl_key.rsplit(".", 1)[-1]
        for name in {verl_key, leaf}:
            match = re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text)
            if match:
                found.append((match.start(), ours, verl_key))
    for word, ours in ALIASES.items():
        match = re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text)
        if match:
            found.append((match.start(), ours, None))
    if not found:
        return f"{source}: backend verl: verl refuses the trial's config: {type(err).__name__}: {text}"
    _, ours, named = max(found, key=lambda f: f[0])  # the last one named: "A must be >= B" is about B
    shown = f" {named}={settings[named]}" if named is not None and named in settings else ""
    return f"{source}: {ours}: verl refuses{shown}: {text}"
