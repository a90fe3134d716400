"""TRL-native keys (issue 42 item 2, trl half): ``trl.args.<GRPOConfig field>`` fixed in the spec's ``trl:`` section or
searched as ``search: trl.args.<field>`` (a key of the trial's config, its ``trl`` section, so it exports and shows
like any key), validated by constructing TRL's own GRPOConfig; a field a mapped key sets is refused in one line
naming that key; every other backend refuses them. What TRL resolves from them: tests/test_trl_resolved.py."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from grpo.config import load_config
from grpo.engine.rollout import SamplingParams
from grpo.sweep.backends import backend_class, load_backend
from grpo.sweep.backends.trl.backend import build_trainer
from grpo.sweep.spec.load import load_spec
from grpo.sweep.spec.space import SearchSpace

trl = pytest.importorskip("trl", reason="trl not installed (pip install -e .[trl])")
TINY = "grpo_trainer_tiny_cpu"
FIXED = ["rl_config.shuffle_mini_batch=true", "engine.device=cpu"]


def _spec(tmp_path, search: str, trl_section: str = ""):
    path = tmp_path / "t.yaml"
    listed = "".join(f"\n  - {o}" for o in FIXED)
    path.write_text(f"study: t\nbase: {TINY}\nbackend: trl\noverrides:{listed}\nsearch:\n  {search}\n"
                    f"objective: grpo/score/mean\n{trl_section}")  # fmt: skip
    return path


def _validate(path):
    return subprocess.run([sys.executable, "-m", "grpo.cli", "validate", str(path)], cwd=path.parent,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_a_searched_trl_key_validates_travels_in_the_config_and_reaches_the_trainer(tmp_path):
    path = _spec(tmp_path, "trl.args.loss_type: choice(bnpo, cispo)")
    spec = load_spec(path)
    assert SearchSpace.from_spec(spec).keys == ["trl.args.loss_type"]
    cfg = load_config(TINY, [*FIXED, "trl.args.loss_type=cispo"])  # the trial's config, as the driver composes it
    assert cfg.trl == {"args": {"loss_type": "cispo"}} and cfg.to_dict()["trl"] == {"args": {"loss_type": "cispo"}}
    backend = load_backend(spec)
    assert backend.check(cfg) == []
    built = build_trainer(cfg, tmp_path / "run", lambda i, m: False, logging.getLogger("t"), SamplingParams,
                          native=backend.native(cfg))  # fmt: skip
    assert built.trainer.loss_type == "cispo"  # TRL's own loss, not the render's grpo/dapo
    done = _validate(path)
    assert done.returncode == 0, done.stderr


def test_a_searched_field_a_mapped_key_sets_is_one_line_naming_it(tmp_path):
    done = _validate(_spec(tmp_path, "trl.args.beta: choice(0.0, 0.1)"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "search.trl.args.beta: set from rl_config.init_kl_coef by backend trl; search that key instead" in (
        done.stderr
    )


def test_a_bad_native_value_or_field_is_one_line(tmp_path):
    backend = load_backend(load_spec(_spec(tmp_path, "actor_config.lr: choice(1e-5, 2e-5)")))
    (unknown,) = backend.check(load_config(TINY, [*FIXED, "trl.args.no_such_field=1"]))
    assert unknown.endswith(f"trl.args.no_such_field: not a field of TRL {trl.__version__}'s GRPOConfig")
    (refused,) = backend.check(load_config(TINY, [*FIXED, "trl.args.auto_find_batch_size=true"]))
    assert "trl.args: TRL's GRPOConfig refuses them: auto_find_batch_size is not supported by GRPO" in refused
    (mapped,) = backend.check(load_config(TINY, [*FIXED, "trl.args.loss_type=dr_grpo"]))  # a value a mapped key sets
    assert "trl.args.loss_type: set from engine.loss_agg_mode (or rl_config.token_level_loss)" in mapped
    (both,) = backend.check(load_config(TINY, [*FIXED, "trl.args.loss_type=bnpo", "engine.loss_agg_mode=token-mean"]))
    assert "trl.args.loss_type: bnpo replaces engine.loss_agg_mode (token-mean); set only one" in both
    (level,) = backend.check(load_config(TINY, [*FIXED, "trl.args.loss_type=bnpo", "rl_config.token_level_loss=true"]))
    assert "trl.args.loss_type: bnpo replaces rl_config.token_level_loss (True); set only one" in level
    (shape,) = backend.check(load_config(TINY, [*FIXED, "trl.loss_type=bnpo"]))
    assert "trl.loss_type: backend trl's own settings are trl.args.<field>" in shape


def test_fixed_in_the_spec_and_in_the_config_is_refused(tmp_path):
    path = _spec(tmp_path, "actor_config.lr: choice(1e-5, 2e-5)", "trl:\n  args:\n    loss_type: bnpo\n")
    backend = load_backend(load_spec(path))
    assert backend.native(load_config(TINY, FIXED)) == {"loss_type": "bnpo"}
    (twice,) = backend.check(load_config(TINY, [*FIXED, "trl.args.loss_type=cispo"]))
    assert "trl.args.loss_type: fixed in the spec's trl.args and set in the config" in twice


@pytest.mark.parametrize("name", ["embedded", "mindspeed", "verl"])
def test_every_other_backend_refuses_trl_keys(name):
    if name == "verl":
        pytest.importorskip("verl")
    problems = backend_class(name)().check(load_config(TINY, ["trl.args.loss_type=bnpo"]))
    assert any("trl" in p and "\n" not in p for p in problems), problems
