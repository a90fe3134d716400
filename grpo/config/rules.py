"""Cross-field rules: checked on every composed config before anything runs.

Each rule is a small function of the config that returns ``None`` when the config obeys it, or one
message naming the keys and values involved. ``check_rules`` runs them all and returns every
message. Rules on a single field (0 <= clip_ratio <= 1, temperature > 0, 0 < top_p <= 1,
top_k == -1 or >= 1, 0 <= min_p < 1, 0 < gpu_memory_utilization <= 1, ...) are field constraints in
``schema`` and report as ``rl_config.clip_ratio: must be <= 1 (got 1.5)``.

Batch arithmetic follows MindSpeed-RL: ``global_batch_size`` and ``mini_batch_size`` count prompts,
and MindSpeed-RL multiplies ``mini_batch_size`` by ``n_samples_per_prompt`` internally, so an
optimizer step consumes ``mini_batch_size * n_samples_per_prompt`` responses.
"""

from __future__ import annotations

from collections.abc import Callable

from grpo.config.schema import GRPOConfig, ModelConfig

Rule = Callable[[GRPOConfig], "str | None"]

TP = "actor_config.tensor_model_parallel_size"
PP = "actor_config.pipeline_model_parallel_size"
NPUS = "rl_config.actor_resource.num_npus"
GBS = "megatron_training.global_batch_size"
MBS = "actor_config.micro_batch_size"
N = "rl_config.n_samples_per_prompt"
ITP = "generate_config.infer_tensor_parallel_size"
CP = "actor_config.context_parallel_size"


def _sizes(cfg: GRPOConfig) -> tuple[int, int, int, int, int]:
    """(num_npus, TP, PP, train DP, infer TP); DP = num_npus / (TP * PP * CP) as MindSpeed-RL computes it."""
    a = cfg.actor_config
    npus = cfg.rl_config.actor_resource.num_npus
    tp, pp = a.tensor_model_parallel_size, a.pipeline_model_parallel_size
    return npus, tp, pp, npus // (tp * pp * a.context_parallel_size), cfg.generate_config.infer_tensor_parallel_size


def _split(cfg: GRPOConfig) -> tuple[str, int, str]:
    """How the training devices of one replica are named and counted: ("TP*PP", 8, "2*4") or with CP."""
    a = cfg.actor_config
    tp, pp, cp = a.tensor_model_parallel_size, a.pipeline_model_parallel_size, a.context_parallel_size
    if cp == 1:
        return "TP*PP", tp * pp, f"{TP}*{PP}={tp}*{pp}"
    return "TP*PP*CP", tp * pp * cp, f"{TP}*{PP}*{CP}={tp}*{pp}*{cp}"


def _arch(cfg: GRPOConfig) -> ModelConfig | None:
    return cfg.model.get(cfg.actor_config.model)


def _layout_ok(cfg: GRPOConfig) -> bool:
    return cfg.rl_config.actor_resource.num_npus % _split(cfg)[1] == 0


# ------------------------------------------------------------------------------------ model choice
def model_is_loaded(cfg: GRPOConfig) -> str | None:
    """megatron_training.model, actor_config.model (and ref_config/reward_config.model) name loaded models."""
    loaded = ", ".join(sorted(cfg.model)) or "none"
    names = [("megatron_training.model", cfg.megatron_training.model), ("actor_config.model", cfg.actor_config.model)]
    names += [(f"{r}.model", s.model) for r in ("ref_config", "reward_config") if (s := getattr(cfg, r)) and s.model]
    for key, name in names:
        if name not in cfg.model:
            return f"{key}: model '{name}' is not loaded by the defaults list (loaded: {loaded})"
    return None


