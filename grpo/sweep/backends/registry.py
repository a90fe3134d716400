"""Looking a backend up by its spec name, or by an import path for a user's own backend."""

from __future__ import annotations

import importlib

from grpo.sweep.backends._base import TrialBackend

BUILTIN = ("embedded", "mindspeed")


def load_backend(name: str) -> TrialBackend:
    """``embedded``, ``mindspeed``, or ``package.module:ClassName`` naming a TrialBackend subclass."""
    if name in BUILTIN:
        from grpo.sweep.backends import get_backend

        return get_backend(name)
    module_name, _, class_name = name.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    if not (isinstance(cls, type) and issubclass(cls, TrialBackend)):
        raise TypeError(f"{name} is not a TrialBackend subclass")
    return cls()
