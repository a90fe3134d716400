"""What MindSpeed-RL composes is what grpo-sweep rendered: no file of the checkout can shadow it.

MindSpeed-RL's entry point is ``@hydra.main(config_path='../configs', config_name='grpo_qwen25_7b_A3')``
(``cli/train_grpo.py``, ``main``): Hydra puts that ``configs/`` folder (the "main" search path entry) before
any ``--config-dir`` (hydra/_internal/utils.py, ``_run_hydra``/``add_conf_dir``: prepended before the
"schema" entry, i.e. after "main"), so a ``--config-dir`` only adds files the checkout does not have.
The checkout ships ``configs/model/qwen25_7b.yaml``; a rendered ``model/qwen25_7b.yaml`` in a
``--config-dir`` was therefore never read, and a swept model key was silently lost.

The STAND-IN entry point (tests/standin_mindspeed/cli/train_grpo.py) is declared the same way, with its
own ``configs/model/qwen25_7b.yaml`` (max_position_embeddings 32768, as the real checkout's), and prints
the Megatron arguments it composed, as Megatron's ``_print_args`` does; these tests read them.
"""

import shutil

import pytest
from mindspeed_helpers import STANDIN, Recorder, composed_args, config, make_weights, settings_for

from grpo.sweep.backends.mindspeed._render import render_trial_config
from grpo.sweep.backends.mindspeed.backend import MindSpeedBackend


@pytest.fixture
def weights(tmp_path):
    return make_weights(tmp_path / "weights")


def test_the_standin_checkout_ships_its_own_model_file_like_mindspeed():
    """The trap the tests need: the checkout's model file differs from what a sweep renders."""
    text = (STANDIN / "configs" / "model" / "qwen25_7b.yaml").read_text()
    assert "max_position_embeddings: 32768" in text
    assert 'config_path="../configs"' in (STANDIN / "cli" / "train_grpo.py").read_text()


def test_a_swept_model_key_reaches_what_standin_mindspeed_composes(tmp_path, weights):
    """Before: rendered max_position_embeddings=16384, MindSpeed-RL ran with the checkout's 32768."""
    cfg = config("model.qwen25_7b.max_position_embeddings=16384", "model.qwen25_7b.rotary_base=500000", iters=1)
    MindSpeedBackend(settings_for(weights)).run(cfg, tmp_path / "run", Recorder(), resume=False)
    args = composed_args(tmp_path / "run")
    assert args["max_position_embeddings"] == "16384"
    assert float(args["rotary_base"]) == 500000
    assert args["tensor_model_parallel_size"] == "2"  # the trainer sections are ours too


def test_a_checkout_file_named_like_the_rendered_trainer_cannot_shadow_it_with_standin_mindspeed(tmp_path, weights):
    """The primary config is looked up on the same search path: a checkout's own ``grpo_trainer.yaml``
    (MindSpeed-RL once shipped ``configs/grpo_trainer_*.yaml``) must not replace the rendered one."""
    checkout = tmp_path / "MindSpeed-RL"
    shutil.copytree(STANDIN, checkout)
    (checkout / "configs" / "grpo_trainer.yaml").write_text(
        "defaults:\n  - model:\n      - qwen25_7b\nmegatron_training:\n  model: qwen25_7b\n  train_iters: 999\n"
    )
    cfg = config("model.qwen25_7b.max_position_embeddings=16384", iters=1)
    settings = settings_for(weights, path=checkout)
    plan = render_trial_config(cfg, tmp_path / "run", settings, resume=False)
    assert (checkout / "configs" / f"{plan.config_name}.yaml").is_file()  # the name clash this test is about
    MindSpeedBackend(settings).run(cfg, tmp_path / "run", Recorder(), resume=False)
    args = composed_args(tmp_path / "run")
    assert args["train_iters"] == "1" and args["max_position_embeddings"] == "16384"