def integrated_worker_sections(cfg: GRPOConfig) -> str | None:
    """use_integrated_worker=false needs ref_config and reward_config; true refuses them (parse_training_config)."""
    missing = [r for r in ("ref_config", "reward_config") if getattr(cfg, r) is None]
    if not cfg.rl_config.use_integrated_worker and missing:
        return (
            f"rl_config.use_integrated_worker=false needs ref_config and reward_config sections (missing: "
            f"{', '.join(missing)}); MindSpeed-RL merges each over megatron_training for its role"
        )
    given = [r for r in ("ref_config", "reward_config") if getattr(cfg, r) is not None]
    if cfg.rl_config.use_integrated_worker and given:
        return f"{given[0]} is set but rl_config.use_integrated_worker=true (the actor's config serves every role)"
    return None


# ---------------------------------------------------------------------------------- train layout
def npus_divisible_by_train_tp_pp(cfg: GRPOConfig) -> str | None:
    """num_npus % (TP * PP * CP) == 0: the train data-parallel size DP = num_npus / (TP * PP * CP) is whole."""
    npus = cfg.rl_config.actor_resource.num_npus
    names, size, spelt = _split(cfg)
    if npus % size:
        return (
            f"{NPUS}={npus} is not divisible by {spelt}={size} (train DP = num_npus / ({names}) must be a whole number)"
        )
    return None


def global_batch_divisible_by_train_dp(cfg: GRPOConfig) -> str | None:
    """global_batch_size % DP == 0: every train data-parallel rank gets the same number of prompts."""
    if not _layout_ok(cfg):
        return None
    dp = _sizes(cfg)[3]
    gbs = cfg.megatron_training.global_batch_size
    if gbs % dp:
        return f"{GBS}={gbs} is not divisible by train DP={dp} (num_npus / ({_split(cfg)[0]}))"
    return None


