"""Batched sampling with a KV cache: ``n`` responses per prompt, vLLM's sampling parameters, log-probs.

Prompts are left-padded into one batch and prefilled once; the cache is then copied ``n`` times so each
prompt's group shares its prefill. Each step feeds one token per sequence. Sampling follows vLLM's order:
logits / temperature, then top_k, top_p (nucleus) and min_p filters, then one categorical draw per
sequence from a ``torch.Generator`` (whose state the trainer checkpoints). A sequence finishes at its first stop token
(kept in the response, as vLLM does) or after ``max_tokens``; the loop ends when every sequence is done.

The returned log-probs are those of the sampled tokens under softmax(logits / temperature) over the real
vocabulary, before any filter: the same quantity the trainer computes for the policy ratio.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grpo.engine.loss import TrainingDiverged, entropy_from_logits
from grpo.engine.model import KVRecorder, PrefixKV, Qwen2


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    max_tokens: int = 64
    greedy: bool = False  # argmax decoding (evaluation)


@dataclass
class Rollout:
    """One batch of prompts and responses, laid out ``[left-padded prompt | right-padded response]``."""

    input_ids: torch.Tensor  # (N, P + R)
    attention_mask: torch.Tensor  # (N, P + R), 0 on the prompt's left padding
    prompt_width: int  # P
    response_mask: torch.Tensor  # (N, R) float, 1 on response tokens up to and including the stop token
    logprobs: torch.Tensor  # (N, R) sampled-token log-probs (0 after the end)
    prompt_lengths: torch.Tensor  # (N,)
    response_lengths: torch.Tensor  # (N,)
    groups: torch.Tensor | None = None  # (N,) index of each row's prompt (rows of a group share it)

    @property
    def responses(self) -> torch.Tensor:
        return self.input_ids[:, self.prompt_width :]

    def response_lists(self) -> list[list[int]]:
        return [row[: int(n)].tolist() for row, n in zip(self.responses, self.response_lengths, strict=True)]

    def select(self, index: torch.Tensor) -> Rollout:
        """The rows ``index`` (used to split into mini and micro batches)."""
        return Rollout(
            self.input_ids[index],
            self.attention_mask[index],
            self.prompt_width,
            self.response_mask[index],
            self.logprobs[index],
            self.prompt_lengths[index],
            self.response_lengths[index],
            None if self.groups is None else self.groups[index],
        )

    def trimmed(self) -> Rollout:
        """The same rows without the padding columns they all share (left of the prompts, right of the
        responses). Response-side tensors become (N, R') with R' the longest response here."""
        drop = self.prompt_width - int(self.prompt_lengths.max())
        keep = int(self.response_lengths.max())
        end = self.prompt_width + keep
        return Rollout(
            self.input_ids[:, drop:end],
            self.attention_mask[:, drop:end],
            self.prompt_width - drop,
            self.response_mask[:, :keep],
            self.logprobs[:, :keep],
            self.prompt_lengths,
            self.response_lengths,
            self.groups,
        )


def left_pad(prompts: list[list[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p) :] = 1
    return ids.to(device), mask.to(device)


def filter_logits(logits: torch.Tensor, top_k: int = -1, top_p: float = 1.0, min_p: float = 0.0) -> torch.Tensor:
    """Set the logits of tokens outside top_k / the top_p nucleus / below min_p * p_max to -inf."""
    neg_inf = torch.finfo(logits.dtype).min
    if 0 < top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, neg_inf)
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        # drop a token when the tokens ranked before it already cover top_p (the first one always stays)
        drop_sorted = (probs.cumsum(-1) - probs) > top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, neg_inf)
    if min_p > 0.0:
        probs = logits.softmax(-1)
        logits = logits.masked_fill(probs < min_p * probs.max(-1, keepdim=True).values, neg_inf)
    return logits


def sample_categorical(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One draw per row by inverting the CDF with a single uniform number per row.

    Token i is chosen when u * total falls in [cdf[i-1], cdf[i]), an interval of width p_i, so a token of
    probability 0 (filtered out) can never be drawn. One random number per row instead of one per token
    (``torch.multinomial``) makes this several times faster for a batch of small vocabularies.
    """
    cdf = probs.cumsum(-1)
    u = torch.rand((probs.shape[0], 1), generator=generator, device=probs.device) * cdf[:, -1:]
    return (cdf <= u).sum(-1).clamp(max=probs.shape[-1] - 1)


def generate(
    model: Qwen2,
    prompts: list[list[int]],
    n: int,
    params: SamplingParams,
    stop_ids: list[int],
    pad_id: int,
    vocab_size: int,
    generator: torch.Generator | None = None,
) -> Rollout:
    """Sample ``n`` responses for each prompt; rows i*n .. i*n+n-1 belong to prompt i.

    Sampling runs under ``torch.inference_mode``; the returned tensors are ordinary copies, so the trainer
    can feed them to a forward pass that autograd records.
    """
    with torch.inference_mode():
        out = _sample(model, prompts, n, params, stop_ids, pad_id, vocab_size, generator)
    return Rollout(
        input_ids=out.input_ids.clone(),
        attention_mask=out.attention_mask.clone(),
        prompt_width=out.prompt_width,
        response_mask=out.response_mask.clone(),
        logprobs=out.logprobs.clone(),
        prompt_lengths=out.prompt_lengths.clone(),
        response_lengths=out.response_lengths.clone(),
        groups=None if out.groups is None else out.groups.clone(),
    )


def _sample(
    model: Qwen2,
    prompts: list[list[int]],
    n: int,
    params: SamplingParams,
    stop_ids: list[int],
    pad_id: int,
    vocab_size: int,
    generator: torch.Generator | None,
) -> Rollout:
    device = model.lm_head.weight.device
    ids, mask = left_pad(prompts, pad_id, device)
    B, P = ids.shape
    N, R = B * n, params.max_tokens
    prefill = model.new_cache(B, P + R)
    last = model(ids, mask, prefill)[:, -1]
    cache = prefill.repeat_rows(n)
    del prefill
    logits = last.repeat_interleave(n, dim=0)
    full_mask = torch.ones((N, P + R), dtype=torch.long, device=device)
    full_mask[:, :P] = mask.repeat_interleave(n, dim=0)
    prompt_lengths = full_mask[:, :P].sum(-1)
    stops = torch.tensor(stop_ids, device=device)

    tokens = torch.full((N, R), pad_id, dtype=torch.long, device=device)
    logprobs = torch.zeros((N, R), device=device)
    finished = torch.zeros(N, dtype=torch.bool, device=device)
    lengths = torch.full((N,), R, dtype=torch.long, device=device)
    steps = 0
    for t in range(R):
        scaled = logits[:, :vocab_size].float() / params.temperature
        if t == 0 and not bool(torch.isfinite(scaled).all()):
            raise TrainingDiverged("the policy's logits are not finite (NaN or inf weights)")
        logp = torch.log_softmax(scaled, dim=-1)
        if params.greedy:
            token = scaled.argmax(-1)
        else:
            filtered = params.top_k > 0 or params.top_p < 1.0 or params.min_p > 0.0
            probs = (
                filter_logits(scaled, params.top_k, params.top_p, params.min_p).softmax(-1) if filtered else logp.exp()
            )
            token = sample_categorical(probs, generator)
        token = token.masked_fill(finished, pad_id)
        tokens[:, t] = token
        logprobs[:, t] = logp.gather(-1, token[:, None]).squeeze(-1).masked_fill(finished, 0.0)
        ended = ~finished & torch.isin(token, stops)
        lengths = torch.where(ended, t + 1, lengths)
        finished |= ended
        steps = t + 1
        if bool(finished.all()) or t == R - 1:
            break
        positions = (prompt_lengths + t)[:, None]
        logits = model(token[:, None], full_mask[:, : P + t + 1], cache, positions)[:, -1]

    tokens, logprobs = tokens[:, :steps], logprobs[:, :steps]
    response_mask = (torch.arange(steps, device=device)[None] < lengths[:, None]).float()
    return Rollout(
        input_ids=torch.cat([ids.repeat_interleave(n, dim=0), tokens], dim=1),
        attention_mask=full_mask[:, : P + steps],
        prompt_width=P,
        response_mask=response_mask,
        logprobs=logprobs,
        prompt_lengths=prompt_lengths,
        response_lengths=lengths,
        groups=torch.arange(B, device=device).repeat_interleave(n),
    )


def response_logprobs(
    model: Qwen2,
    batch: Rollout,
    temperature: float,
    vocab_size: int,
    with_entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (N, R) of the response tokens under softmax(logits / temperature), and optionally entropy.

    Only the hidden states that predict response tokens go through the output layer. The entropy is
    recorded by autograd only when ``entropy_grad`` (an entropy bonus is on); otherwise it is a metric.
    """
    P = batch.prompt_width
    R = batch.input_ids.shape[1] - P
    if batch.groups is None:
        hidden = model.hidden(batch.input_ids[:, :-1], batch.attention_mask[:, :-1])[:, P - 1 : P - 1 + R]
    else:
        hidden = _shared_prompt_hidden(model, batch, P, R)
    logits = model.lm_head(hidden)[..., :vocab_size].float() / temperature
    targets = batch.input_ids[:, P:]
    logp = torch.log_softmax(logits, dim=-1).gather(-1, targets[..., None]).squeeze(-1)
    entropy = None
    if with_entropy:
        entropy = entropy_from_logits(logits if entropy_grad else logits.detach())
    return logp, entropy


def _shared_prompt_hidden(model: Qwen2, batch: Rollout, P: int, R: int) -> torch.Tensor:
    """The hidden states that predict the response tokens, computing each distinct prompt only once.

    The n responses of a group share their prompt, so its forward (and backward) pass runs once per
    group: its keys/values are recorded, gathered per row and placed before the response tokens, exactly
    as a KV cache would be. The prompt's last hidden state predicts the first response token. This is
    the same computation as one forward over ``[prompt | response]`` (tested), with far fewer tokens.
    """
    _, inverse = torch.unique(batch.groups, return_inverse=True)
    first = torch.zeros(int(inverse.max()) + 1, dtype=torch.long, device=inverse.device)
    first.scatter_(0, inverse, torch.arange(len(inverse), device=inverse.device))  # one row of each group
    recorder = KVRecorder()
    prompt_hidden = model.hidden(batch.input_ids[first, :P], batch.attention_mask[first, :P], cache=recorder)
    last = prompt_hidden[:, -1:][inverse]
    if R == 1:
        return last
    prefix = PrefixKV([k[inverse] for k in recorder.keys], [v[inverse] for v in recorder.values])
    response_hidden = model.hidden(batch.input_ids[:, P:-1], batch.attention_mask[:, :-1], cache=prefix)
    return torch.cat([last, response_hidden], dim=1)
