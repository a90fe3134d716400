"""The package's import graph follows docs/architecture.md's one-way flow, with no circles (tools/import_graph.py).

Counted: every import, at module level or inside a function, TYPE_CHECKING blocks included. The
layering (which package may import which) is ``ALLOWED`` and ``SWEEP_GROUPS`` in tools/import_graph.py, as
docs/architecture.md draws it: errors/_fs/trial_attrs/_optuna_private -> config -> engine, plan -> report ->
sweep (spec -> study -> backends -> execution -> run -> commands) -> cli.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import get_args

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

import import_graph  # noqa: E402

from grpo.sweep.spec.models import PrunerName, ReducerName, SamplerName  # noqa: E402
from grpo.sweep.spec.objectives import REDUCERS  # noqa: E402
from grpo.sweep.spec.samplers import PRUNER_CLASSES, SAMPLER_CLASSES  # noqa: E402


def test_no_import_circles():
    edges = import_graph.graph()
    assert import_graph.circles(edges) == []


def test_no_import_against_the_layering():
    assert import_graph.back_edges(import_graph.graph()) == []


def test_the_checker_sees_a_circle_and_a_back_edge():
    edges = {"grpo.config.a": {"grpo.config.b"}, "grpo.config.b": {"grpo.config.a"},
             "grpo.report.html": {"grpo.config.a"}}
    assert import_graph.circles(edges) == [["grpo.config.a", "grpo.config.b"]]
    assert import_graph.back_edges(edges) == [("grpo.report.html", "grpo.config.a")]


def test_a_sweep_group_imports_only_the_groups_before_it():
    """spec <- study <- backends <- execution <- run <- commands: no group reaches a later one."""
    order = list(import_graph.SWEEP_GROUPS)
    assert order == [f"grpo.sweep.{g}" for g in ("spec", "study", "backends", "execution", "run", "commands")]
    for module, targets in import_graph.graph().items():
        src = import_graph.package_of(module)
        for dst in map(import_graph.package_of, targets):
            if src in order and dst in order:
                assert order.index(dst) <= order.index(src), (module, dst)
    edges = {"grpo.sweep.spec.load": {"grpo.sweep.execution.trial_storage"}}
    assert import_graph.back_edges(edges) == [("grpo.sweep.spec.load", "grpo.sweep.execution.trial_storage")]


def test_the_plan_is_a_leaf_and_the_report_reads_storage_only():
    edges = import_graph.graph()
    packages = {import_graph.package_of(d) for m, ds in edges.items() if m.startswith("grpo.plan") for d in ds}
    assert packages <= {"grpo.plan", "grpo.config", "grpo.errors"}
    packages = {import_graph.package_of(d) for m, ds in edges.items() if m.startswith("grpo.report") for d in ds}
    assert packages <= {
        "grpo.report", "grpo.errors", "grpo._fs", "grpo._yaml", "grpo.trial_attrs", "grpo._optuna_private"
    }  # _yaml: reads a trial's config file


def test_spec_names_are_the_registries_names():
    """The spec's Literal types and the classes they pick are one list each."""
    assert set(get_args(SamplerName)) == set(SAMPLER_CLASSES)
    assert set(get_args(PrunerName)) == set(PRUNER_CLASSES)
    assert set(get_args(ReducerName)) == set(REDUCERS)


def test_the_two_central_classes_stay_under_300_lines():
    """The engine's ``Run`` and the sweep's ``_Driver`` grow with every feature; past 300 lines a
    responsibility moves out (held-out evaluation to grpo/engine/evaluate.py, the search budget to
    grpo/sweep/run/budget.py), as the house rule from issue 24 says."""
    import ast

    for path, name in (("grpo/engine/trainer.py", "Run"), ("grpo/sweep/run/driver.py", "_Driver")):
        tree = ast.parse((Path(__file__).parents[1] / path).read_text())
        (cls,) = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name]
        assert cls.end_lineno is not None and cls.end_lineno - cls.lineno + 1 < 300, (path, name)
