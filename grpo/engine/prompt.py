"""The prompt text a model sees: the tokenizer's own ``chat_template`` over the example's messages.

A Hugging Face folder's template (``chat_template.jinja``, or ``chat_template`` in ``tokenizer_config.json``)
is rendered the way ``transformers``' ``apply_chat_template(..., tokenize=False, add_generation_prompt=True)``
renders it: Jinja's sandboxed environment with ``trim_blocks`` and ``lstrip_blocks``, the loop-controls
extension, ``raise_exception``/``strftime_now`` and a ``tojson`` filter, and the tokenizer's special tokens
(``bos_token``, ``eos_token`` ...) as variables. An example's ``messages`` (a conversational record) go in as
read; a plain prompt is one user turn. The engine's built-in tokenizer carries Qwen's ChatML template
(``tokenizer.CHATML_TEMPLATE``: the user turn the generated tasks always had), and saves it with itself, so a
checkpoint's tokenizer prompts the same. A folder without a template (a base model) gets the prompt text as
is; a conversational record needs a template, so that is a one-line error.

    text = build_prompt(tokenizer, example)   # embedded engine and backend trl both
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from grpo.errors import UserError, first_line

if TYPE_CHECKING:
    from jinja2 import Template

    from grpo.engine.datasets import Example
    from grpo.engine.tokenizer import Tokenizer


def build_prompt(tokenizer: Tokenizer, example: Example) -> str:
    """The text to tokenize for ``example``: its messages (or prompt as a user turn) through the template."""
    template = tokenizer.chat_template
    if example.messages is None and (template is None or "<|im_start|>" in example.prompt):
        return example.prompt  # a base model's plain text, or a prompt already templated (MindSpeed-RL data are)
    if template is None:
        raise UserError(
            f"{tokenizer.source}: megatron_training.tokenizer_name_or_path: the dataset's prompts are chat messages "
            f"but the tokenizer has no chat_template (a base model's folder)"
        )
    messages = list(example.messages or [{"role": "user", "content": example.prompt}])
    try:
        return _compiled(template).render(messages=messages, add_generation_prompt=True, **tokenizer.special_tokens)
    except Exception as err:  # a Jinja syntax error, or the template's own raise_exception
        raise UserError(f"{tokenizer.source}: chat_template: {first_line(err)}") from None


def _raise(message: str) -> None:
    from jinja2.exceptions import TemplateError

    raise TemplateError(message)


@lru_cache(maxsize=8)
def _compiled(template: str) -> Template:
    # As transformers' _cached_compile_jinja_template (chat_template_utils.py), without the assistant-mask hook.
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)
