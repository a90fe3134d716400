"""Inert-in-context lint: a searched knob that its own config keeps from changing training.

A key can be applied and still do nothing in a given config: the PPO clip when every ratio is 1 (fully
on-policy training), the KL estimator when the KL coefficient is 0 and fixed, ``filter_groups_*`` while
dynamic sampling is off. Searching such a knob ranks seed noise. ``RULES`` is one table of such contexts
(docs/keys.md shows it); ``lint(cfg, keys)`` returns one warning per searched key a rule makes inert in
``cfg``, ``lint_points`` the same over a sweep's checked points. ``grpo-sweep validate`` prints them (for a
config, its overrides are the searched keys), a sweep prints them when it starts and records them in the
study user attr ``inert_knobs``, and the report shows them in its "why" section.

Pure functions of a config and the searched keys; config layer only (the engine, sweep and CLI import it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from grpo.config.derived import fully_on_policy, trained_prompts
from grpo.config.schema import GRPOConfig

STUDY_ATTR = "inert_knobs"  # study user attr: the warnings, one string each (docs/contracts.md)
# Sections MindSpeed-RL merges into one Megatron config: a key means the same in each (a model entry is
# model.<name>.<key>).
MEGATRON_SECTIONS = ("megatron_training", "actor_config", "ref_config", "reward_config")
ANY = "*"  # a rule whose context makes every searched key inert but those it names as exceptions


def key_name(path: str) -> str:
    """The one name of a config path: ``actor_config.lr`` and ``model.tiny_qwen.lr`` -> ``megatron.lr``;
    ``rl_config.actor_resource.num_npus`` -> ``rl_config.actor_resource``; an override's value is dropped."""
    parts = path.lstrip("+~").split("=", 1)[0].split(".")
    head = parts[0]
    if head in ("verl", "trl"):  # backend verl's and backend trl's own keys: one table row each
        return head
    if head in MEGATRON_SECTIONS and len(parts) > 1:
        return f"megatron.{parts[1]}"
    if head == "model" and len(parts) > 2:
        return f"megatron.{parts[2]}"
    if head in ("generate_config", "profiler_config") and len(parts) > 2:
        return ".".join(parts[:3])
    return ".".join(parts[:2])


def _rl(cfg: GRPOConfig, key: str) -> Any:
    return getattr(cfg.rl_config, key, None)  # long-tail keys are typed by the manifest


def on_policy(cfg: GRPOConfig) -> str | None:
    """One optimizer step per iteration: every importance ratio is 1 (old log-probs = the current ones)."""
    rl, prompts = cfg.rl_config, trained_prompts(cfg)
    if fully_on_policy(cfg):
        return (
            f"training is fully on-policy (epochs 1, mini_batch_size {rl.mini_batch_size} >= {prompts} prompts per "
            f"iteration: one optimizer step), so every importance ratio is 1 and no clip applies"
        )
    return None


def kl_off(cfg: GRPOConfig) -> str | None:
    rl = cfg.rl_config
    if rl.init_kl_coef == 0 and rl.kl_ctrl_type == "fixed":
        return "the KL coefficient is 0 and fixed (init_kl_coef 0, kl_ctrl_type fixed): no KL term is computed"
    return None


def kl_fixed(cfg: GRPOConfig) -> str | None:
    if cfg.rl_config.kl_ctrl_type == "fixed":
        return "kl_ctrl_type is fixed: only the adaptive controller reads the KL target and horizon"
    return None


def dynamic_sampling_off(cfg: GRPOConfig) -> str | None:
    if not _rl(cfg, "filter_groups_enable"):
        return "dynamic sampling is off (filter_groups_enable false)"
    return None


def overlong_off(cfg: GRPOConfig) -> str | None:
    if not _rl(cfg, "overlong_buffer_enable"):
        return "overlong reward shaping is off (overlong_buffer_enable false)"
    return None


def clip_higher_off(cfg: GRPOConfig) -> str | None:
    if not _rl(cfg, "clip_higher_enable"):
        return "clip-higher is off (clip_higher_enable false): the clip is 1 -/+ clip_ratio"
    return None


def clip_higher_on(cfg: GRPOConfig) -> str | None:
    if _rl(cfg, "clip_higher_enable"):
        return "clip-higher is on: the clip is 1 - clip_ratio_low .. 1 + clip_ratio_high, not clip_ratio"
    return None


def greedy(cfg: GRPOConfig) -> str | None:
    sc = cfg.generate_config.sampling_config
    if sc.temperature == 0 or sc.top_k == 1:
        why = "temperature 0" if sc.temperature == 0 else "top_k 1"
        return f"sampling is greedy ({why}): only the most likely token is ever drawn"
    return None


def single_sample(cfg: GRPOConfig) -> str | None:
    if cfg.rl_config.n_samples_per_prompt == 1 and cfg.rl_config.adv_estimator != "gae":
        return (
            "n_samples_per_prompt is 1 with group-normalised advantages: every advantage is 0, so the policy "
            "gradient is 0 (only the KL and entropy terms could move the policy)"
        )
    return None


def lora_off(cfg: GRPOConfig) -> str | None:
    if not cfg.megatron_value("lora_target_modules"):
        return "LoRA is off (lora_target_modules null): every weight trains"
    return None


