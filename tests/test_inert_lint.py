"""Inert-in-context lint (grpo/config/inert.py): one test per rule (it fires in its context and not outside
it), then where the warnings show: validate (config and spec), grpo-train's start, the study attr, the report."""

from __future__ import annotations

from pathlib import Path

import pytest
from report_fixtures import make_study

from grpo.cli import sweep_main
from grpo.config import load_config
from grpo.config.inert import RULES, STUDY_ATTR, key_name, lint, lint_points, override_keys
from grpo.engine.coverage import TABLE, Kind
from grpo.errors import UserError

TINY = "grpo_trainer_tiny_cpu"  # epochs 2, mini_batch_size 16 of 32 prompts, init_kl_coef 0.01, 8 samples
ON_POLICY = ["rl_config.epochs=1", "rl_config.mini_batch_size=32"]


def unchecked(section, **values) -> None:
    """Set values past pydantic's validation (contexts the schema or the config rules already refuse)."""
    object.__setattr__(section, "__dict__", {**section.__dict__, **values})


def inert(overrides: list[str], keys: list[str]) -> list[str]:
    """The searched keys ``lint`` warns about in the tiny config with ``overrides``."""
    return [line.split(":", 1)[0] for line in lint(load_config(TINY, overrides), keys)]


def test_every_rule_names_keys_of_the_table_and_has_a_test():
    for rule in RULES:
        assert all(k == "*" or k in TABLE for k in rule.keys + rule.unless), rule.name
        assert all(TABLE[k].kind is Kind.APPLIED for k in rule.keys if k != "*"), rule.name  # else refused
        assert f"test_rule_{rule.name}" in globals(), f"no test for rule {rule.name}"


CLIP = ["rl_config.clip_ratio", "rl_config.clip_ratio_low", "rl_config.clip_ratio_high", "rl_config.clip_higher_enable"]


def test_rule_on_policy_clip():
    assert inert(ON_POLICY, CLIP) == CLIP
    assert inert([], CLIP) == ["rl_config.clip_ratio_low", "rl_config.clip_ratio_high"]  # clip_higher_off only
    assert inert(["rl_config.epochs=1"], ["rl_config.clip_ratio"]) == []  # two mini batches: the ratio moves
    # GSPO's sequence ratio is 1 on-policy too, and then its token gradients are vanilla's.
    assert inert(ON_POLICY, ["engine.policy_loss"]) == ["engine.policy_loss"]
    assert inert([], ["engine.policy_loss"]) == []
    # Dynamic sampling: the prompts trained per iteration are filter_groups_train_batch_size.
    dapo = ["rl_config.epochs=1", "rl_config.mini_batch_size=16", "+rl_config.filter_groups_enable=true",
            "+rl_config.filter_groups_train_batch_size=16", "+rl_config.filter_groups_max_batches=4",
            "+rl_config.filter_groups_metric=acc"]  # fmt: skip
    assert inert(dapo, ["rl_config.clip_ratio"]) == ["rl_config.clip_ratio"]


def test_rule_kl_off():
    keys = ["rl_config.kl_penalty", "rl_config.use_kl_in_reward"]
    assert inert(["rl_config.init_kl_coef=0"], keys) == keys
    assert inert([], keys) == []  # init_kl_coef 0.01
    assert inert(["rl_config.init_kl_coef=0", "rl_config.kl_ctrl_type=adaptive"], keys) == []


def test_rule_kl_fixed():
    keys = ["rl_config.kl_target", "rl_config.kl_horizon"]
    assert inert([], keys) == keys
    assert inert(["rl_config.kl_ctrl_type=adaptive"], keys) == []


def test_rule_dynamic_sampling_off():
    keys = ["rl_config.filter_groups_metric", "rl_config.filter_groups_max_batches"]
    assert inert([], keys) == keys
    on = ["+rl_config.filter_groups_enable=true", "+rl_config.filter_groups_train_batch_size=16",
          "+rl_config.filter_groups_metric=acc", "+rl_config.filter_groups_max_batches=4"]  # fmt: skip
    assert inert(on, keys) == []


