"""User mistakes in configs: each is a UserError with one line per problem naming the file and the key."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from grpo.config import load_config
from grpo.errors import UserError

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
TINY = "configs/grpo_trainer_tiny_cpu.yaml"


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch):
    monkeypatch.chdir(CONFIGS.parent)  # file names in messages are relative to the working directory


def problems(target, overrides=(), **kw) -> list[str]:
    with pytest.raises(UserError) as info:
        load_config(target, list(overrides), **kw)
    assert str(info.value) == info.value.problems[0]
    assert all("\n" not in line for line in info.value.problems)
    return info.value.problems


@pytest.fixture(scope="module")
def tiny():
    return load_config(CONFIGS / "grpo_trainer_tiny_cpu.yaml")


@pytest.fixture()
def cfg_dir(tmp_path) -> Path:
    """A writable copy of configs/ to break files in."""
    shutil.copytree(CONFIGS, tmp_path / "configs")
    return tmp_path / "configs"


def test_unknown_key_in_override_suggests_nearest():
    assert problems("grpo_trainer_tiny_cpu", ["rl_config.clip_rato=0.3"]) == [
        f"{TINY}: rl_config.clip_rato: unknown key; did you mean rl_config.clip_ratio?"]


def test_unknown_key_in_yaml_names_full_path(cfg_dir):
    path = cfg_dir / "grpo_trainer_tiny_cpu.yaml"
    text = path.read_text().replace("    temperature: 0.7", "    temprature: 0.7")
    text = text.replace("  num_threads: 1", "  num_thread: 1")
    path.write_text(text)
    lines = problems(path)
    assert any(line.endswith("generate_config.sampling_config.temprature: unknown key; "
                             "did you mean generate_config.sampling_config.temperature?") for line in lines)
    assert any(line.endswith("engine.num_thread: unknown key; did you mean engine.num_threads?") for line in lines)
    assert all(line.startswith(str(path)) or line.startswith(path.name) or "grpo_trainer_tiny_cpu.yaml" in line
               for line in lines)


def test_unknown_model_key_and_section():
    lines = problems("grpo_trainer_tiny_cpu", ["model.tiny_qwen.num_layer=3", "rl_confg.clip_ratio=0.3"])
    assert f"{TINY}: model.tiny_qwen.num_layer: unknown key; did you mean model.tiny_qwen.num_layers?" in lines
    assert f"{TINY}: rl_confg: unknown key; did you mean rl_config?" in lines


def test_range_and_type_errors_one_line_each():
    lines = problems("grpo_trainer_tiny_cpu", [
        "rl_config.clip_ratio=1.5", "actor_config.lr=abc", "rl_config.kl_penalty=foo",
        "megatron_training.global_batch_size=0", "rl_config.use_wandb=maybe",
    ])
    assert f"{TINY}: rl_config.clip_ratio: must be <= 1 (got 1.5)" in lines
    assert f"{TINY}: actor_config.lr: must be a number (got 'abc')" in lines
    assert f"{TINY}: rl_config.kl_penalty: must be one of 'kl', 'abs', 'mse' or 'low_var_kl' (got 'foo')" in lines
    assert f"{TINY}: megatron_training.global_batch_size: must be > 0 (got 0)" in lines
    assert f"{TINY}: rl_config.use_wandb: must be true or false (got 'maybe')" in lines
    assert len(lines) == 5


@pytest.mark.parametrize("override, message", [
    ("megatron_training.stage=ray_ppo", "megatron_training.stage: must be one of 'ray_grpo' (got 'ray_ppo')"),
    ("rl_config.adv_estimator=rloo", "rl_config.adv_estimator: must be one of 'group_norm' or 'gae' (got 'rloo')"),
    ("rl_config.kl_ctrl_type=pid", "rl_config.kl_ctrl_type: must be one of 'fixed' or 'adaptive' (got 'pid')"),
    ("actor_config.lr_decay_style=step",
     "actor_config.lr_decay_style: must be one of 'constant', 'linear' or 'cosine' (got 'step')"),
    ("megatron_training.recompute_method=random",
     "megatron_training.recompute_method: must be one of 'uniform' or 'block' (got 'random')"),
    ("generate_config.dtype=int8",
     "generate_config.dtype: must be one of 'bfloat16', 'float16', 'float32' or 'auto' (got 'int8')"),
    ("engine.device=tpu", "engine.device: must be one of 'auto', 'cpu', 'cuda' or 'npu' (got 'tpu')"),
])
def test_enumerations(tiny, override, message):
    with pytest.raises(UserError) as info:
        load_config("grpo_trainer_tiny_cpu", [override])
    assert info.value.problems == [f"{tiny._source}: {message}"]


def test_unknown_verifier_is_an_error_not_skipped():
    lines = problems("grpo_trainer_tiny_cpu", ["rl_config.verifier_function=[acc,bogus]"])
    assert lines == [f"{TINY}: rl_config.verifier_function[1]: must be one of acc, base_acc, math_17k_acc, "
                     "strict_format, format, step, math_verify_reward, acc_for_dapo, acc_for_ppo, retool_reward, or a "
                     "user function path/to/file.py:function or package.module:function (got 'bogus')"]


def test_yaml_syntax_error_names_file_and_line(cfg_dir):
    path = cfg_dir / "grpo_trainer_tiny_cpu.yaml"
    lines = path.read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if "clip_ratio" in line)
    lines[index] = "  clip_ratio: [0.2"
    path.write_text("\n".join(lines) + "\n")
    (message,) = problems(path)
    assert "YAML syntax error" in message and "grpo_trainer_tiny_cpu.yaml:" in message
    line_no = int(message.split("grpo_trainer_tiny_cpu.yaml:")[1].split(":")[0])
    assert index + 1 <= line_no <= index + 3  # the parser reports where the unclosed list breaks


def test_yaml_syntax_error_in_model_file(cfg_dir):
    (cfg_dir / "model" / "tiny_qwen.yaml").write_text("tiny_qwen:\n  num_layers: 2\n   hidden_size: 64\n")
    (message,) = problems("grpo_trainer_tiny_cpu", config_dir=cfg_dir)
    assert "tiny_qwen.yaml:3: YAML syntax error" in message


def test_missing_file_and_unknown_name():
    assert problems("configs/nope.yaml") == ["configs/nope.yaml: no such config file"]
    (line,) = problems("grpo_trainer_nope")
    assert line.startswith("grpo_trainer_nope: no config named 'grpo_trainer_nope' in configs")
    assert "grpo_trainer_tiny_cpu" in line


def test_unknown_layout_lists_available():
    assert problems("grpo_trainer_tiny_cpu", ["layout=tp3_pp1"]) == [
        f"{TINY}: layout: unknown layout 'tp3_pp1' "
        "(available: tp1_pp1, tp1_pp1_cpu, tp2_pp2, tp4_pp1, tp4_pp2, tp8_pp1)"]
    with pytest.raises(UserError, match=r"layout: unknown layout 'tp3_pp1'"):
        load_config("grpo_trainer_tiny_cpu", ["layout=tp3_pp1"])


def test_bad_override_syntax():
    (line,) = problems("grpo_trainer_tiny_cpu", ["rl_config.clip_ratio=[0.2"])
    assert line.startswith(f"{TINY}: override 'rl_config.clip_ratio=[0.2':")


def test_model_not_in_defaults_list():
    (line,) = problems("grpo_trainer_tiny_cpu", ["actor_config.model=qwen25_7b"])
    assert line == (f"{TINY}: actor_config.model: model 'qwen25_7b' is not loaded by the defaults list "
                    "(loaded: tiny_qwen)")


def test_both_spellings_of_shuffle_disagreeing(cfg_dir):
    path = cfg_dir / "grpo_trainer_tiny_cpu.yaml"
    path.write_text(path.read_text().replace("  shuffle_mini_batch: false",
                                             "  shuffle_mini_batch: false\n  shuffle_minibatch: true"))
    (line,) = problems(path)
    assert line.endswith("rl_config.shuffle_minibatch and rl_config.shuffle_mini_batch are one key "
                         "(got True and False); set only one")


def test_missing_required_model_field(cfg_dir):
    path = cfg_dir / "model" / "tiny_qwen.yaml"
    path.write_text(path.read_text().replace("  hidden_size: 64\n", ""))
    (line,) = problems("grpo_trainer_tiny_cpu", config_dir=cfg_dir)
    assert line.endswith("model.tiny_qwen.hidden_size: missing required key")


def test_top_level_not_a_mapping(tmp_path):
    (tmp_path / "x.yaml").write_text("- 1\n- 2\n")
    (line,) = problems(tmp_path / "x.yaml")
    assert line.endswith("x.yaml: must be a mapping of sections (got list)")
