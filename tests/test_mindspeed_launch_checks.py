"""What MindSpeed-RL refuses at launch is refused before launch; what a machine lacks is a warning there.

MindSpeed-RL (github Ascend/MindSpeed-RL, master 05a90d7) checks its config only once a run starts:
``cli/train_grpo.py`` (``parse_training_config``, ``main``, ``train``: ``get_tokenizer``),
``mindspeed_rl/config_cls/validate_config.py`` (``validate_rl_args``) and
``mindspeed_rl/utils/loggers.py`` (``WandbLogger``). Each test names the function it mirrors. Config-level
refusals are errors everywhere; what depends on the machine that launches (checkout, interpreter, weights,
tokenizer folder) is an error on a machine with the checkout, a warning on one without (the driver often
runs away from the NPU nodes), and a ``TrialFailed`` when a trial is about to launch where it is missing.
"""

import shutil
import subprocess
import sys

import pytest
from mindspeed_helpers import STANDIN, Recorder, config, make_weights, settings_for
from sweep_helpers import cli_env

from grpo.sweep.backends import TrialFailed
from grpo.sweep.backends.mindspeed import rules as mindspeed_rules
from grpo.sweep.backends.mindspeed.backend import MindSpeedBackend


@pytest.fixture
def weights(tmp_path):
    return make_weights(tmp_path / "weights")


# ---------------------------------------------------------------------------------- config-level rules
@pytest.mark.parametrize("override, key", [
    ("megatron_training.bf16=false", "megatron_training.bf16"),  # validate_rl_args: actor_config.bf16 is False
    ("generate_config.dtype=float16", "generate_config.dtype"),  # validate_rl_args: dtype != "bfloat16"
    # validate_rl_args: not integrated -> reference_resource.num_npus (None has none); integrated -> must be None
    (("rl_config.use_integrated_worker=false", "+ref_config.tensor_model_parallel_size=4",
      "+reward_config.tensor_model_parallel_size=4"), "rl_config.reference_resource"),
    ("+rl_config.reference_resource={num_npus:8}", "rl_config.reference_resource"),
    # train -> get_tokenizer(tokenizer_model=None): os.path.isdir(None) raises
    ("megatron_training.tokenizer_name_or_path=null", "megatron_training.tokenizer_name_or_path"),
])
def test_a_config_mindspeed_refuses_at_launch_is_refused_by_check(weights, override, key):
    backend = MindSpeedBackend(settings_for(weights))
    overrides = override if isinstance(override, tuple) else (override,)
    problems = backend.check(config(*overrides))
    assert len(problems) == 1 and f": {key}: " in problems[0] and "\n" not in problems[0]
    assert problems[0].startswith(config(*overrides)._source + ": ")
    assert backend.check(config()) == []  # the compliant config (bf16, bfloat16, integrated, tokenizer) passes


def test_config_level_refusals_hold_on_a_machine_without_the_checkout(tmp_path, weights):
    away = MindSpeedBackend(settings_for(weights, path=tmp_path / "no-checkout"))
    assert any("megatron_training.bf16" in p for p in away.check(config("megatron_training.bf16=false")))
    assert "mindspeed.path: not set" in MindSpeedBackend(settings_for(weights, path=None)).check(config())[0]


def test_global_batch_must_divide_by_the_ray_nodes():
    """validate_rl_args: reward_config.global_batch_size % get_node_nums() (one rule-reward process per node)."""
    cfg = config()  # global_batch_size 32
    problem = mindspeed_rules.global_batch_divisible_by_nodes(cfg, 3)
    assert problem and ": megatron_training.global_batch_size: 32 is not divisible by the 3 alive nodes" in problem
    assert mindspeed_rules.global_batch_divisible_by_nodes(cfg, 4) is None
    assert mindspeed_rules.global_batch_divisible_by_nodes(cfg, 1) is None


def test_a_trial_is_not_launched_on_a_cluster_whose_node_count_it_breaks(tmp_path, weights, monkeypatch):
    monkeypatch.setattr(mindspeed_rules, "alive_ray_nodes", lambda: 3)
    with pytest.raises(TrialFailed) as failed:
        MindSpeedBackend(settings_for(weights)).run(config(iters=1), tmp_path / "run", Recorder(), resume=False)
    assert "not divisible by the 3 alive nodes" in failed.value.reason
    assert not (tmp_path / "run" / "train.log").exists()  # nothing launched
    # A separate NPU cluster (RAY_ADDRESS in mindspeed.env) is not the one counted: no refusal from here.
    other = settings_for(weights, env={"RAY_ADDRESS": "10.0.0.1:6766"})
    assert mindspeed_rules.ray_node_problems(config(), other) == []


