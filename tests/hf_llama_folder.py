"""An offline Hugging Face Llama folder: a causal LM the embedded engine cannot build (not Qwen2), for backend trl.

``make_llama_folder(dest)`` writes what ``transformers.AutoModelForCausalLM.from_pretrained`` opens as a
``LlamaForCausalLM`` (random init, ``save_pretrained``) with tests/hf_folder.py's byte-level BPE tokenizer and
its ChatML chat template. No download; a few hundred KB, built in about a second. Unlike the Qwen2 fixture: no
q/k/v bias, untied embeddings, another rope base.
"""

from __future__ import annotations

from pathlib import Path

from hf_folder import QWEN_CHAT_TEMPLATE, _train_tokenizer


def make_llama_folder(dest: Path, *, vocab_size: int = 384, seed: int = 0) -> Path:
    """Write a randomly initialised Llama model and its tokenizer into ``dest`` (created); returns ``dest``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    tokenizer = _train_tokenizer()
    tokenizer.chat_template = QWEN_CHAT_TEMPLATE
    tokenizer.save_pretrained(str(dest))
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        rope_theta=50000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(str(dest), safe_serialization=True)
    return dest