def test_rule_overlong_off():
    keys = ["rl_config.overlong_buffer", "rl_config.rollout_max_tokens"]
    assert inert([], keys) == keys
    on = ["+rl_config.overlong_buffer_enable=true", "+rl_config.overlong_buffer=8", "+rl_config.rollout_max_tokens=24"]
    assert inert(on, keys) == []


def test_rule_clip_higher_off():
    keys = ["rl_config.clip_ratio_low", "rl_config.clip_ratio_high"]
    assert inert([], keys) == keys
    assert inert(["+rl_config.clip_higher_enable=true"], keys) == []


def test_rule_clip_higher_on():
    assert inert(["+rl_config.clip_higher_enable=true"], ["rl_config.clip_ratio"]) == ["rl_config.clip_ratio"]
    assert inert([], ["rl_config.clip_ratio"]) == []


def test_rule_greedy_sampling():
    keys = ["generate_config.sampling_config.top_p", "generate_config.sampling_config.min_p",
            "generate_config.sampling_config.top_k"]  # fmt: skip
    # top_k 1 is greedy: top_p and min_p cannot matter; top_k itself is the knob that made it so.
    assert inert(["generate_config.sampling_config.top_k=1"], keys) == keys[:2]
    assert inert([], keys) == []
    # Temperature 0 (vLLM's greedy; the schema asks > 0, so set past validation): top_k is inert too.
    cfg = load_config(TINY)
    unchecked(cfg.generate_config.sampling_config, temperature=0)
    assert [line.split(":", 1)[0] for line in lint(cfg, keys)] == keys


def test_rule_single_sample():
    keys = ["actor_config.lr", "rl_config.clip_ratio", "rl_config.entropy_coeff", "rl_config.n_samples_per_prompt"]
    # group_norm with one sample is already a config error (rules.group_norm_needs_two_samples); the lint
    # covers any group estimator, so it is tested past that rule.
    with pytest.raises(UserError, match="must be >= 2"):
        load_config(TINY, ["rl_config.n_samples_per_prompt=1", "actor_config.micro_batch_size=8"])
    cfg = load_config(TINY)
    unchecked(cfg.rl_config, n_samples_per_prompt=1)
    assert [line.split(":", 1)[0] for line in lint(cfg, keys)] == ["actor_config.lr", "rl_config.clip_ratio"]
    assert inert([], keys) == []


def test_rule_lora_off():
    keys = ["megatron_training.lora_r", "megatron_training.lora_alpha"]
    assert inert([], keys) == keys
    on = ["megatron_training.lora_target_modules=[linear_qkv]", "megatron_training.lora_r=4"]
    assert inert(on, keys) == []


def test_key_names_and_override_keys():
    assert key_name("model.tiny_qwen.lora_r") == key_name("actor_config.lora_r") == "megatron.lora_r"
    assert override_keys(["a.b=1", "+c.d=x", "~e.f", "layout=tp1_pp1_cpu", "hydra/launcher=ray", "g"]) == [
        "a.b", "c.d", "layout"]


def test_lint_points_counts_the_points_a_rule_holds_in():
    configs = [load_config(TINY, ON_POLICY), load_config(TINY, ["rl_config.epochs=1"])]
    lines = lint_points(configs, ["rl_config.clip_ratio"])
    assert len(lines) == 1 and lines[0].startswith("search.rl_config.clip_ratio: cannot change training in 1 of 2")
    assert lint_points(configs[:1], ["rl_config.clip_ratio"])[0].startswith(
        "search.rl_config.clip_ratio: cannot change training in every checked point: training is fully on-policy")


