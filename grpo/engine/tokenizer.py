"""Tokenizers: the built-in character-level one for the generated task, and HF ``tokenizer.json`` folders.

Both are a Hugging Face ``tokenizers.Tokenizer`` behind one small wrapper, so a tokenizer built in code
saves as a ``tokenizer.json`` that ``transformers.PreTrainedTokenizerFast`` (and so TRL) opens unchanged.

The built-in tokenizer splits text into single characters (printable ASCII and newline) except for a few
whole tokens: the Qwen chat markers ``<|im_start|>``, ``<|im_end|>``, ``<|endoftext|>`` (special: dropped
when decoding), the answer-format tags ``<think>``, ``</think>``, ``<answer>``, ``</answer>``, ``\\boxed{``
and the role words ``user``/``assistant`` (ordinary tokens: kept when decoding, so the rule rewards see
them). Generation stops at ``<|im_end|>`` or ``<|endoftext|>``; padding is ``<|endoftext|>``, as in Qwen2.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from grpo.errors import UserError, first_line

if TYPE_CHECKING:
    from tokenizers import Tokenizer as HFTokenizer

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
WORD_TOKENS = ("<think>", "</think>", "<answer>", "</answer>", "\\boxed{", "user", "assistant")
# Qwen's ChatML turns, the built-in tokenizer's chat_template (grpo.engine.prompt renders it).
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "pad_token", "unk_token")  # variables a chat_template may use
STOP_TOKEN_NAMES = ("<|im_end|>", "<|endoftext|>", "</s>", "<|eot_id|>")


class Tokenizer:
    """Encode/decode text; knows its stop ids, pad id and vocabulary size."""

    def __init__(
        self,
        backend: HFTokenizer,
        eos_token: str | None = None,
        pad_token: str | None = None,
        source: str = "built-in",
        chat_template: str | None = None,
        special_tokens: dict[str, str] | None = None,
    ):
        self.backend = backend
        self.source = source
        self.chat_template = chat_template  # rendered by grpo.engine.prompt; None: prompts as plain text
        self.special_tokens = dict(special_tokens or {})  # bos_token, eos_token ...: the template's variables
        vocab = backend.get_vocab(with_added_tokens=True)
        self.vocab_size = max(vocab.values()) + 1
        names = [eos_token] if eos_token else []
        names += [n for n in STOP_TOKEN_NAMES if n not in names]
        self.stop_ids = sorted({vocab[n] for n in names if n in vocab})
        if not self.stop_ids:
            raise UserError(f"{source}: tokenizer has no end-of-sequence token (looked for {', '.join(names)})")
        self.eos_id = vocab[eos_token] if eos_token in vocab else self.stop_ids[0]
        pad = pad_token if pad_token in vocab else "<|endoftext|>"
        self.pad_id = vocab.get(pad, self.eos_id)
        self.has_chat_markers = "<|im_start|>" in vocab and "<|im_end|>" in vocab

    # -- text <-> ids
    def encode(self, text: str) -> list[int]:
        return self.backend.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self.backend.decode(ids, skip_special_tokens=True)

    def decode_batch(self, batch: list[list[int]]) -> list[str]:
        return self.backend.decode_batch(batch, skip_special_tokens=True)

    # -- files
    def save(self, folder: Path) -> None:
        """Write tokenizer.json and tokenizer_config.json (what PreTrainedTokenizerFast reads)."""
        folder = Path(folder)
        self.backend.save(str(folder / "tokenizer.json"))
        meta: dict[str, str | int | None] = {
            **self.special_tokens,
            "tokenizer_class": "PreTrainedTokenizerFast",
            "eos_token": self.backend.id_to_token(self.eos_id),
            "pad_token": self.backend.id_to_token(self.pad_id),
            "model_max_length": 32768,
        }
        if self.chat_template is not None:
            meta["chat_template"] = self.chat_template
        (folder / "tokenizer_config.json").write_text(json.dumps(meta, indent=2))

    def fingerprint(self) -> str:
        """A stable hash of the vocabulary and rules (part of the warm-start cache key)."""
        import hashlib

        return hashlib.sha256(self.backend.to_str().encode()).hexdigest()[:16]

    def check_fits(self, padded_vocab_size: int, model_name: str) -> None:
        """Every token id must have an embedding row."""
        if self.vocab_size > padded_vocab_size:
            raise UserError(
                f"{self.source}: model.{model_name}.padded_vocab_size: the tokenizer has {self.vocab_size} tokens "
                f"but the model only {padded_vocab_size} embedding rows (tokenizer and model do not match)"
            )


def build_task_tokenizer() -> Tokenizer:
    """The character-level tokenizer of the generated tasks, built in code (no files, no downloads)."""
    from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as HFTokenizer

    vocab = {"[UNK]": 0}
    for ch in ["\n"] + [chr(i) for i in range(32, 127)]:
        vocab[ch] = len(vocab)
    backend = HFTokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    backend.add_tokens([AddedToken(t, normalized=False) for t in WORD_TOKENS])
    return Tokenizer(backend, eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=CHATML_TEMPLATE)


def load_tokenizer(folder_or_file: str | Path, key: str = "megatron_training.tokenizer_name_or_path") -> Tokenizer:
    """A HF tokenizer from a folder (tokenizer.json [+ tokenizer_config.json]) or a tokenizer.json path."""
    from tokenizers import Tokenizer as HFTokenizer

    path = Path(folder_or_file).expanduser()
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        where = path if path.exists() else f"{path} (no such folder)"
        raise UserError(f"{where}: {key}: no tokenizer.json found")
    try:
        backend = HFTokenizer.from_file(str(file))
    except Exception as err:  # tokenizers raises a bare Exception on malformed files
        raise UserError(f"{file}: {key}: not a valid tokenizer.json ({first_line(err)})") from None
    eos = pad = None
    special: dict[str, str] = {}
    template = None
    for extra in (file.parent / "tokenizer_config.json", file.parent / "generation_config.json"):
        if extra.is_file():
            meta = json.loads(extra.read_text())
            eos = eos or _token_name(meta.get("eos_token"))
            pad = pad or _token_name(meta.get("pad_token"))
            for name in SPECIAL_TOKEN_KEYS:
                if (token := _token_name(meta.get(name))) is not None:
                    special.setdefault(name, token)
            template = template or _template(meta.get("chat_template"))
    jinja = file.parent / "chat_template.jinja"  # transformers >= 4.43 saves the template here; it wins
    if jinja.is_file():
        template = jinja.read_text()
    loaded = Tokenizer(backend, eos, pad, str(file), chat_template=template, special_tokens=special)
    if template is None and loaded.fingerprint() == _builtin_fingerprint():
        loaded.chat_template = CHATML_TEMPLATE  # the built-in tokenizer saved before it carried its template
    return loaded


@lru_cache(maxsize=1)
def _builtin_fingerprint() -> str:
    return build_task_tokenizer().fingerprint()


def _template(value: object) -> str | None:
    """tokenizer_config.json's chat_template: a string, or named templates of which "default" is the one."""
    if isinstance(value, list):
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        value = named.get("default")
    return value if isinstance(value, str) else None


def _token_name(value: object) -> str | None:
    if isinstance(value, dict):  # {"content": "<|im_end|>", ...}
        return value.get("content")
    return value if isinstance(value, str) else None
