"""The MindSpeed-RL -> TRL GRPOConfig mapping (no trl needed)."""

import dataclasses

import pytest

from grpo.config import load_config
from grpo.errors import UserError
from grpo.sweep.backends.trl.keys import grpo_config_kwargs


def test_gspo_maps_clip_higher_sequence_level_and_loss_type():
    kw = grpo_config_kwargs(load_config("grpo_trainer_tiny_cpu", ["algorithm=gspo"]))
    assert kw["importance_sampling_level"] == "sequence"
    assert (kw["epsilon"], kw["epsilon_high"]) == (0.0003, 0.0004)
    assert kw["loss_type"] == "grpo"
    assert kw["beta"] == 0.0


def test_loss_agg_mode_without_a_trl_loss_type_is_one_line_naming_key_and_backend():
    cfg = load_config("grpo_trainer_tiny_cpu", ["engine.loss_agg_mode=seq-mean-token-sum"])
    with pytest.raises(UserError, match=r"engine\.loss_agg_mode: seq-mean-token-sum: backend trl"):
        grpo_config_kwargs(cfg)


def test_top_k_off_is_trl_zero_and_every_field_is_a_grpo_config_field():
    kw = grpo_config_kwargs(load_config("grpo_trainer_tiny_cpu", ["generate_config.sampling_config.top_k=-1"]))
    assert kw["top_k"] == 0
    trl = pytest.importorskip("trl", reason="trl not installed (pip install -e .[bench])")
    assert set(kw) <= {f.name for f in dataclasses.fields(trl.GRPOConfig)}