def dp_share_divisible_by_micro_batch(cfg: GRPOConfig) -> str | None:
    """(global_batch_size / DP * n_samples_per_prompt) % micro_batch_size == 0 (MindSpeed-RL's check)."""
    if not _layout_ok(cfg):
        return None
    _, _, _, dp, _ = _sizes(cfg)
    gbs, n = cfg.megatron_training.global_batch_size, cfg.rl_config.n_samples_per_prompt
    mbs = cfg.actor_config.micro_batch_size
    if gbs % dp == 0 and (gbs // dp * n) % mbs:
        return f"{GBS}/DP*{N} = {gbs}/{dp}*{n} = {gbs // dp * n} responses per rank is not divisible by {MBS}={mbs}"
    return None


def _arch_split(cfg: GRPOConfig, key: str, size_key: str, attr: str | None = None) -> str | None:
    """``model.<actor>.<key> % <size_key> == 0``, the shape of every architecture-split rule below.

    ``attr`` is the ModelConfig attribute holding the value when it differs from ``key``.
    """
    arch = _arch(cfg)
    if arch is None:
        return None
    actor = cfg.actor_config
    size = actor.tensor_model_parallel_size if size_key == TP else actor.pipeline_model_parallel_size
    value = getattr(arch, attr or key)
    if value % size:
        return f"model.{actor.model}.{key}={value} is not divisible by {size_key}={size}"
    return None


def heads_divisible_by_tp(cfg: GRPOConfig) -> str | None:
    """num_attention_heads % TP == 0: attention heads split evenly across tensor-parallel ranks."""
    return _arch_split(cfg, "num_attention_heads", TP)


def query_groups_divisible_by_tp(cfg: GRPOConfig) -> str | None:
    """num_query_groups % TP == 0: key/value heads split evenly across tensor-parallel ranks."""
    if heads_divisible_by_tp(cfg):
        return None  # groups divide heads: heads_divisible_by_tp already names the cause
    return _arch_split(cfg, "num_query_groups", TP, attr="effective_query_groups")


def stage_layers(cfg: GRPOConfig) -> list[int] | None:
    """Layers per pipeline stage: actor_config.num_layer_list, else num_layers / PP each (None: not whole)."""
    arch, actor = _arch(cfg), cfg.actor_config
    pp = actor.pipeline_model_parallel_size
    if actor.num_layer_list is not None:
        try:
            return [int(n) for n in actor.num_layer_list.split(",")]
        except ValueError:
            return None
    if arch is None or arch.num_layers % pp:
        return None
    return [arch.num_layers // pp] * pp


def layers_divisible_by_pp(cfg: GRPOConfig) -> str | None:
    """num_layers % PP == 0 (even stages), or num_layer_list has one entry per stage summing to num_layers."""
    actor, arch = cfg.actor_config, _arch(cfg)
    listed = actor.num_layer_list
    if listed is None:
        return _arch_split(cfg, "num_layers", PP)
    layers = stage_layers(cfg)
    pp = actor.pipeline_model_parallel_size
    if layers is None or any(n < 1 for n in layers):
        return f"actor_config.num_layer_list={listed!r} must be comma-separated layer counts >= 1 (e.g. 16,17,16,15)"
    if len(layers) != pp:
        return f"actor_config.num_layer_list={listed!r} has {len(layers)} entries, {PP}={pp} stages"
    if arch is not None and sum(layers) != arch.num_layers:
        return (
            f"actor_config.num_layer_list={listed!r} sums to {sum(layers)}, "
            f"model.{actor.model}.num_layers={arch.num_layers}"
        )
    return None


def vocab_divisible_by_tp(cfg: GRPOConfig) -> str | None:
    """padded_vocab_size % TP == 0: the vocabulary-parallel embedding splits evenly."""
    return _arch_split(cfg, "padded_vocab_size", TP)


# ------------------------------------------------------------------------------ rollout layout
def infer_pp_is_one(cfg: GRPOConfig) -> str | None:
    """generate_config.infer_pipeline_parallel_size must be 1 (vLLM pipeline parallel is unsupported)."""
    ipp = cfg.generate_config.infer_pipeline_parallel_size
    if ipp != 1:
        return f"generate_config.infer_pipeline_parallel_size={ipp}: only 1 is supported (no rollout pipeline parallel)"
    return None


def train_and_infer_tp_are_multiples(cfg: GRPOConfig) -> str | None:
    """Train TP and infer TP must be multiples of one another (weights reshard between them)."""
    _, tp, _, _, itp = _sizes(cfg)
    if max(tp, itp) % min(tp, itp):
        return f"{TP}={tp} and {ITP}={itp} must be multiples of one another (weight resharding)"
    return None


def infer_tp_fits_train_devices(cfg: GRPOConfig) -> str | None:
    """DP * TP >= infer TP: one rollout replica fits in the devices of one pipeline stage."""
    if not _layout_ok(cfg):
        return None
    _, tp, _, dp, itp = _sizes(cfg)
    cp = cfg.actor_config.context_parallel_size
    if dp * tp * cp < itp:
        if cp == 1:
            return f"train DP*TP = {dp}*{tp} = {dp * tp} is smaller than {ITP}={itp}"
        return f"train DP*TP*CP = {dp}*{tp}*{cp} = {dp * tp * cp} is smaller than {ITP}={itp}"
    return None


def npus_divisible_by_infer_tp(cfg: GRPOConfig) -> str | None:
    """num_npus % infer TP == 0: the generation data-parallel size num_npus / infer TP is whole."""
    npus, _, _, _, itp = _sizes(cfg)
    if npus % itp:
        return f"{NPUS}={npus} is not divisible by {ITP}={itp} (generation DP must be a whole number)"
    return None


def global_batch_divisible_by_generation_dp(cfg: GRPOConfig) -> str | None:
    """generation DP = num_npus / infer TP divides global_batch_size: every replica gets whole prompts."""
    npus, _, _, _, itp = _sizes(cfg)
    if npus % itp:
        return None
    gdp = npus // itp
    gbs = cfg.megatron_training.global_batch_size
    if gbs % gdp:
        return f"{GBS}={gbs} is not divisible by generation DP = {NPUS}/{ITP} = {npus}/{itp} = {gdp}"
    return None


# ----------------------------------------------------------------------------------- mini batches
def mini_batch_divides_global_batch(cfg: GRPOConfig) -> str | None:
    """global_batch_size % mini_batch_size == 0 (both in prompts): whole optimizer steps per iteration."""
    gbs, mini = cfg.megatron_training.global_batch_size, cfg.rl_config.mini_batch_size
    if gbs % mini:
        return f"{GBS}={gbs} is not divisible by rl_config.mini_batch_size={mini} (both count prompts)"
    return None


def mini_batch_divisible_by_dp_micro_batches(cfg: GRPOConfig) -> str | None:
    """mini_batch_size * n_samples_per_prompt % (DP * micro_batch_size) == 0: whole micro batches per step."""
    if not _layout_ok(cfg) or dp_share_divisible_by_micro_batch(cfg) or global_batch_divisible_by_train_dp(cfg):
        return None  # the coarser batch rule already names the cause
    _, _, _, dp, _ = _sizes(cfg)
    mini, n = cfg.rl_config.mini_batch_size, cfg.rl_config.n_samples_per_prompt
    mbs = cfg.actor_config.micro_batch_size
    if (mini * n) % (dp * mbs):
        return (
            f"rl_config.mini_batch_size*{N} = {mini}*{n} = {mini * n} responses per optimizer step "
            f"is not divisible by train DP*{MBS} = {dp}*{mbs} = {dp * mbs}"
        )
    return None


# ----------------------------------------------------------------------------------- algorithm
def verifier_lengths_match(cfg: GRPOConfig) -> str | None:
    """len(verifier_function) == len(verifier_weight): one weight per rule reward."""
    fns, weights = cfg.rl_config.verifier_function, cfg.rl_config.verifier_weight
    if len(fns) != len(weights):
        return (
            f"rl_config.verifier_function has {len(fns)} entries {list(fns)} but "
            f"rl_config.verifier_weight has {len(weights)} {list(weights)}"
        )
    return None


def group_norm_needs_two_samples(cfg: GRPOConfig) -> str | None:
    """adv_estimator=group_norm needs n_samples_per_prompt >= 2 (a group of one has no spread)."""
    rl = cfg.rl_config
    if rl.adv_estimator == "group_norm" and rl.n_samples_per_prompt < 2:
        return f"{N}={rl.n_samples_per_prompt} must be >= 2 with rl_config.adv_estimator=group_norm"
    return None


def token_level_loss_agrees_with_loss_agg_mode(cfg: GRPOConfig) -> str | None:
    """rl_config.token_level_loss (MindSpeed-RL: true token-mean, false seq-mean-token-mean) and
    engine.loss_agg_mode (verl's modes), when both are given, name the same kind of mean."""
    mode, rl = cfg.engine.loss_agg_mode, cfg.rl_config
    token_level = getattr(rl, "token_level_loss", None)  # a long-tail key: typed by the manifest
    if mode is None or token_level is None or "token_level_loss" not in rl.model_fields_set:
        return None
    if bool(token_level) != (mode == "token-mean"):
        return (
            f"engine.loss_agg_mode={mode} contradicts rl_config.token_level_loss={str(token_level).lower()} "
            f"(true means token-mean, false a seq-mean mode); set only one of them"
        )
    return None


def clip_higher_ratios(cfg: GRPOConfig) -> str | None:
    """clip_higher_enable: 0 <= clip_ratio_low < 1, clip_ratio_high >= 0, and low <= high
    (MindSpeed-RL's validate_rl_args refuses low > high)."""
    rl = cfg.rl_config
    if not getattr(rl, "clip_higher_enable", None):
        return None
    low, high = getattr(rl, "clip_ratio_low", None), getattr(rl, "clip_ratio_high", None)
    if not isinstance(low, int | float) or not 0 <= low < 1:
        return f"rl_config.clip_ratio_low: must be >= 0 and < 1 with rl_config.clip_higher_enable=true (got {low})"
    if not isinstance(high, int | float) or high < 0:
        return f"rl_config.clip_ratio_high: must be >= 0 with rl_config.clip_higher_enable=true (got {high})"
    if low > high:
        return (
            f"rl_config.clip_ratio_low={low} must be <= rl_config.clip_ratio_high={high} with "
            f"rl_config.clip_higher_enable=true (MindSpeed-RL's validate_rl_args)"
        )
    return None


def wandb_needs_project(cfg: GRPOConfig) -> str | None:
    """use_wandb needs a wandb_project name (MindSpeed-RL requires it)."""
    rl = cfg.rl_config
    if rl.use_wandb and not rl.wandb_project:
        return "rl_config.use_wandb=true needs rl_config.wandb_project (got '')"
    return None


def wandb_needs_exp_name(cfg: GRPOConfig) -> str | None:
    """use_wandb with a wandb_project needs a wandb_exp_name (MindSpeed-RL's WandbLogger refuses an empty one)."""
    rl = cfg.rl_config
    if rl.use_wandb and rl.wandb_project and not rl.wandb_exp_name:
        return "rl_config.use_wandb=true needs rl_config.wandb_exp_name (got '')"
    return None


SWANLAB_MODES = ("cloud", "local", "offline", "disabled")  # swanlab.init's modes


def swanlab_settings(cfg: GRPOConfig) -> str | None:
    """use_swanlab needs swanlab_project, swanlab_exp_name and a swanlab_mode, and SwanLab installed:
    MindSpeed-RL's SwanLabLogger (mindspeed_rl/utils/loggers.py) logs nothing without a project, raises
    without a name, and swanlab.init refuses an empty mode (MindSpeed-RL only warns: nothing is logged)."""
    rl = cfg.rl_config
    if not getattr(rl, "use_swanlab", False):
        return None
    for key in ("swanlab_project", "swanlab_exp_name"):
        if not getattr(rl, key, ""):
            return f"rl_config.use_swanlab=true needs rl_config.{key} (got '')"
    mode = getattr(rl, "swanlab_mode", "")
    if mode not in SWANLAB_MODES:
        modes = ", ".join(SWANLAB_MODES)
        return f"rl_config.swanlab_mode must be one of {modes} with rl_config.use_swanlab=true (got {mode!r})"
    missing = swanlab_missing(mode)
    return f"rl_config.use_swanlab=true with swanlab_mode={mode}: {missing}" if missing else None


def swanlab_missing(mode: str) -> str | None:
    """What SwanLab in ``mode`` needs that is not installed (also the sweep spec's ``tracking.swanlab``)."""
    import importlib.util

    if mode == "off":
        return None
    if importlib.util.find_spec("swanlab") is None:
        return "needs SwanLab: pip install 'grpo-sweep[swanlab]'"
    if mode == "local" and importlib.util.find_spec("swanboard") is None:
        return "local mode needs SwanLab's dashboard: pip install 'swanlab[dashboard]'"
    return None


def min_lr_not_above_lr(cfg: GRPOConfig) -> str | None:
    """min_lr <= lr: the schedule decays towards min_lr."""
    a = cfg.actor_config
    if a.min_lr > a.lr:
        return f"actor_config.min_lr={a.min_lr} is larger than actor_config.lr={a.lr}"
    return None


def recompute_method_needs_full(cfg: GRPOConfig) -> str | None:
    """recompute_method / recompute_num_layers only apply with recompute_granularity=full."""
    m = cfg.megatron_training
    if m.recompute_method is not None and m.recompute_granularity != "full":
        return (
            f"megatron_training.recompute_method={m.recompute_method} needs "
            f"megatron_training.recompute_granularity=full (got {m.recompute_granularity})"
        )
    if m.recompute_granularity == "full" and (m.recompute_method is None or m.recompute_num_layers is None):
        return (
            "megatron_training.recompute_granularity=full needs megatron_training.recompute_method and "
            f"megatron_training.recompute_num_layers (got {m.recompute_method}, {m.recompute_num_layers})"
        )
    return None


# ---------------------------------------------------------------------------------- lengths
def max_model_len_leaves_room_for_a_response(cfg: GRPOConfig) -> str | None:
    """max_model_len > max_prompt_length: the longest prompt leaves room for a response.

    A response is capped at max_model_len minus its prompt (MindSpeed-RL's actor_hybrid_worker and the
    embedded engine alike), so max_prompt_length + max_tokens may exceed max_model_len, as in MindSpeed-RL's
    DeepSeek-R1 A2 recipe: only the longest prompts then get shorter responses.
    """
    gen, rl = cfg.generate_config, cfg.rl_config
    if gen.max_model_len <= rl.max_prompt_length:
        return (
            f"generate_config.max_model_len={gen.max_model_len} leaves no room for a response after "
            f"rl_config.max_prompt_length={rl.max_prompt_length}"
        )
    return None


def max_model_len_fits_seq_length(cfg: GRPOConfig) -> str | None:
    """max_model_len >= seq_length (MindSpeed-RL's check): training sequences fit the rollout engine."""
    gen, m = cfg.generate_config, cfg.megatron_training
    if gen.max_model_len < m.seq_length:
        return (
            f"generate_config.max_model_len={gen.max_model_len} is smaller than "
            f"megatron_training.seq_length={m.seq_length}"
        )
    return None


def positions_fit_max_model_len(cfg: GRPOConfig) -> str | None:
    """max_position_embeddings >= max_model_len: the model can encode every position it is given."""
    arch = _arch(cfg)
    max_len = cfg.generate_config.max_model_len
    if arch and arch.max_position_embeddings < max_len:
        return (
            f"model.{cfg.actor_config.model}.max_position_embeddings={arch.max_position_embeddings} "
            f"is smaller than generate_config.max_model_len={max_len}"
        )
    return None


def heads_divide_hidden_and_groups(cfg: GRPOConfig) -> str | None:
    """hidden_size % num_attention_heads == 0 (unless kv_channels or MLA size the heads); heads % groups == 0."""
    arch = _arch(cfg)
    if arch is None:
        return None
    name = cfg.actor_config.model
    own_head_size = arch.kv_channels is not None or arch.multi_latent_attention
    if not own_head_size and arch.hidden_size % arch.num_attention_heads:
        return (
            f"model.{name}.hidden_size={arch.hidden_size} is not divisible by "
            f"model.{name}.num_attention_heads={arch.num_attention_heads}"
        )
    if arch.num_attention_heads % arch.effective_query_groups:
        return (
            f"model.{name}.num_attention_heads={arch.num_attention_heads} is not divisible by "
            f"model.{name}.num_query_groups={arch.effective_query_groups}"
        )
    return None


RULES: tuple[Rule, ...] = (
    model_is_loaded,
    integrated_worker_sections,
    npus_divisible_by_train_tp_pp,
    global_batch_divisible_by_train_dp,
    dp_share_divisible_by_micro_batch,
    heads_divisible_by_tp,
    query_groups_divisible_by_tp,
    layers_divisible_by_pp,
    vocab_divisible_by_tp,
    infer_pp_is_one,
    train_and_infer_tp_are_multiples,
    infer_tp_fits_train_devices,
    npus_divisible_by_infer_tp,
    global_batch_divisible_by_generation_dp,
    mini_batch_divides_global_batch,
    mini_batch_divisible_by_dp_micro_batches,
    verifier_lengths_match,
    group_norm_needs_two_samples,
    token_level_loss_agrees_with_loss_agg_mode,
    clip_higher_ratios,
    wandb_needs_project,
    wandb_needs_exp_name,
    swanlab_settings,
    min_lr_not_above_lr,
    recompute_method_needs_full,
    max_model_len_leaves_room_for_a_response,
    max_model_len_fits_seq_length,
    positions_fit_max_model_len,
    heads_divide_hidden_and_groups,
)


def check_rules(cfg: GRPOConfig) -> list[str]:
    """Every cross-field rule ``cfg`` breaks, one message each (empty list = feasible)."""
    return [msg for rule in RULES if (msg := rule(cfg)) is not None]
