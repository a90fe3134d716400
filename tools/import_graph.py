"""The import graph of the ``grpo`` package: package-level edges, edges against the layering, and circles.

    python tools/import_graph.py            # print the graph, the back edges and the circles
    python tools/import_graph.py --check    # the same, exit 1 when there is a back edge or a circle
    python tools/import_graph.py --dot      # Graphviz of the module graph (pipe to `dot -Tsvg`)

Every ``import`` counts, at module level or inside a function (a lazy import is still a dependency),
including ``if TYPE_CHECKING:`` blocks: a circle hidden from the interpreter is still a circle for the
reader. The layering is docs/architecture.md's (the picture, the data flow, where each concept lives), as
packages:

    grpo.errors, grpo._fs,         the bottom: no grpo imports
    grpo.trial_attrs, grpo._optuna_private
    grpo._yaml                     the guarded YAML loader (imports grpo.errors only)
    grpo._imports                  a user's object by reference, file.py:fn or pkg.mod:fn (grpo.errors only)
    grpo.config                    schema, composition, rules
    grpo.engine, grpo.plan         the trainer; the memory planner (a leaf: estimate(cfg))
    grpo.report                    reads study storage and trial dirs only (no config composition)
    grpo.sweep.<group>             spec, study, backends, execution, run, commands: each imports only the
                                   groups before it (SWEEP_GROUPS)
    grpo.cli                       the entry point

Standard library only, so it runs on any checkout (also an old one, for a before/after comparison).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Which packages each package may import (besides itself).
ALLOWED: dict[str, set[str]] = {
    "grpo.errors": set(),
    "grpo._fs": set(),
    "grpo.trial_attrs": set(),  # the trial attr keys the sweep writes and the report reads
    "grpo._optuna_private": set(),  # Optuna's internals, behind a version guard
    "grpo._yaml": {"grpo.errors"},  # the guarded YAML loader, under everything that reads a user's YAML
    "grpo._imports": {"grpo.errors"},  # a user's object by reference (file.py:fn, pkg.mod:fn): reward functions
    "grpo.config": {"grpo.errors", "grpo._fs", "grpo._yaml"},
    "grpo.engine": {"grpo.config", "grpo.errors", "grpo._fs", "grpo._yaml", "grpo._imports"},
    "grpo.plan": {"grpo.config", "grpo.errors"},
    "grpo.report": {"grpo.errors", "grpo._fs", "grpo._yaml", "grpo.trial_attrs", "grpo._optuna_private"},
    "grpo.sweep": set(),  # its __init__ is empty: the groups below are the packages
    "grpo.cli": {"grpo.sweep.commands", "grpo.sweep.spec", "grpo.sweep.backends", "grpo.config", "grpo.errors"},
}

# grpo.sweep's groups, in order: each imports only the groups before it (and the packages beside it).
SWEEP_GROUPS: dict[str, set[str]] = {
    "grpo.sweep.spec": {"grpo.config", "grpo.errors", "grpo._fs"},
    "grpo.sweep.study": {"grpo.config", "grpo.report", "grpo.errors", "grpo._fs", "grpo._optuna_private"},
    "grpo.sweep.backends": {"grpo.config", "grpo.engine", "grpo.errors", "grpo._fs"},
    "grpo.sweep.execution": {"grpo.config", "grpo.errors", "grpo._fs"},
    "grpo.sweep.run": {"grpo.config", "grpo.engine", "grpo.plan", "grpo.report", "grpo.errors", "grpo._fs"},
    "grpo.sweep.commands": {"grpo.config", "grpo.plan", "grpo.report", "grpo.errors", "grpo._fs"},
}
for _i, (_group, _beside) in enumerate(SWEEP_GROUPS.items()):
    ALLOWED[_group] = _beside | {"grpo.trial_attrs", "grpo._yaml", "grpo._imports"} | set(list(SWEEP_GROUPS)[:_i])


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted((root / "grpo").rglob("*.py"))}


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The longest known module that ``name`` is or lies in (``grpo.config.load_config`` -> ``grpo.config``)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import sub` names the submodule when there is one.
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for name in names:
            target = _resolve(name, known) if name.startswith("grpo") else None
            if target and target != module:
                found.add(target)
    return found


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    known = modules(root)
    return {m: imports_of(m, p, known) for m, p in known.items()}


def package_of(module: str) -> str:
    """The layer a module belongs to: ``grpo.<package>``, or ``grpo.sweep.<group>`` inside the sweep."""
    parts = module.split(".")
    if len(parts) > 2 and ".".join(parts[:3]) in SWEEP_GROUPS:
        return ".".join(parts[:3])
    return ".".join(parts[:2]) if len(parts) > 1 else module


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10_000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)


def back_edges(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Module edges whose packages break ``ALLOWED``."""
    bad = []
    for src, targets in edges.items():
        for dst in targets:
            ps, pd = package_of(src), package_of(dst)
            if ps != pd and pd not in ALLOWED.get(ps, set()):
                bad.append((src, dst))
    return sorted(bad)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 on a back edge or a circle")
    parser.add_argument("--dot", action="store_true", help="print the module graph as Graphviz")
    parser.add_argument("--root", type=Path, default=ROOT, help="a checkout (default: this one)")
    args = parser.parse_args(argv)
    edges = graph(args.root)
    if args.dot:
        print("digraph grpo {")
        for src, targets in sorted(edges.items()):
            for dst in sorted(targets):
                print(f'  "{src}" -> "{dst}";')
        print("}")
        return 0
    packages: dict[tuple[str, str], int] = defaultdict(int)
    for src, targets in edges.items():
        for dst in targets:
            if package_of(src) != package_of(dst):
                packages[(package_of(src), package_of(dst))] += 1
    print(f"{len(edges)} modules, {sum(len(t) for t in edges.values())} import edges")
    print("package edges (module edges behind each):")
    for (src, dst), n in sorted(packages.items()):
        mark = "" if dst in ALLOWED.get(src, set()) else "   <-- against the layering"
        print(f"  {src} -> {dst}: {n}{mark}")
    bad = back_edges(edges)
    print(f"back edges: {len(bad)}")
    for src, dst in bad:
        print(f"  {src} -> {dst}")
    package_graph: dict[str, set[str]] = defaultdict(set)
    for src, dst in packages:
        package_graph[src].add(dst)
    found = circles(dict(package_graph)) + circles(edges)
    print(f"circles (packages, then modules): {len(found)}")
    for component in found:
        print(f"  ({len(component)}) " + " <-> ".join(component))
    return 1 if args.check and (bad or found) else 0


if __name__ == "__main__":
    sys.exit(main())
