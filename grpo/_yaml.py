"""The one way grpo-sweep reads a YAML file a user can hand it: spec, base config, Hydra's config files,
a trial's recorded config, MindSpeed-RL's runtime env.

``read_yaml(path, source, kind)`` = ``read_text_file`` (a regular file, at most ``MAX_FILE_BYTES``, UTF-8)
then ``parse_yaml_text`` (PyYAML's safe loader refusing a key written twice, nesting bounded before PyYAML
recurses, and YAML aliases counted, never expanded: a "billion laughs" bomb is refused in linear time).
Every problem is one ``UserError`` line naming ``source``. Files Hydra composes are read by Hydra itself
(OmegaConf's loader expands aliases); ``grpo.config.compose`` runs each through ``read_yaml`` first.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from grpo.errors import UserError, first_line

MAX_YAML_VALUES = 100_000  # a spec or config is a few hundred values; YAML aliases must not expand past this
MAX_FILE_BYTES = 1_000_000  # a spec or a config is a few KB; parsing megabytes of YAML takes seconds
DEEP_FLOW = re.compile(r"(?:[\[{]\s*){100}")  # 100 collections opened in a row: refused before PyYAML recurses


def too_deep(kind: str) -> str:
    return f"YAML nested too deeply (hundreds of levels); a {kind} is a few levels deep"


class GuardedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key written twice in one mapping (YAML requires unique keys;
    PyYAML would silently keep the last one)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, (str, int, float, bool)):
                continue  # an unhashable key: PyYAML's own construct_mapping refuses it
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is written twice in one mapping", key_node.start_mark
                )
            seen.add(key)
        return yaml.constructor.SafeConstructor.construct_mapping(self, node, deep=deep)  # both loaders' base


class FastGuardedLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """``GuardedLoader`` on libyaml's parser when PyYAML has it (10x faster: a report reads hundreds of
    trial configs); its syntax errors are worded as libyaml words them."""

    construct_mapping = GuardedLoader.construct_mapping


MAX_DEPTH = 100  # a spec or config is a few levels deep


def nesting_depth(data: Any) -> int:
    """How deeply ``data`` nests, counted without recursion: whether PyYAML hit the recursion limit while
    loading depends on the interpreter's limit (libraries raise it), so the bound is checked here too."""
    deepest, stack, seen = 0, [(data, 1)], set()
    while stack:
        value, depth = stack.pop()
        if not isinstance(value, (dict, list)) or id(value) in seen:
            continue  # a shared (aliased) object is walked once
        seen.add(id(value))
        deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            break
        children = [*value.keys(), *value.values()] if isinstance(value, dict) else value
        stack.extend((child, depth + 1) for child in children)
    return deepest


def expanded_size(data: Any) -> int:
    """How many values ``data`` holds once YAML aliases are expanded (each shared object counted once per
    use, computed once per object: an alias bomb is counted in linear time, never expanded)."""
    sizes: dict[int, int] = {}

    def size(value: Any) -> int:
        if not isinstance(value, (dict, list)):
            return 1
        known = sizes.get(id(value))
        if known is None:
            sizes[id(value)] = 1  # a self-referencing alias counts once, not forever
            children = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            known = sizes[id(value)] = 1 + sum(size(child) for child in children)
        return known

    return size(data)


def encoding_of(raw: bytes) -> str:
    """How text that is no UTF-8 is encoded, as far as a user needs to know to fix it."""
    if raw[:4] in (b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff"):
        return "UTF-32"
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "UTF-16"
    head = raw[:200]
    if len(head) >= 4 and (head[0::2].count(0) > len(head) // 4 or head[1::2].count(0) > len(head) // 4):
        return "UTF-16"  # ASCII text saved as UTF-16 without a byte-order mark: every other byte is 0
    return "not UTF-8"


def decode_text(raw: bytes, source: str, kind: str = "spec") -> str:
    """``raw`` as UTF-8 text; a one-line UserError saying how it is encoded otherwise."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{source}: the {kind} file is {encoding_of(raw)} text; save it as UTF-8") from None
    if "\x00" in text and encoding_of(raw) != "not UTF-8":  # ASCII saved as UTF-16 without a BOM is valid UTF-8
        raise UserError(f"{source}: the {kind} file is {encoding_of(raw)} text; save it as UTF-8")
    return text


def read_text_file(path: Path, source: str, kind: str = "spec") -> str:
    """The UTF-8 text of a spec (or config) file; a one-line UserError naming ``source`` when it is not
    a readable regular file of sensible size in UTF-8."""
    try:
        if path.is_dir():
            raise UserError(f"{source}: is a folder, not a {kind} file")
        if not path.exists():
            raise UserError(f"{source}: no such {kind} file")
        if not path.is_file():  # a FIFO, a device: reading could block
            raise UserError(f"{source}: not a regular file; the {kind} must be a YAML file")
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise UserError(
                f"{source}: the {kind} file is {size / 1e6:.1f} MB; a {kind} is a few KB "
                f"(at most {MAX_FILE_BYTES / 1e6:g} MB)"
            )
        raw = path.read_bytes()
    except OSError as err:
        raise UserError(f"{source}: cannot read the {kind} file ({err.strerror or err})") from None
    return decode_text(raw, source, kind)


def parse_yaml_text(text: str, source: str, kind: str = "spec", fast: bool = False) -> Any:
    """YAML as every loader of the project reads it: duplicate keys refused, aliases counted (a bomb is
    refused, not expanded), nesting bounded; every problem a one-line UserError naming ``source``.
    ``fast``: libyaml's parser (files grpo-sweep wrote itself, read by the hundred)."""
    if DEEP_FLOW.search(text):
        raise UserError(f"{source}: {too_deep(kind)}")
    try:
        data = yaml.load(text, Loader=FastGuardedLoader if fast else GuardedLoader)  # SafeLoader subclasses
    except RecursionError:
        raise UserError(f"{source}: {too_deep(kind)}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(err, "problem", None) or first_line(err)
        raise UserError(f"{where}: YAML syntax error: {problem}") from None
    if nesting_depth(data) > MAX_DEPTH:
        raise UserError(f"{source}: {too_deep(kind)}")
    try:
        size = expanded_size(data)
    except RecursionError:
        raise UserError(f"{source}: {too_deep(kind)}") from None
    if size > MAX_YAML_VALUES:
        raise UserError(f"{source}: YAML aliases expand to more than {MAX_YAML_VALUES:,} values; write them out")
    return data


def read_yaml(path: str | Path, source: str | None = None, kind: str = "spec", fast: bool = False) -> Any:
    """Read and parse one YAML file through the guard (see the module docstring)."""
    path = Path(path)
    source = str(path) if source is None else source
    return parse_yaml_text(read_text_file(path, source, kind), source, kind, fast=fast)


def peek_yaml(text: str) -> Any:
    """Parse ``text`` without the size check, for a quick look at its top level (aliases are shared, not
    expanded, so a bomb costs nothing); raises ``yaml.YAMLError`` or ``RecursionError``."""
    if DEEP_FLOW.search(text):
        raise RecursionError
    return yaml.load(text, Loader=GuardedLoader)
