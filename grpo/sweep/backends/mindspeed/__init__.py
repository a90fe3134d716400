"""The MindSpeed-RL backend: launch (backend), its log (log) and its launch rules (rules)."""

from grpo.sweep.backends.mindspeed.backend import MindSpeedBackend

__all__ = ["MindSpeedBackend"]