# ----------------------------------------------------------------------------- node-level: warnings
def test_without_the_checkout_here_its_absence_is_a_warning_and_a_launch_there_fails(tmp_path, weights):
    away = MindSpeedBackend(settings_for(weights, path=tmp_path / "no-checkout"))
    assert away.check(config()) == []
    (warning,) = away.launch_warnings(config())
    assert "mindspeed.path" in warning and "no such directory" in warning
    with pytest.raises(TrialFailed) as failed:  # MindSpeedBackend.run re-checks on the launching node
        away.run(config(iters=1), tmp_path / "run", Recorder(), resume=False)
    assert failed.value.reason.startswith("cannot launch on ") and "no such directory" in failed.value.reason


def test_weights_missing_here_are_a_warning_without_the_checkout_and_an_error_with_it(tmp_path, weights):
    layout = config(layout="tp4_pp2")  # no checkpoint converted for TP4 PP2
    away = MindSpeedBackend(settings_for(weights, path=tmp_path / "no-checkout"))
    assert away.check(layout) == []
    assert any("Megatron checkpoint" in w and "not found" in w for w in away.launch_warnings(layout))
    here = MindSpeedBackend(settings_for(weights))
    assert any("not found" in p for p in here.check(layout)) and here.launch_warnings(layout) == []


def test_a_checkpoint_converted_for_another_split_is_an_error_even_without_the_checkout(tmp_path, weights):
    """The files say so wherever they are read: not a property of the machine."""
    settings = settings_for(weights, path=tmp_path / "no-checkout", checkpoints={"tp2_pp2": str(weights / "qwen7b-tp4-pp1")})
    (problem,) = MindSpeedBackend(settings).check(config())
    assert "converted for TP4 PP1" in problem


def test_a_launch_node_refuses_a_missing_tokenizer_folder_and_runtime_env(tmp_path, weights):
    """get_tokenizer: 'tokenizer_model ... should be a directory'; main: open(<checkout>/runtime_env_path)."""
    checkout = tmp_path / "MindSpeed-RL"
    shutil.copytree(STANDIN, checkout)
    backend = MindSpeedBackend(settings_for(weights, path=checkout))
    assert backend.check(config()) == []
    shutil.rmtree(checkout / "Qwen2.5-7B")
    (checkout / "configs" / "envs" / "runtime_env.yaml").unlink()
    problems = backend.check(config())
    assert any("megatron_training.tokenizer_name_or_path" in p and "no such directory" in p for p in problems)
    assert any("configs/envs/runtime_env.yaml not found" in p for p in problems)


SPEC = """\
study: away
base: grpo_trainer_qwen25_7b_A3
search:
  layout: choice(tp4_pp1, tp2_pp2)
objective: {{metric: e2e_tps, direction: maximize}}
sampler: grid
backend: mindspeed
mindspeed:
  path: {checkout}
  python: /opt/mindspeed-rl/bin/python
  checkpoints: {{pattern: "/ckpt/qwen7b-tp{{tp}}-pp{{pp}}"}}
"""


def test_validate_without_the_checkout_prints_the_layout_table_warns_and_exits_0(tmp_path):
    """The driver machine often has no MindSpeed-RL checkout (it lives on the NPU nodes)."""
    spec = tmp_path / "away.yaml"
    spec.write_text(SPEC.format(checkout=tmp_path / "MindSpeed-RL"))
    done = subprocess.run([sys.executable, "-m", "grpo.cli", "validate", str(spec)], cwd=tmp_path, env=cli_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "layouts on" in done.stdout and "tp4_pp1" in done.stdout and "fits" in done.stdout
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning: ")]
    assert any("mindspeed.path" in w and "no such directory" in w for w in warnings)
    assert len(warnings) == len(set(warnings))  # each once, not once per point
    assert not (tmp_path / "studies").exists()


def test_validate_without_the_checkout_still_refuses_a_config_mindspeed_refuses(tmp_path):
    spec = tmp_path / "away.yaml"
    spec.write_text(SPEC.format(checkout=tmp_path / "MindSpeed-RL") + "overrides: [megatron_training.bf16=false]\n")
    done = subprocess.run([sys.executable, "-m", "grpo.cli", "validate", str(spec)], cwd=tmp_path, env=cli_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "megatron_training.bf16" in done.stderr and "Traceback" not in done.stderr
