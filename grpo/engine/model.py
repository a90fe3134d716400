"""The Qwen2 decoder in one file (nanoGPT-style): RMSNorm, RoPE, grouped-query attention, SwiGLU, KV cache.

The architecture is exactly Hugging Face's ``Qwen2ForCausalLM`` (and so Qwen2.5): pre-norm decoder layers
``x + attn(rmsnorm(x))`` then ``x + mlp(rmsnorm(x))``, rotary position embeddings on the "rotate half"
layout with base ``rotary_base``, ``num_query_groups`` key/value heads shared by the query heads, optional
bias on the q/k/v projections (``add_qkv_bias``), a SwiGLU MLP ``down(silu(gate(x)) * up(x))`` and tied or
untied input/output embeddings. Parameter names mirror the Hugging Face ones (``model.layers.0.self_attn.
q_proj.weight`` ...) so a HF checkpoint loads with a plain ``load_state_dict``.

Batches may be left-padded: ``attention_mask`` (1 = real token) drives both the key padding mask and the
position ids (``cumsum(mask) - 1``), so a padded sequence gets the same logits as the unpadded one.

Dropout (``set_dropout``; Megatron's ``hidden_dropout`` and ``attention_dropout``) is applied where Megatron's
GPT model applies it: ``hidden_dropout`` on the embeddings (``LanguageModelEmbedding``) and on the attention
and MLP outputs before each residual add (``bias_dropout_add``), ``attention_dropout`` on the attention
probabilities. Only in a training pass (``train()`` mode with autograd on): never while sampling (vLLM has
none) nor in the no-grad log-prob passes (MindSpeed-RL's ``forward`` runs them in ``eval()``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

if TYPE_CHECKING:
    from grpo.config import ModelConfig


@dataclass(frozen=True)
class ModelArgs:
    """The architecture fields the engine needs, in MindSpeed/Megatron names (configs/model/*.yaml)."""

    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_query_groups: int
    padded_vocab_size: int
    max_position_embeddings: int = 2048
    rotary_base: float = 1_000_000.0
    norm_epsilon: float = 1e-6
    add_qkv_bias: bool = True
    untie_embeddings_and_output_weights: bool = True

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size must be a multiple of num_attention_heads")
        if self.num_attention_heads % self.num_query_groups:
            raise ValueError("num_attention_heads must be a multiple of num_query_groups")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_model_config(cls, mc: ModelConfig) -> ModelArgs:
        """Build from the config's ModelConfig (``effective_query_groups`` heads share keys and values)."""
        return cls(
            num_layers=mc.num_layers,
            hidden_size=mc.hidden_size,
            ffn_hidden_size=mc.ffn_hidden_size,
            num_attention_heads=mc.num_attention_heads,
            num_query_groups=mc.effective_query_groups,
            padded_vocab_size=mc.padded_vocab_size,
            max_position_embeddings=mc.max_position_embeddings,
            rotary_base=float(mc.rotary_base),
            norm_epsilon=float(mc.norm_epsilon),
            add_qkv_bias=mc.add_qkv_bias,
            untie_embeddings_and_output_weights=mc.untie_embeddings_and_output_weights,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight, computed in float32 as Qwen2 does."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rope_tables(positions: torch.Tensor, head_dim: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin of shape (..., head_dim) for integer positions, "rotate half" layout (angles repeated)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=positions.device) / head_dim))
    angles = positions.float()[..., None] * inv_freq  # (..., head_dim/2)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


class KVCache:
    """Preallocated keys/values for every layer: (B, kv_heads, max_len, head_dim); ``length`` is filled so far."""

    def __init__(self, args: ModelArgs, batch: int, max_len: int, device: torch.device, dtype: torch.dtype):
        shape = (batch, args.num_query_groups, max_len, args.head_dim)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(args.num_layers)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(args.num_layers)]
        self.length = 0

    def repeat_rows(self, n: int) -> KVCache:
        """A cache with each row repeated ``n`` times (one prefill per prompt, shared by its group)."""
        out = KVCache.__new__(KVCache)
        out.keys = [k.repeat_interleave(n, dim=0) for k in self.keys]
        out.values = [v.repeat_interleave(n, dim=0) for v in self.values]
        out.length = self.length
        return out

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        start, end = self.length, self.length + k.shape[2]
        self.keys[layer][:, :, start:end] = k
        self.values[layer][:, :, start:end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]


class KVRecorder:
    """A cache that only records each layer's keys/values (kept in the autograd graph) of one forward."""

    def __init__(self) -> None:
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.length = 0

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys.append(k)
        self.values.append(v)
        return k, v


class PrefixKV:
    """Keys/values of a shared prefix placed before the new tokens by concatenation (autograd-friendly)."""

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor]):
        self.keys, self.values = keys, values
        self.length = keys[0].shape[2]

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.cat([self.keys[layer], k], dim=2), torch.cat([self.values[layer], v], dim=2)


# What a forward pass can read and extend: a preallocated cache, a recorder, or a shared prefix.
Cache = KVCache | KVRecorder | PrefixKV


def _dropping(module: nn.Module, p: float) -> bool:
    """Whether dropout ``p`` applies now: a training pass (train mode, autograd recording)."""
    return p > 0 and module.training and torch.is_grad_enabled()


class Attention(nn.Module):
    dropout = 0.0  # attention_dropout (set_dropout)

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim = args.num_attention_heads, args.num_query_groups, args.head_dim
        self.q_proj = nn.Linear(args.hidden_size, self.n_heads * self.head_dim, bias=args.add_qkv_bias)
        self.k_proj = nn.Linear(args.hidden_size, self.n_kv * self.head_dim, bias=args.add_qkv_bias)
        self.v_proj = nn.Linear(args.hidden_size, self.n_kv * self.head_dim, bias=args.add_qkv_bias)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, args.hidden_size, bias=False)

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, cache: Cache | None, layer: int
    ) -> Tensor:
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_kv, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.update(layer, k, v)
        p = self.dropout if _dropping(self, self.dropout) else 0.0
        if T == 1 and mask is not None:  # one decoding step: grouped attention, the cache not copied per head
            y = _decode_attention(q, k, v, mask, self.n_kv, p)
        else:  # grouped-query attention: each kv head serves n_heads / n_kv query heads
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=p, enable_gqa=self.n_kv != self.n_heads
            )
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim))


def _decode_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, n_kv: int, dropout: float = 0.0) -> Tensor:
    """softmax(q k^T / sqrt(d)) v for a single query per sequence; q (B, H, 1, d), k/v (B, n_kv, L, d)."""
    B, H, _, d = q.shape
    grouped = q.view(B, n_kv, H // n_kv, d)
    scores = torch.einsum("bgrd,bgld->bgrl", grouped, k) * d**-0.5
    scores = scores.masked_fill(~mask.view(B, 1, 1, -1), float("-inf"))
    probs = scores.softmax(-1)
    if dropout:
        probs = F.dropout(probs, dropout)
    return torch.einsum("bgrl,bgld->bgrd", probs, v).reshape(B, H, 1, d)


class MLP(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.gate_proj = nn.Linear(args.hidden_size, args.ffn_hidden_size, bias=False)
        self.up_proj = nn.Linear(args.hidden_size, args.ffn_hidden_size, bias=False)
        self.down_proj = nn.Linear(args.ffn_hidden_size, args.hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    dropout = 0.0  # hidden_dropout (set_dropout)

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.input_layernorm = RMSNorm(args.hidden_size, args.norm_epsilon)
        self.self_attn = Attention(args)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.norm_epsilon)
        self.mlp = MLP(args)

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None, cache: Cache | None, layer: int
    ) -> Tensor:
        if not _dropping(self, self.dropout):
            x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache, layer)
            return x + self.mlp(self.post_attention_layernorm(x))
        x = x + F.dropout(self.self_attn(self.input_layernorm(x), cos, sin, mask, cache, layer), self.dropout)
        return x + F.dropout(self.mlp(self.post_attention_layernorm(x)), self.dropout)


class _Backbone(nn.Module):
    """The ``model.`` prefix of the HF parameter names."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.embed_tokens = nn.Embedding(args.padded_vocab_size, args.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(args) for _ in range(args.num_layers))
        self.norm = RMSNorm(args.hidden_size, args.norm_epsilon)


class Qwen2(nn.Module):
    """A Qwen2 causal LM. ``forward`` returns logits; ``hidden`` returns the final-norm hidden states."""

    dropout = 0.0  # hidden_dropout on the embeddings (set_dropout)

    def __init__(self, args: ModelArgs, init_std: float = 0.02):
        super().__init__()
        self.args = args
        self.model = _Backbone(args)
        self.lm_head = nn.Linear(args.hidden_size, args.padded_vocab_size, bias=False)
        self.apply(lambda m: self._init(m, init_std))
        if not args.untie_embeddings_and_output_weights:
            self.lm_head.weight = self.model.embed_tokens.weight

    @staticmethod
    def _init(module: nn.Module, std: float) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def hidden(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Final hidden states (B, T, hidden).

        Without a cache the T tokens attend causally among themselves. With a cache, they are appended after
        the ``cache.length`` cached ones; ``attention_mask`` then covers all ``cache.length + T`` keys.
        ``positions`` (B, T) default to ``cumsum(attention_mask) - 1`` over the whole key span.
        """
        B, T = input_ids.shape
        past = cache.length if cache is not None else 0
        device = input_ids.device
        if attention_mask is None:
            attention_mask = torch.ones(B, past + T, dtype=torch.long, device=device)
        if positions is None:
            positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, past:]
        cos, sin = self._rope(positions)
        if T == 1:  # a decoding step sees every real cached key
            mask = attention_mask.bool()[:, None, None, :]
        else:  # query i (absolute past+i) sees key j when j <= past+i and key j is not padding
            causal = torch.ones(T, past + T, dtype=torch.bool, device=device).tril(diagonal=past)
            mask = causal[None, None] & attention_mask.bool()[:, None, None, :]
            # A fully padded query row would give NaN in softmax; let it see itself (its output is never used).
            mask = mask | torch.eye(T, past + T, dtype=torch.bool, device=device).roll(past, dims=1)[None, None]
        x = self.model.embed_tokens(input_ids)
        if _dropping(self, self.dropout):
            x = F.dropout(x, self.dropout)
        for i, layer in enumerate(self.model.layers):
            x = layer(x, cos, sin, mask, cache, i)
        if cache is not None:
            cache.length += T
        return self.model.norm(x)

    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin (B, 1, T, head_dim), looked up in a table of every position seen so far (built once)."""
        need = int(positions.max()) + 1
        table = getattr(self, "_rope_table", None)
        if table is None or table[0].shape[0] < need or table[0].device != positions.device:
            size = max(need, self.args.max_position_embeddings)
            table = rope_tables(torch.arange(size, device=positions.device), self.args.head_dim, self.args.rotary_base)
            self._rope_table = table
        return table[0][positions][:, None], table[1][positions][:, None]

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        cache: Cache | None = None,
        positions: Tensor | None = None,
    ) -> Tensor:
        return self.lm_head(self.hidden(input_ids, attention_mask, cache, positions))

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        p = self.lm_head.weight
        return KVCache(self.args, batch, max_len, p.device, p.dtype)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def set_dropout(model: nn.Module, hidden: float, attention: float) -> None:
    """Megatron's ``hidden_dropout``/``attention_dropout`` on every Qwen2 part inside ``model`` (also when
    wrapped, e.g. by peft). Not part of ``ModelArgs``: dropout is training, not architecture (the warm start,
    its cache and the reference policy do not depend on it)."""
    for module in model.modules():
        if isinstance(module, Qwen2 | DecoderLayer):
            module.dropout = hidden
        elif isinstance(module, Attention):
            module.dropout = attention
