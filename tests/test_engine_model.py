"""The Qwen2 decoder against transformers, the KV cache, sampling log-probs, tokenizers, HF folders."""

import json

import pytest
import torch

from grpo.engine import hf_checkpoint as hf
from grpo.engine.data import Example
from grpo.engine.model import ModelArgs, Qwen2
from grpo.engine.prompt import build_prompt
from grpo.engine.rollout import SamplingParams, generate, response_logprobs
from grpo.engine.tokenizer import build_task_tokenizer, load_tokenizer
from grpo.errors import UserError

transformers = pytest.importorskip("transformers")


def _hf_model(tmp_path, tie: bool, kv_heads: int = 2):
    config = transformers.Qwen2Config(
        vocab_size=101, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=kv_heads, max_position_embeddings=128, rope_theta=10000.0, tie_word_embeddings=tie,
        rms_norm_eps=1e-6)
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(config).eval()
    with torch.no_grad():  # random non-trivial norms and biases, so a wrong mapping cannot hide
        for name, p in model.named_parameters():
            if "norm" in name or "bias" in name:
                p.normal_(1.0 if "norm" in name else 0.0, 0.2)
    model.save_pretrained(tmp_path)
    return model


@pytest.mark.parametrize("tie, kv_heads", [(False, 2), (True, 4), (False, 1)])
def test_hf_qwen2_folder_loads_with_equal_logits(tmp_path, tie, kv_heads):
    reference = _hf_model(tmp_path, tie, kv_heads)
    args = hf.read_model_args(tmp_path)
    assert args.num_query_groups == kv_heads and args.untie_embeddings_and_output_weights == (not tie)
    assert args.add_qkv_bias and args.rotary_base == 10000.0
    model = Qwen2(args)
    hf.load_weights(model, tmp_path)
    ids = torch.randint(0, 101, (3, 17))
    with torch.no_grad():
        expected = reference(ids).logits
        got = model(ids)
    assert torch.allclose(got, expected, atol=1e-4)


def test_left_padding_and_kv_cache_give_the_same_logits():
    torch.manual_seed(0)
    model = Qwen2(ModelArgs(2, 32, 64, 4, 2, 50, 64, 10000.0, 1e-6, True, True), init_std=0.2).eval()
    ids = torch.randint(0, 50, (2, 12))
    mask = torch.ones_like(ids)
    mask[0, :5] = 0  # row 0 is a 7-token sequence, left-padded
    with torch.no_grad():
        alone = model(ids[:1, 5:])
        padded = model(ids, mask)
        assert torch.allclose(padded[0, 5:], alone[0], atol=1e-5)
        cache = model.new_cache(2, 12)
        steps = [model(ids[:, :6], mask[:, :6], cache)]
        for t in range(6, 12):
            steps.append(model(ids[:, t:t + 1], mask[:, :t + 1], cache))
    assert torch.allclose(torch.cat(steps, 1)[:, 4:], padded[:, 4:], atol=1e-5)


def test_sampled_logprobs_equal_the_training_forward_and_eos_ends_a_response():
    tok = build_task_tokenizer()
    torch.manual_seed(0)
    model = Qwen2(ModelArgs(2, 32, 64, 4, 2, 128, 64, 10000.0, 1e-6, True, True), init_std=0.05).eval()
    prompts = [tok.encode(build_prompt(tok, Example(q, ""))) for q in ("12+34=?", "7+80=?")]
    with torch.no_grad():  # make <|im_end|> likely so some responses stop early
        model.lm_head.weight[tok.eos_id] += 0.3 * model.model.norm.weight.sign()
    gen = torch.Generator().manual_seed(1)
    batch = generate(model, prompts, 4, SamplingParams(max_tokens=10, top_p=0.95, top_k=40), tok.stop_ids,
                     tok.pad_id, tok.vocab_size, gen)
    assert batch.input_ids.shape[0] == 8
    recomputed, _ = response_logprobs(model, batch, 1.0, tok.vocab_size)
    assert torch.allclose(recomputed * batch.response_mask, batch.logprobs, atol=1e-4)
    for row, length in zip(batch.responses, batch.response_lengths):
        tokens = row[: int(length)].tolist()
        stops = [i for i, t in enumerate(tokens) if t in tok.stop_ids]
        assert stops in ([], [len(tokens) - 1])  # a stop token can only be the last one
        if not stops:  # never stopped: ran to max_tokens
            assert len(tokens) == batch.responses.shape[1] == 10
    # the same generator state gives the same samples
    gen2 = torch.Generator().manual_seed(1)
    again = generate(model, prompts, 4, SamplingParams(max_tokens=10, top_p=0.95, top_k=40), tok.stop_ids,
                     tok.pad_id, tok.vocab_size, gen2)
    assert torch.equal(again.input_ids, batch.input_ids)


