"""Trial backends: how one trial's GRPO run is executed (``embedded`` engine or ``mindspeed`` subprocess)."""

from grpo.sweep.backends._base import ReportFn, TrialBackend, TrialFailed


def get_backend(name: str) -> TrialBackend:
    """The backend called ``name`` in a sweep spec (``backend:``)."""
    if name == "embedded":
        from grpo.sweep.backends.embedded import EmbeddedBackend

        return EmbeddedBackend()
    if name == "mindspeed":
        from grpo.sweep.backends.mindspeed import MindSpeedBackend

        return MindSpeedBackend()
    raise ValueError(f"unknown backend {name!r}")


__all__ = ["ReportFn", "TrialBackend", "TrialFailed", "get_backend"]
