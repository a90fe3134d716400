"""Record every config key of a MindSpeed-RL checkout: name, section, type and default.

    python tools/mindspeed_manifest.py /path/to/MindSpeed-RL > grpo/config/mindspeed_keys.json

MindSpeed-RL's config classes (``mindspeed_rl/config_cls/``) set every key they accept as an attribute in
``__init__`` before ``self.update(config_dict)``, which refuses any other key. This script reads those
assignments with ``ast`` (nothing of MindSpeed-RL is imported or run) and writes one JSON object:

- ``megatron``: ``MegatronConfig`` (the model files, ``megatron_training``, ``actor_config``, ``ref_config``
  and ``reward_config`` all go through it), ``rl``: ``RLConfig``, ``generate``: ``GenerateConfig``,
  ``sampling``: the keys of ``GenerateConfig.sampling_config``;
- per key ``type`` (``bool``, ``int``, ``float``, ``str``, ``list``, ``dict``, ``any``; ``section`` for
  ``sampling_config``) and ``default``. The
  type comes from the default; a ``None`` default takes the type the class docstring gives (``name (int):``),
  ``any`` without one. A default computed from something other than literals (a module path) is recorded
  as ``null`` with ``"computed": true``.

The checkout may be a work tree or a bare git directory (its ``HEAD`` is read). The commit is recorded.
Standard library only.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

SOURCES = {
    "megatron": ("mindspeed_rl/config_cls/megatron_config.py", "MegatronConfig"),
    "rl": ("mindspeed_rl/config_cls/rl_config.py", "RLConfig"),
    "generate": ("mindspeed_rl/config_cls/generate_config.py", "GenerateConfig"),
}
DOC_TYPES = {"bool": "bool", "int": "int", "float": "float", "str": "str", "list": "list", "dict": "dict"}
_DOC_LINE = re.compile(r"^\s*-?\s*(\w+) \((\w+)[^)]*\):")


class _Computed(Exception):
    """A default that is not made of literals (a module-level path, a call)."""


def read_source(checkout: Path, path: str) -> str:
    """One file of the checkout: from the work tree, or from HEAD of a bare git directory."""
    file = checkout / path
    if file.is_file():
        return file.read_text(encoding="utf-8")
    done = subprocess.run(
        ["git", "--git-dir", str(checkout), "show", f"HEAD:{path}"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: no {path} (not a MindSpeed-RL checkout?)")
    return done.stdout


def commit_of(checkout: Path) -> str | None:
    git_dir = ["--git-dir", str(checkout)] if (checkout / "HEAD").is_file() else ["-C", str(checkout)]
    done = subprocess.run(["git", *git_dir, "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    return done.stdout.strip() or None if done.returncode == 0 else None


def _value(node: ast.expr, known: dict[str, Any]) -> Any:
    """The value of a default expression: literals, arithmetic on them, an earlier ``self.x``, or
    ``config_dict.get(key, default)`` (the default is what applies when the key is absent)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.List | ast.Tuple):
        return [_value(e, known) for e in node.elts]
    if isinstance(node, ast.Dict):
        return {_value(k, known): _value(v, known) for k, v in zip(node.keys, node.values, strict=True) if k}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand, known)
    if isinstance(node, ast.BinOp):
        left, right = _value(node.left, known), _value(node.right, known)
        ops = {ast.Add: lambda: left + right, ast.Mult: lambda: left * right, ast.Pow: lambda: left**right}
        if type(node.op) in ops:
            return ops[type(node.op)]()
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        if node.attr not in known:
            raise _Computed
        return known[node.attr]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return _value(node.args[1], known) if len(node.args) > 1 else None
    raise _Computed


def _type_of(value: Any) -> str:
    for kind, name in ((bool, "bool"), (int, "int"), (float, "float"), (str, "str"), (list, "list"), (dict, "dict")):
        if isinstance(value, kind):
            return name
    return "any"


def _documented_types(cls: ast.ClassDef) -> dict[str, str]:
    """``name (type): ...`` lines of the class docstring (also ``- name (type):`` for nested keys)."""
    doc = ast.get_docstring(cls) or ""
    found: dict[str, str] = {}
    for line in doc.splitlines():
        match = _DOC_LINE.match(line)
        if match and match.group(2).lower() in DOC_TYPES:
            found.setdefault(match.group(1), DOC_TYPES[match.group(2).lower()])
    return found


def _defaults(cls: ast.ClassDef) -> dict[str, Any]:
    """``self.<key> = <default>`` in ``__init__`` up to the ``self.update(...)`` call, in order."""
    init = next(f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
    values: dict[str, Any] = {}
    computed: set[str] = set()
    for stmt in init.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            func = stmt.value.func
            if isinstance(func, ast.Attribute) and func.attr == "update":
                break  # what follows reads the user's values, not defaults
        if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
            continue
        target = stmt.targets[0]
        if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"):
            continue
        if target.attr in values:
            continue
        try:
            values[target.attr] = _value(stmt.value, values)
        except _Computed:
            values[target.attr] = None
            computed.add(target.attr)
    values["__computed__"] = computed
    return values


def _entries(values: dict[str, Any], documented: dict[str, str]) -> dict[str, dict[str, Any]]:
    computed: set[str] = values.pop("__computed__", set())
    out: dict[str, dict[str, Any]] = {}
    for key, default in values.items():
        kind = _type_of(default) if default is not None else documented.get(key, "any")
        entry: dict[str, Any] = {"type": kind, "default": default}
        if key in computed:
            entry["computed"] = True
        out[key] = entry
    return out


def manifest(checkout: Path) -> dict[str, Any]:
    sections: dict[str, dict[str, dict[str, Any]]] = {}
    for section, (path, name) in SOURCES.items():
        tree = ast.parse(read_source(checkout, path))
        cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
        documented = _documented_types(cls)
        values = _defaults(cls)
        if section == "generate":  # its sampling_config is a dict of keys checked one by one
            sampling = values.pop("sampling_config")
            sections["sampling"] = _entries({**sampling, "__computed__": set()}, documented)
            sections[section] = _entries(values, documented)
            sections[section]["sampling_config"] = {"type": "section", "default": None}  # keys: `sampling`
            continue
        sections[section] = _entries(values, documented)
    return {
        "source": "github.com/Ascend/MindSpeed-RL",
        "commit": commit_of(checkout),
        "generated_by": "python tools/mindspeed_manifest.py <checkout> > grpo/config/mindspeed_keys.json",
        "sections": {s: sections[s] for s in ("megatron", "rl", "generate", "sampling")},
    }


def dumps(data: dict[str, Any]) -> str:
    """JSON with one line per key, so a diff between two commits reads key by key."""
    lines = ["{"]
    header = [k for k in data if k != "sections"]
    lines += [f"  {json.dumps(k)}: {json.dumps(data[k])}," for k in header]
    lines.append('  "sections": {')
    names = list(data["sections"])
    for i, name in enumerate(names):
        keys = data["sections"][name]
        lines.append(f"    {json.dumps(name)}: {{")
        items = list(keys.items())
        for j, (key, entry) in enumerate(items):
            lines.append(f"      {json.dumps(key)}: {json.dumps(entry)}" + ("," if j < len(items) - 1 else ""))
        lines.append("    }" + ("," if i < len(names) - 1 else ""))
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    sys.stdout.write(dumps(manifest(Path(argv[0]).expanduser())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
