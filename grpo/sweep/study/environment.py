"""What a study ran on: Python, the versions of the packages that shape its results, the project's git
commit and the platform. Stored once, as the study attr ``environment``, when the study is created, so
a report can say what produced its numbers."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("torch", "optuna", "ray", "hydra-core", "pydantic", "plotly", "pandas")


def collect_environment() -> dict[str, Any]:
    """``{"python", "packages": {name: version or None}, "commit": sha or None, "platform"}``."""
    return {
        "python": platform.python_version(),
        "packages": {name: _version(name) for name in PACKAGES},
        "commit": project_commit(),
        "platform": platform.platform(),
    }


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def project_commit(root: Path | None = None) -> str | None:
    """``git rev-parse HEAD`` of the folder holding the ``grpo`` package, when that folder is a git
    checkout's top level (an installed copy inside some other repository has no commit of its own)."""
    root = (root or Path(__file__).resolve().parents[3]).resolve()
    try:
        top = _git(root, "rev-parse", "--show-toplevel")
        if top is None or Path(top).resolve() != root:
            return None
        return _git(root, "rev-parse", "HEAD")
    except (OSError, subprocess.SubprocessError):  # no git, or it hung
        return None


def _git(root: Path, *args: str) -> str | None:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
    return (done.stdout.strip() or None) if done.returncode == 0 else None
