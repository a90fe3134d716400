"""Every key is classified for the embedded engine (grpo/engine/coverage.py), the doc is generated from the
table, refused keys are validate errors naming backend: mindspeed, and a searched key that the engine would
not vary is a validate error for a sweep."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from grpo.cli import sweep_main
from grpo.config import load_config
from grpo.config.manifest import manifest_keys
from grpo.config.schema import (
    ActorConfig,
    EngineConfig,
    GenerateConfig,
    GRPOConfig,
    MegatronRoleConfig,
    MegatronTrainingConfig,
    ModelConfig,
    MsprobeConfig,
    ProfilerRoleConfig,
    ProfilerSectionConfig,
    RLConfig,
    SamplingConfig,
)
from grpo.engine.check import check_config
from grpo.engine.coverage import TABLE, Kind, classify, counts, searched_problems

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
import key_table  # noqa: E402

TINY = "grpo_trainer_tiny_cpu"


def every_key() -> set[str]:
    """Every key of the manifest and of the schema, in the table's names."""
    names = {f"megatron.{k}" for k in manifest_keys("megatron")}
    names |= {f"rl_config.{k}" for k in manifest_keys("rl")}
    names |= {f"generate_config.{k}" for k in manifest_keys("generate")}
    names |= {f"generate_config.sampling_config.{k}" for k in manifest_keys("sampling")}
    for model, prefix in (
        (ModelConfig, "megatron"), (MegatronTrainingConfig, "megatron"), (ActorConfig, "megatron"),
        (MegatronRoleConfig, "megatron"), (RLConfig, "rl_config"), (GenerateConfig, "generate_config"),
        (SamplingConfig, "generate_config.sampling_config"), (EngineConfig, "engine"),
        (ProfilerSectionConfig, "profiler_config"), (ProfilerRoleConfig, "profiler_config.integrated"),
        (MsprobeConfig, "msprobe_config"),
    ):  # fmt: skip
        names |= {f"{prefix}.{k}" for k in model.model_fields}
    return names | set(GRPOConfig.model_fields)


def test_every_manifest_and_schema_key_is_classified_once():
    keys = every_key()
    assert sorted(keys - set(TABLE)) == []  # unclassified: add it to grpo/engine/coverage.py
    assert sorted(set(TABLE) - keys) == []  # classified but no such key
    assert all(e.reason for e in TABLE.values())
    assert len(manifest_keys("megatron")) + len(manifest_keys("rl")) == 280  # the manifest this table was made for


def test_the_doc_is_generated_from_the_table():
    assert (REPO / "docs" / "keys.md").read_text(encoding="utf-8") == key_table.render(), (
        "docs/keys.md is stale: run python tools/key_table.py"
    )
    n = counts()
    assert f"| applied | {n[Kind.APPLIED]} |" in key_table.render()


@pytest.mark.parametrize("path, name", [
    ("actor_config.lr", "megatron.lr"),
    ("model.tiny_qwen.hidden_dropout", "megatron.hidden_dropout"),
    ("megatron_training.lora_r", "megatron.lora_r"),
    ("generate_config.sampling_config.top_p", "generate_config.sampling_config.top_p"),
    ("rl_config.actor_resource.num_npus", "rl_config.actor_resource"),
    ("+rl_config.use_remove_padding=true", "rl_config.use_remove_padding"),
    ("layout", "layout"),
])  # fmt: skip
def test_config_paths_find_their_entry(path, name):
    entry = classify(path)
    assert entry is not None and entry.name == name


# A value the engine would not carry out, for every refused key the table's generic check covers.
REFUSED_VALUES = {
    "megatron.attention_bias": "true",
    "megatron.noop_layers": "'1'",
    "megatron.vocab_extra_ids": "4",
    "megatron.prompt_type": "qwen",
    "megatron.prompt_type_path": "/tmp/templates.json",
    "megatron.tokenizer_type": "Llama2Tokenizer",
    "megatron.optimizer": "sgd",
    "megatron.attention_mask_type": "general",
    "megatron.skip_train": "true",
    "megatron.pretrained_checkpoint": "/tmp/ckpt",
    "megatron.mm_model": "/tmp/mm.json",
    "rl_config.integrated_mode_config": "{ref_model_load_path: /tmp/ref}",
    "rl_config.reward_resource": "{num_npus: 1}",
    "rl_config.critic_resource": "{num_npus: 1}",
    "rl_config.vit_resource": "{num_npus: 1}",
    "rl_config.is_multimodal": "true",
    "rl_config.partial_rollout_max_split": "2",
    "rl_config.multi_turn_enable": "true",
}


def _override(name: str, value: str) -> str:
    section, _, key = name.partition(".")
    return f"{'megatron_training' if section == 'megatron' else section}.{key}={value}"


