"""Opening (creating or resuming) a spec's Optuna study, and refusing incompatible resumes."""

from __future__ import annotations

import time

import optuna

from grpo.errors import UserError


def storage_for(spec):
    from grpo.sweep.spec import make_storage

    return make_storage(spec)


def find_study(spec) -> optuna.Study | None:
    """The spec's existing study, or None when it was never run (nothing is created)."""
    try:
        storage = storage_for(spec)
    except (OSError, UserError):
        return None
    names = {s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}
    if spec.study not in names:
        return None
    return optuna.load_study(study_name=spec.study, storage=storage)


def open_study(spec) -> tuple[optuna.Study, bool]:
    """Create the study or resume it. Returns (study, resumed). Refuses a changed spec (see ``--fork``).

    Two drivers starting at once on a fresh RDB race to create Optuna's tables (a unique-key error from
    PostgreSQL for one of them): the loser retries after a short pause, when the tables exist.
    """
    spec.study_dir.mkdir(parents=True, exist_ok=True)
    for attempt in range(5):
        try:
            return _open_study(spec)
        except UserError:
            raise
        except Exception as err:  # sqlalchemy IntegrityError/ProgrammingError from the table-creation race
            if attempt == 4 or "sqlalchemy" not in type(err).__module__ + str(type(err).__mro__):
                raise
            time.sleep(0.5 * (attempt + 1))
    raise AssertionError("unreachable")


def _open_study(spec) -> tuple[optuna.Study, bool]:
    storage = storage_for(spec)
    directions = [o.direction for o in spec.objectives]
    existing = find_study(spec)
    if existing is not None:
        old = existing.user_attrs.get("fingerprint")
        if old is not None and old != spec.fingerprint():
            raise UserError(
                f"{spec.path}: study '{spec.study}' was created from a different spec (base, overrides, search "
                f"or objective changed); rerun with --fork NEW_NAME to start a new study from this spec"
            )
        if [d.name.lower() for d in existing.directions] != directions:
            raise UserError(f"{spec.path}: objective: directions {directions} differ from the stored study's")
        return existing, True
    study = optuna.create_study(study_name=spec.study, storage=storage, directions=directions, load_if_exists=True)
    attrs = {
        "spec": spec.to_dict(),
        "spec_path": str(spec.path),
        "base": spec.base,
        "objectives": [o.model_dump() for o in spec.objectives],
        "sampler": spec.sampler.name,
        "pruner": spec.pruner.name,
        "study_dir": str(spec.study_dir),
        "fingerprint": spec.fingerprint(),
        "backend": spec.backend,
    }
    for key, value in attrs.items():
        study.set_user_attr(key, value)
    return study, False