# ------------------------------------------------------------------------------------------- surfaces
def test_validate_config_warns_about_an_inert_override(capsys):
    assert sweep_main(["validate", TINY, *ON_POLICY, "rl_config.clip_ratio=0.3", "--section", "rl_config"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "warning: configs/grpo_trainer_tiny_cpu.yaml: rl_config.clip_ratio: cannot change training in this config: "
        "training is fully on-policy (epochs 1, mini_batch_size 32 >= 32 prompts per iteration: one optimizer "
        "step), so every importance ratio is 1 and no clip applies"
    ]


def test_validate_spec_warns_and_preflight_keeps_the_lines(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "s.yaml"
    spec.write_text(
        f"study: s\nbase: {TINY}\noverrides: [rl_config.epochs=1, rl_config.mini_batch_size=32]\n"
        "search:\n  rl_config.clip_ratio: choice(0.1, 0.3)\n  actor_config.lr: choice(1e-4, 2e-4)\n"
        "objective: {metric: eval/acc_greedy, direction: maximize}\ntrials: 2\n"
    )
    assert sweep_main(["validate", str(spec)]) == 0
    err = capsys.readouterr().err
    assert f"warning: {spec}: search.rl_config.clip_ratio: cannot change training in every checked point" in err
    assert "actor_config.lr" not in err

    from grpo.sweep.backends import load_backend
    from grpo.sweep.spec.load import load_spec
    from grpo.sweep.run.preflight import preflight
    from grpo.sweep.spec.space import SearchSpace

    loaded = load_spec(str(spec))
    checks = preflight(loaded, SearchSpace.from_spec(loaded), load_backend(loaded), no_plan=True)
    assert len(checks.inert) == 1 and checks.inert[0].startswith("search.rl_config.clip_ratio:")
    assert f"{spec}: {checks.inert[0]}" in checks.warnings


def test_grpo_train_warns_at_start(capsys):
    from grpo.engine.cli import precheck

    precheck(["--config-name", TINY, *ON_POLICY, "rl_config.clip_ratio=0.3"])
    assert "warning: configs/grpo_trainer_tiny_cpu.yaml: rl_config.clip_ratio: cannot change training" in (
        capsys.readouterr().err)


def test_grpo_train_refuses_what_the_engine_would_not_carry_out():
    from grpo.engine.cli import precheck

    with pytest.raises(UserError, match=r"rl_config\.multi_turn_enable: .*backend: mindspeed"):
        precheck(["--config-name", TINY, "rl_config.multi_turn_enable=true"])


def test_the_report_shows_the_study_attr_in_its_why_section(tmp_path: Path):
    from grpo.report.html import write_report

    study = make_study(tmp_path, limit=3)
    line = "search.rl_config.clip_ratio: cannot change training in every checked point: training is fully on-policy"
    study.set_user_attr(STUDY_ATTR, [line])
    page = write_report(study, tmp_path / "report").read_text()
    why = page[page.index('id="why"'):]
    assert "Searched knobs that cannot change training" in why and line in why


def test_a_sweep_warns_when_it_starts_and_records_the_study_attr(tmp_path: Path):
    from sweep_helpers import load, run_cli, write_spec

    overrides = ["megatron_training.train_iters=3", "megatron_training.save_interval=3", *ON_POLICY]
    spec = write_spec(tmp_path, overrides=overrides, trials=1, concurrency=1)  # a stand-in backend: no training
    done = run_cli(["run", str(spec), "--no-report", "--quiet"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "search.rl_config.clip_ratio: cannot change training in every checked point" in done.stderr
    recorded = load(tmp_path).user_attrs[STUDY_ATTR]
    assert len(recorded) == 1 and recorded[0].startswith("search.rl_config.clip_ratio: cannot change training")


def test_grpo_train_warns_at_start_when_lora_rank_and_alpha_are_set_without_target_modules(capsys):
    from grpo.engine.cli import precheck

    precheck(["--config-name", "grpo_trainer_tiny_cpu", "megatron_training.lora_r=4", "megatron_training.lora_alpha=8"])
    err = capsys.readouterr().err
    for key in ("megatron_training.lora_r", "megatron_training.lora_alpha"):
        assert f"warning: configs/grpo_trainer_tiny_cpu.yaml: {key}: cannot change training" in err
    assert "lora_target_modules null" in err
