"""The configs and example sweeps shipped with grpo-sweep, found as package data (``importlib.resources``).

The YAML has one home: ``configs/`` and ``sweeps/`` at the top of the checkout. The package reaches them
as ``grpo/_data/configs`` and ``grpo/_data/sweeps``, links to those folders; a wheel (``pip install .``)
holds the files themselves at those paths. So the same lookup works in a checkout, an editable install
and an installed wheel run from any directory, and in a checkout the paths resolve to (and messages name)
``configs/...`` and ``sweeps/...``.

    shipped_configs()          # the folder of grpo_trainer_*.yaml with the model/ and layout/ groups
    shipped_sweep("quickstart")  # <...>/sweeps/quickstart.yaml, or None

A user's own config folder comes first (see ``grpo.config.compose.config_search_path``); a sweep spec
given as a path is always that file. Hydra can read the same folders: a packaged ``conf`` folder is what
its ``pkg://`` search path reads through ``importlib.resources`` too; we hand Hydra the folder's path
(``file://``), since the groups are also read here, file by file.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

_PACKAGE = "grpo"
_DATA = "_data"


@functools.cache  # where the package lies does not change while it runs
def _folder(kind: str) -> Path:
    """``grpo/_data/<kind>`` as a real folder (symlinks resolved: in a checkout, the top-level folder)."""
    # One name per joinpath: Python 3.10's Traversable.joinpath takes a single child.
    return Path(str(resources.files(_PACKAGE).joinpath(_DATA).joinpath(kind))).resolve()


def shipped_configs() -> Path:
    """The shipped config folder: ``grpo_trainer_*.yaml``, ``model/``, ``layout/``."""
    return _folder("configs")


def shipped_sweeps() -> Path:
    """The shipped example sweeps folder (``quickstart.yaml``, ``kl_study.yaml`` ...)."""
    return _folder("sweeps")


def shipped_sweep_names() -> list[str]:
    return sorted(p.stem for p in shipped_sweeps().glob("*.yaml"))


def shipped_sweep(name: str) -> Path | None:
    """The shipped example sweep called ``name`` (a bare name: ``quickstart``), else None.

    Anything that looks like a path (a ``/`` or a ``.yaml`` suffix) is no name: a path means that file.
    """
    if not name or name.endswith((".yaml", ".yml")) or "/" in name or "\\" in name or name.startswith("."):
        return None
    path = shipped_sweeps() / f"{name}.yaml"
    return path if path.is_file() else None
