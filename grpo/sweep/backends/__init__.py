"""Trial backends: how one trial's GRPO run is executed (``embedded`` engine, ``mindspeed`` subprocess, ``trl``,
``verl`` Ray job, or a user's own ``package.module:ClassName`` subclass of ``TrialBackend``).

    backend = load_backend(spec)     # built once per study, from the spec; shipped inside each trial's job
"""

from __future__ import annotations

import importlib

from grpo.errors import UserError
from grpo.sweep.backends._base import RayOptions, ReportFn, TrialBackend, TrialFailed
from grpo.sweep.spec.models import SweepSpec


def backend_class(name: str, source: str = "sweep spec") -> type[TrialBackend]:
    """The class a spec's ``backend:`` names; a one-line UserError when it cannot be imported."""
    if name == "embedded":
        from grpo.sweep.backends.embedded import EmbeddedBackend

        return EmbeddedBackend
    if name == "mindspeed":
        from grpo.sweep.backends.mindspeed.backend import MindSpeedBackend

        return MindSpeedBackend
    if name == "trl":
        from grpo.sweep.backends.trl.backend import TrlBackend

        return TrlBackend
    if name == "verl":
        from grpo.sweep.backends.verl.backend import VerlBackend

        return VerlBackend
    module_name, _, class_name = name.partition(":")
    where = f"{source}: backend: {name}"
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:  # the module, or something it imports, is missing
        raise UserError(f"{where}: cannot import {module_name} ({type(err).__name__}: {err})") from None
    except Exception as err:  # the module itself raised while importing
        raise UserError(f"{where}: importing {module_name} failed ({type(err).__name__}: {err})") from None
    cls = getattr(module, class_name, None)
    if cls is None:
        raise UserError(f"{where}: module {module_name} has no {class_name}")
    if not (isinstance(cls, type) and issubclass(cls, TrialBackend)):
        raise UserError(f"{where}: {class_name} is not a subclass of grpo.sweep.backends.TrialBackend")
    return cls


def load_backend(spec: SweepSpec) -> TrialBackend:
    """The study's backend, configured from ``spec`` (see ``TrialBackend.from_spec``)."""
    cls = backend_class(spec.backend, spec.source)
    try:
        return cls.from_spec(spec)
    except UserError:
        raise
    except Exception as err:
        # A user's backend failing in its own from_spec/__init__ (or one whose __init__ needs arguments) is
        # bad input, not our bug; an error in a shipped backend other than a TypeError still surfaces as one.
        if ":" not in spec.backend and not isinstance(err, TypeError):
            raise
        raise UserError(
            f"{spec.source}: backend: {spec.backend}: cannot be built from the spec ({type(err).__name__}: {err})"
        ) from None


__all__ = ["RayOptions", "ReportFn", "TrialBackend", "TrialFailed", "backend_class", "load_backend"]