def test_task_tokenizer_round_trip_and_hf_file(tmp_path):
    tok = build_task_tokenizer()
    text = "<|im_start|>user\n47+38=?<|im_end|>\n<|im_start|>assistant\n<think>7+8=15</think><answer>\\boxed{85}</answer>"
    ids = tok.encode(text)
    assert tok.backend.id_to_token(ids[0]) == "<|im_start|>"
    assert "<think>" in [tok.backend.id_to_token(i) for i in ids]
    # special chat markers are dropped, the answer tags kept
    assert tok.decode(ids) == "user\n47+38=?\nassistant\n<think>7+8=15</think><answer>\\boxed{85}</answer>"
    tok.save(tmp_path)
    again = load_tokenizer(tmp_path)
    assert again.encode(text) == ids and again.eos_id == tok.eos_id and again.pad_id == tok.pad_id
    fast = transformers.PreTrainedTokenizerFast.from_pretrained(str(tmp_path))
    assert fast.encode(text, add_special_tokens=False) == ids


def test_tokenizer_larger_than_the_model_vocab_is_a_user_error():
    with pytest.raises(UserError, match=r"padded_vocab_size: the tokenizer has \d+ tokens but the model only 64"):
        build_task_tokenizer().check_fits(64, "tiny_qwen")


def test_bad_tokenizer_and_checkpoint_folders_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="no tokenizer.json found"):
        load_tokenizer(tmp_path / "missing")
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(UserError, match="not a valid tokenizer.json"):
        load_tokenizer(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(UserError, match="lacks intermediate_size"):
        hf.read_model_args(tmp_path)


def test_checkpoint_that_does_not_match_the_model_yaml(tmp_path):
    _hf_model(tmp_path, tie=False)
    found = hf.read_model_args(tmp_path)
    expected = ModelArgs(2, 64, 176, 4, 2, 128)
    with pytest.raises(UserError, match="ffn_hidden_size=96 but model tiny_qwen has ffn_hidden_size=176"):
        hf.check_arch(found, expected, str(tmp_path), "tiny_qwen")


def test_shared_prompt_forward_equals_the_full_forward_in_values_and_gradients():
    """The update computes each group's prompt once; it must be the same math as [prompt | response]."""
    import dataclasses

    tok = build_task_tokenizer()
    torch.manual_seed(0)
    model = Qwen2(ModelArgs(2, 32, 64, 4, 2, 128, 64, 10000.0, 1e-6, True, True), init_std=0.1)
    prompts = [tok.encode(build_prompt(tok, Example(q, ""))) for q in ("12+34=?", "7+80=?", "99+9=?")]
    batch = generate(model, prompts, 3, SamplingParams(max_tokens=8), tok.stop_ids, tok.pad_id, tok.vocab_size,
                     torch.Generator().manual_seed(3))
    batch = batch.select(torch.tensor([8, 0, 4, 3, 1])).trimmed()  # rows of mixed groups, shuffled
    grads = []
    for b in (batch, dataclasses.replace(batch, groups=None)):  # shared prompts, then one full forward
        model.zero_grad()
        logp, entropy = response_logprobs(model, b, 0.7, tok.vocab_size, with_entropy=True, entropy_grad=True)
        (logp * b.response_mask).sum().add((entropy * b.response_mask).sum()).backward()
        grads.append((logp.detach(), [p.grad.clone() for p in model.parameters()]))
    (shared, g_shared), (full, g_full) = grads
    assert torch.allclose(shared * batch.response_mask, full * batch.response_mask, atol=1e-5)
    for a, b in zip(g_shared, g_full):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)