def test_every_generic_refusal_has_a_test_value():
    generic = {n for n, e in TABLE.items() if e.kind is Kind.REFUSED and not e.own_check}
    assert generic == set(REFUSED_VALUES)


@pytest.mark.parametrize("name", sorted(REFUSED_VALUES))
def test_a_refused_key_is_one_line_naming_it_and_mindspeed(name):
    cfg = load_config(TINY, [_override(name, REFUSED_VALUES[name])])
    lines = [p for p in check_config(cfg) if name.split(".", 1)[1] in p]
    assert len(lines) == 1, check_config(cfg)
    assert "\n" not in lines[0] and "backend: mindspeed" in lines[0] and lines[0].startswith("configs/")


def test_refusal_names_where_a_megatron_key_is_set():
    cfg = load_config(TINY, ["model.tiny_qwen.vocab_extra_ids=4"])
    where = "configs/grpo_trainer_tiny_cpu.yaml: model.tiny_qwen.vocab_extra_ids:"
    assert any(p.startswith(where) for p in check_config(cfg))


def test_a_refused_key_at_its_default_or_the_carried_out_value_passes():
    cfg = load_config(TINY, ["megatron_training.optimizer=adam", "rl_config.partial_rollout_max_split=1",
                             "megatron_training.skip_train=false"])  # fmt: skip
    assert check_config(cfg) == []


def test_a_reference_other_than_the_actor_is_refused():
    cfg = load_config(TINY, ["rl_config.use_integrated_worker=false", "+ref_config.model=tiny_qwen",
                             "+ref_config.load=/tmp/other_ref", "+reward_config.model=tiny_qwen"])  # fmt: skip
    assert any("ref_config.load" in p and "backend: mindspeed" in p for p in check_config(cfg))


def test_a_bias_in_every_linear_layer_is_refused():
    cfg = load_config(TINY, ["model.tiny_qwen.disable_bias_linear=false"])
    assert any("model.tiny_qwen.disable_bias_linear" in p for p in check_config(cfg))


@pytest.mark.parametrize("name", ["grpo_trainer_tiny_cpu", "grpo_trainer_qwen25_7b_A3"])
def test_shipped_configs_are_not_refused(name):
    assert check_config(load_config(name)) == []


# ----------------------------------------------------------------------------------------- validate
def test_validate_config_exits_2_for_a_key_nobody_implements(capsys):
    assert sweep_main(["validate", TINY, "rl_config.multi_turn_enable=true"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "rl_config.multi_turn_enable" in err[0] and "backend: mindspeed" in err[0]


def test_validate_config_applied_keys_exit_0(capsys):
    argv = ["validate", TINY, "rl_config.clip_higher_enable=true", "rl_config.clip_ratio_high=0.28",
            "--section", "rl_config"]  # fmt: skip
    assert sweep_main(argv) == 0, capsys.readouterr().err


def test_validate_config_for_mindspeed_has_its_own_checks(capsys):
    argv = ["validate", "grpo_trainer_qwen25_7b_A3", "rl_config.partial_rollout_max_split=2", "--section", "rl_config"]
    assert sweep_main(argv) == 2  # the embedded engine finishes every rollout
    assert sweep_main([*argv, "--backend", "mindspeed"]) == 0
    assert sweep_main(["validate", TINY, "--backend", "mindspeed", "--section", "rl_config"]) == 2  # bf16 false


def _spec(tmp_path: Path, search: str) -> Path:
    spec = tmp_path / "s.yaml"
    spec.write_text(
        f"study: s\nbase: {TINY}\nsearch:\n{search}\nobjective: {{metric: eval/acc_greedy, direction: maximize}}\n"
        "trials: 2\n"
    )
    return spec


@pytest.mark.parametrize("key, value, word", [
    ("rl_config.use_remove_padding", "choice(true, false)", "cannot change training"),
    ("generate_config.max_num_seqs", "choice(8, 64)", "cannot change training"),
    ("rl_config.use_swanlab", "choice(true, false)", "cannot change training"),
    ("rl_config.multi_turn_enable", "choice(true, false)", "refused by the embedded engine"),
])  # fmt: skip
def test_validate_spec_refuses_searching_what_the_engine_would_not_vary(tmp_path, capsys, monkeypatch, key, value,
                                                                        word):
    monkeypatch.chdir(tmp_path)
    assert sweep_main(["validate", str(_spec(tmp_path, f"  {key}: {value}"))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"search.{key}" in err[0] and word in err[0]


def test_searched_problems_pass_applied_keys():
    keys = ["rl_config.clip_ratio", "actor_config.lr", "layout", "engine.loss_agg_mode"]
    assert searched_problems(keys, "s.yaml") == []


def test_key_table_check_mode_passes():
    done = subprocess.run([sys.executable, str(REPO / "tools" / "key_table.py"), "--check"], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
