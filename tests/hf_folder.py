"""An offline Hugging Face Qwen2 folder, built the way a user's own checkpoint folder is laid out.

``make_qwen2_folder(dest)`` writes what ``transformers.AutoModelForCausalLM.from_pretrained`` and
``AutoTokenizer.from_pretrained`` open: ``config.json`` + ``model.safetensors`` (a randomly initialised
``Qwen2ForCausalLM``, saved by ``save_pretrained``) and ``tokenizer.json`` + ``tokenizer_config.json`` (a
byte-level BPE trained here with ``tokenizers`` on a small generated corpus, saved by
``PreTrainedTokenizerFast.save_pretrained`` with a chat template). No download, no shipped weights: a few
hundred KB, built in about a second. Not the project's tiny model: a different vocabulary (byte-level BPE,
not characters), tied embeddings, and sizes that match no ``configs/model/*.yaml``.
"""

from __future__ import annotations

import random
from pathlib import Path

# Qwen2.5's own template shape (ChatML turns), without its default system prompt.
QWEN_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
QWEN2_SPLIT = (  # transformers' qwen2/tokenization_qwen2.py PRETOKENIZE_REGEX
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"""
    r"""|\s+(?!\S)|\s+"""
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TOKENIZER_VOCAB = 320  # at most: 256 bytes + 3 special tokens + the merges the corpus has (about 310 tokens)


def _corpus(n: int = 1500, seed: int = 0) -> list[str]:
    """Arithmetic questions and worked answers: the text the BPE merges are learnt from."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        op, value = rng.choice([("+", a + b), ("-", a - b), ("*", a * b)])
        lines.append(f"What is {a} {op} {b}? <think>{a} {op} {b} = {value}</think> <answer>\\boxed{{{value}}}</answer>")
        lines.append(f"Raj has {a} coins and finds {b} more. How many coins?\n#### {a + b}")
    return lines


def _train_tokenizer():  # -> transformers.PreTrainedTokenizerFast
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    # Qwen2's pipeline (transformers' Qwen2Tokenizer sets the same one for a qwen2 folder, so the tokenizer.json
    # and AutoTokenizer agree): NFC, its split regex (digits one by one), then bytes.
    backend = Tokenizer(models.BPE())
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(_corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>", model_max_length=32768
    )


def make_qwen2_folder(
    dest: Path,
    *,
    vocab_size: int = 384,
    hidden_size: int = 32,
    layers: int = 2,
    max_positions: int = 512,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate_size: int = 64,
    tie_word_embeddings: bool = True,
    chat_template: bool | str = True,
    seed: int = 0,
) -> Path:
    """Write a randomly initialised Qwen2 model and its tokenizer into ``dest`` (created); returns ``dest``.

    ``vocab_size`` is the model's embedding rows (the tokenizer has ``TOKENIZER_VOCAB`` tokens: a smaller
    ``vocab_size`` makes the mismatched folder a user error must catch). ``chat_template``: True = Qwen's
    ChatML turns, a string = that Jinja template, False = none (a base model's tokenizer).
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a fixture: no "Writing model shards" bars in the tests' output
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    tokenizer = _train_tokenizer()
    if chat_template:
        tokenizer.chat_template = QWEN_CHAT_TEMPLATE if chat_template is True else chat_template
    tokenizer.save_pretrained(str(dest))
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=tie_word_embeddings,
        use_sliding_window=False,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(str(dest), safe_serialization=True)
    return dest
