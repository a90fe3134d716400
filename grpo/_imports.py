"""Importing a user's object named by a reference: ``path/to/file.py:name`` or ``package.module:name``.

``import_object(ref, where=..., base_dir=...)`` is the one loader behind every place a user names their own code
(reward functions today). A file is loaded by path, as verl's ``get_custom_reward_fn`` loads
``custom_reward_function.path`` (``importlib.util.spec_from_file_location``), relative to ``base_dir`` (the spec's
folder, else the working directory); a dotted module is imported from ``sys.path``. Whatever goes wrong (no such
file, a syntax error, an exception at import, no such name) is one ``UserError`` line starting with ``where``.

    fn = import_object("rewards/my_reward.py:compute_score", where="sweeps/s.yaml: rl_config.verifier_function[1]")
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

from grpo.errors import UserError, first_line


def split_ref(ref: str) -> tuple[str, str]:
    """``("path/to/file.py", "fn")`` or ``("pkg.mod", "fn")``; ValueError when ``ref`` has no ``:name``."""
    module, sep, name = ref.rpartition(":")
    if not sep or not module or not name.isidentifier():
        raise ValueError(f"{ref!r} is not file.py:function or package.module:function")
    return module, name


def is_file_ref(module: str) -> bool:
    return module.endswith(".py") or "/" in module or "\\" in module


def ref_path(ref: str, base_dir: Path | None = None) -> Path | None:
    """The file a reference names (absolute), or None for a ``package.module`` reference."""
    module, _ = split_ref(ref)
    if not is_file_ref(module):
        return None
    path = Path(module).expanduser()
    return (path if path.is_absolute() else (base_dir or Path.cwd()) / path).resolve()


def source_file(ref: str, base_dir: Path | None = None) -> Path | None:
    """The source file behind a reference, found without importing it (None when it cannot be found)."""
    path = ref_path(ref, base_dir)
    if path is not None:
        return path if path.is_file() else None
    try:
        spec = importlib.util.find_spec(split_ref(ref)[0])
    except (ImportError, ValueError):
        return None
    origin = spec.origin if spec is not None else None
    return Path(origin) if origin and Path(origin).is_file() else None


def _load_file(path: Path, where: str) -> ModuleType:
    # One module per file (by its path's hash): loading twice returns the same module, two files never collide.
    name = f"_grpo_user_{path.stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"{where}: {path}: cannot be loaded as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before exec: dataclasses and pickling look the module up by name
    try:
        spec.loader.exec_module(module)
    except BaseException as err:
        del sys.modules[name]
        if isinstance(err, KeyboardInterrupt):
            raise
        raise UserError(f"{where}: {path}: importing it failed: {_located(err, path)}") from None
    return module


def _located(err: BaseException, path: Path) -> str:
    """``<Type>: <message> (line N)`` with the last line of ``path`` the traceback passed through."""
    if isinstance(err, SyntaxError) and err.lineno:
        return f"SyntaxError: {err.msg} (line {err.lineno})"
    lines = [f.lineno for f in traceback.extract_tb(err.__traceback__) if Path(f.filename) == path]
    return first_line(err, 300, typed=True) + (f" (line {lines[-1]})" if lines else "")


def import_object(ref: str, *, where: str, base_dir: Path | None = None) -> Any:
    """The object ``ref`` names; one-line UserError starting with ``where`` when it cannot be had."""
    try:
        module_name, name = split_ref(ref)
    except ValueError as err:
        raise UserError(f"{where}: {err}") from None
    path = ref_path(ref, base_dir)
    if path is not None:
        if not path.is_file():
            raise UserError(f"{where}: {path}: no such file")
        module = _load_file(path, where)
        shown = str(path)
    else:
        try:
            module = importlib.import_module(module_name)
        except BaseException as err:
            if isinstance(err, KeyboardInterrupt):
                raise
            raise UserError(
                f"{where}: {module_name}: importing it failed: {first_line(err, 300, typed=True)}"
            ) from None
        shown = module_name
    try:
        return getattr(module, name)
    except AttributeError:
        raise UserError(f"{where}: {shown} has no {name!r}") from None