@dataclass(frozen=True)
class InertRule:
    """``keys`` (``key_name`` form, or ``ANY`` but ``unless``) are inert when ``context(cfg)`` gives a reason."""

    name: str
    keys: tuple[str, ...]
    when: str  # the context in words (docs/keys.md)
    context: Callable[[GRPOConfig], str | None]
    unless: tuple[str, ...] = ()

    def covers(self, name: str) -> bool:
        if ANY in self.keys:
            return name not in self.unless
        return name in self.keys


RL = "rl_config"
CLIP_KEYS = (f"{RL}.clip_ratio", f"{RL}.clip_higher_enable", f"{RL}.clip_ratio_low", f"{RL}.clip_ratio_high")
RULES: tuple[InertRule, ...] = (
    InertRule(
        "on_policy_clip",
        # GSPO's sequence ratio is 1 too and its token gradients are then vanilla's (grpo/engine/loss.py).
        (*CLIP_KEYS, "engine.policy_loss"),
        "epochs 1 and mini_batch_size >= the prompts trained per iteration (one optimizer step: ratio 1)",
        on_policy,
    ),
    InertRule(
        "kl_off",
        (f"{RL}.kl_penalty", f"{RL}.kl_target", f"{RL}.kl_horizon", f"{RL}.use_kl_in_reward"),
        "init_kl_coef 0 and kl_ctrl_type fixed",
        kl_off,
    ),
    InertRule("kl_fixed", (f"{RL}.kl_target", f"{RL}.kl_horizon"), "kl_ctrl_type fixed", kl_fixed),
    InertRule(
        "dynamic_sampling_off",
        (f"{RL}.filter_groups_metric", f"{RL}.filter_groups_max_batches", f"{RL}.filter_groups_train_batch_size"),
        "filter_groups_enable false",
        dynamic_sampling_off,
    ),
    InertRule(
        "overlong_off",
        (f"{RL}.overlong_buffer", f"{RL}.overlong_buffer_penalty_factor", f"{RL}.rollout_max_tokens"),
        "overlong_buffer_enable false",
        overlong_off,
    ),
    InertRule(
        "clip_higher_off",
        (f"{RL}.clip_ratio_low", f"{RL}.clip_ratio_high"),
        "clip_higher_enable false",
        clip_higher_off,
    ),
    InertRule("clip_higher_on", (f"{RL}.clip_ratio",), "clip_higher_enable true", clip_higher_on),
    InertRule(
        "greedy_sampling",
        tuple(f"generate_config.sampling_config.{k}" for k in ("top_p", "top_k", "min_p", "temperature")),
        "temperature 0 or top_k 1 (greedy decoding)",
        greedy,
    ),
    InertRule(
        "single_sample",
        (ANY,),
        "n_samples_per_prompt 1 with group-normalised advantages (every advantage is 0)",
        single_sample,
        unless=(
            f"{RL}.n_samples_per_prompt",
            f"{RL}.init_kl_coef",
            f"{RL}.kl_penalty",
            f"{RL}.kl_ctrl_type",
            f"{RL}.entropy_coeff",
            f"{RL}.adv_estimator",
            "engine.advantage_estimator",
        ),
    ),
    InertRule("lora_off", ("megatron.lora_r", "megatron.lora_alpha"), "lora_target_modules null", lora_off),
)


def _inert(cfg: GRPOConfig, keys: Sequence[str]) -> dict[str, str]:
    """Searched key -> why it is inert in ``cfg`` (the first rule that holds), in the order of ``keys``."""
    found: dict[str, str] = {}
    for rule in RULES:
        hit = [k for k in keys if k not in found and rule.covers(key_name(k))]
        if not hit:
            continue
        why = rule.context(cfg)
        if why is None:
            continue
        if rule.name == "greedy_sampling":  # the key that makes decoding greedy is not itself inert
            sc = cfg.generate_config.sampling_config
            hit = [k for k in hit if not (key_name(k).endswith(".top_k") and sc.temperature != 0)]
            hit = [k for k in hit if not (key_name(k).endswith(".temperature") and sc.temperature == 0)]
        found.update(dict.fromkeys(hit, why))
    return {k: found[k] for k in keys if k in found}


def lint(cfg: GRPOConfig, keys: Iterable[str]) -> list[str]:
    """One line per searched key (an override path) that ``cfg`` keeps from changing training."""
    return [f"{key}: cannot change training in this config: {why}" for key, why in _inert(cfg, list(keys)).items()]


def lint_points(configs: Sequence[GRPOConfig], keys: Sequence[str]) -> list[str]:
    """``lint`` over a sweep's checked points: one line per key, with how many points it is inert in."""
    seen: dict[str, list[str]] = {}
    for cfg in configs:
        for key, why in _inert(cfg, keys).items():
            seen.setdefault(key, []).append(why)
    out = []
    for key in keys:
        whys = seen.get(key)
        if whys:
            n = len(configs)
            where = "in every checked point" if len(whys) == n else f"in {len(whys)} of {n} checked points"
            out.append(f"search.{key}: cannot change training {where}: {whys[0]}")
    return out


def override_keys(overrides: Iterable[str]) -> list[str]:
    """The keys of Hydra overrides that set a value (``a.b=1`` -> ``a.b``; group choices and deletions kept out)."""
    keys = []
    for override in overrides:
        key, eq, _ = override.partition("=")
        if eq and not key.startswith(("~", "hydra")) and "/" not in key:
            keys.append(key.lstrip("+"))
    return keys
