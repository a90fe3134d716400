"""LoRA on the embedded engine through peft (grpo/engine/lora.py): MindSpeed-RL's lora_* keys, only the adapters
trained and checkpointed, the reference = the base with the adapters off, exact resume, export, refusals.

MindSpeed-RL's LoRA GRPO: configs/grpo_lora_qwen25_32b_A2.yaml and docs/zh/features/grpo_lora.md. The reference
mirrors mindspeed_rl/workers/integrated_worker.py ``IntegratedWorker.compute_ref_log_prob`` (the reference forward
under ``disable_adapter`` with ``share_backbone``); the merged weights mirror mindspeed_rl/workers/resharding/
vllm_weight_container.py (``alpha / r * B @ A`` added to the base weight)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import torch
import yaml

pytest.importorskip("peft")

from safetensors.torch import load_file

from grpo._fs import read_jsonl
from grpo.config import load_config
from grpo.engine import check_config, train
from grpo.engine import lora as lora_mod
from grpo.engine.hf_checkpoint import load_weights
from grpo.engine.model import Qwen2
from grpo.engine.rollout import generate
from grpo.engine.trainer import Run
from grpo.errors import UserError
from engine_helpers import comparable, small

LORA = [
    "megatron_training.lora_target_modules=[linear_qkv,linear_proj,linear_fc1,linear_fc2]",
    "megatron_training.lora_r=8",
    "megatron_training.lora_alpha=16",
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("grpo-cache")


def test_targets_map_to_the_qwen2_projections():
    cfg = load_config("grpo_trainer_tiny_cpu", LORA)
    lora = lora_mod.settings(cfg)
    assert lora is not None and (lora.r, lora.alpha, lora.scaling) == (8, 16, 2.0)
    assert lora.modules == ("down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj")
    only_attention = load_config("grpo_trainer_tiny_cpu", ["megatron_training.lora_target_modules=[linear_qkv]"])
    assert lora_mod.settings(only_attention).modules == ("k_proj", "q_proj", "v_proj")
    assert lora_mod.settings(load_config("grpo_trainer_tiny_cpu")) is None  # no targets: full fine-tuning


def new_run(overrides: list[str], run_dir: Path) -> Run:
    run_dir.mkdir(parents=True)
    return Run(load_config("grpo_trainer_tiny_cpu", overrides), run_dir)


def test_lora_trains_only_the_adapters_and_the_reference_is_the_base(cache_dir, tmp_path):
    run = new_run(small(cache_dir) + LORA, tmp_path / "lora")
    base = {k: v.clone() for k, v in lora_mod.base_state(run.policy).items()}
    adapters = {n: p.detach().clone() for n, p in run.policy.named_parameters() if p.requires_grad}
    assert adapters and all(".lora_" in n for n in adapters)
    assert isinstance(run.reference, lora_mod.BaseView)  # the policy itself, no second copy of the weights
    assert run.reference.lm_head.weight is run.policy.lm_head.weight
    assert {id(p) for g in run.optimizer.param_groups for p in g["params"]} == {
        id(p) for n, p in run.policy.named_parameters() if ".lora_" in n
    }  # the optimizer holds the adapters only
    rows = [run.iteration() for _ in range(3)]

    after = lora_mod.base_state(run.policy)
    assert all(torch.equal(base[k], after[k]) for k in base)  # the base did not move
    moved = [n for n, p in run.policy.named_parameters() if ".lora_" in n and not torch.equal(p, adapters[n])]
    assert {n for n in moved if ".lora_B." in n} == {n for n in adapters if ".lora_B." in n}  # every B trained

    # The reference log-probs are the base model's: a plain Qwen2 holding the base weights gives the same, exactly.
    plain = Qwen2(run.args)
    plain.load_state_dict(base)
    prompts = [run.prompt_ids[e.prompt] for e in run.train_set[:4]]
    gen = torch.Generator().manual_seed(0)
    tok = run.tokenizer
    batch = generate(run.policy, prompts, 4, run.sampling, tok.stop_ids, tok.pad_id, tok.vocab_size, gen)
    rows_all = torch.arange(batch.input_ids.shape[0])

    def logprobs(model):
        return run._forward_logprobs(model, batch, rows_all, 16, torch.zeros_like(batch.logprobs))

    reference = logprobs(run.reference)
    assert torch.equal(reference, logprobs(plain))
    assert not torch.allclose(reference, logprobs(run.policy))  # and the policy has moved away from it
    assert all(p.requires_grad == (".lora_" in n) for n, p in run.policy.named_parameters())  # adapters back on

    # Full fine-tuning from the same seed: the same first rollout (B starts at 0, so the LoRA policy starts as
    # the base), a different update (other parameters, other gradient norm), then different rollouts.
    full = new_run(small(cache_dir), tmp_path / "full")
    full_rows = [full.iteration() for _ in range(3)]
    assert rows[0]["grpo/score/mean"] == full_rows[0]["grpo/score/mean"]
    assert rows[0]["actor/grad_norm"] != full_rows[0]["actor/grad_norm"]
    assert comparable(rows[1:]) != comparable(full_rows[1:])


@pytest.fixture(scope="module")
def straight(cache_dir, tmp_path_factory):
    """4 LoRA iterations without a stop, checkpoints at 2 and 4 (every weight: lora_ckpt_filter false)."""
    root = tmp_path_factory.mktemp("lora-straight")
    train(load_config("grpo_trainer_tiny_cpu", small(cache_dir, **{"actor_config.save": root / "ckpt"}) + LORA),
          root / "run")  # fmt: skip
    return root


@pytest.mark.parametrize("ckpt_filter", [False, True])
def test_resume_equals_the_uninterrupted_run(cache_dir, tmp_path, straight, ckpt_filter):
    """2 iterations + resume 2 == 4 straight: the same metrics, adapters, merged weights and optimizer state.
    ``lora_ckpt_filter``: the checkpoint holds the adapters only, and the resume rebuilds the base (the warm
    start) and checks its fingerprint."""
    extra = [*LORA, f"megatron_training.lora_ckpt_filter={str(ckpt_filter).lower()}"]
    overrides = small(cache_dir, **{"actor_config.save": tmp_path / "ckpt"}) + extra
    train(load_config("grpo_trainer_tiny_cpu", [*overrides, "megatron_training.train_iters=2"]), tmp_path / "run")
    first = tmp_path / "ckpt" / "iter_0000002"
    files = sorted(p.name for p in first.iterdir())
    weights = {"model.safetensors", "reference.safetensors"}
    assert {"adapter", "lora.json", "optim.pt", "rng.pt", "trainer_state.json", "config.json"} <= set(files)
    assert (weights <= set(files)) is not ckpt_filter
    if ckpt_filter:  # adapters only: a few kB instead of the model
        assert sum(f.stat().st_size for f in (first / "adapter").iterdir()) < 0.2 * (
            straight / "ckpt" / "iter_0000002" / "model.safetensors"
        ).stat().st_size

    resumed = [*overrides, f"actor_config.load={tmp_path / 'ckpt'}", "actor_config.finetune=false"]
    summary = train(load_config("grpo_trainer_tiny_cpu", resumed), tmp_path / "run")
    assert summary["start_iteration"] == 2
    assert comparable(read_jsonl(tmp_path / "run" / "metrics.jsonl")) == comparable(
        read_jsonl(straight / "run" / "metrics.jsonl")
    )
    mine, theirs = tmp_path / "ckpt" / "iter_0000004", straight / "ckpt" / "iter_0000004"
    names = ["adapter/adapter_model.safetensors"] + ([] if ckpt_filter else sorted(weights))
    for name in names:
        a, b = load_file(str(mine / name)), load_file(str(theirs / name))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    optim_a, optim_b = torch.load(mine / "optim.pt"), torch.load(theirs / "optim.pt")
    assert optim_a["state"].keys() == optim_b["state"].keys()
    assert all(torch.equal(optim_a["state"][i][k], optim_b["state"][i][k]) for i in optim_b["state"] for k in
               ("exp_avg", "exp_avg_sq"))  # fmt: skip
    if ckpt_filter:  # a base that is not the one the adapters were trained on is refused
        meta = lora_mod.read_meta(first)
        (first / lora_mod.LORA_FILE).write_text(json.dumps(meta | {"fingerprint": "0" * 24}))
        again = [*overrides, f"actor_config.load={first}", "actor_config.finetune=false"]
        with pytest.raises(UserError, match="the base weights rebuilt from the warm start differ"):
            new_run(again, tmp_path / "again")


def test_loading_a_lora_checkpoint_the_wrong_way_is_a_user_error(cache_dir, tmp_path, straight):
    ckpt = straight / "ckpt"
    resume = ["actor_config.finetune=false", f"actor_config.load={ckpt}"]
    with pytest.raises(UserError, match="a LoRA checkpoint cannot resume as full fine-tuning"):
        new_run(small(cache_dir) + resume, tmp_path / "a")
    other_rank = [*LORA, "megatron_training.lora_r=4"]
    with pytest.raises(UserError, match="lora_r: the checkpoint's adapter has 8, this run 4"):
        new_run(small(cache_dir) + resume + other_rank, tmp_path / "b")


def test_finetune_from_a_lora_checkpoint_starts_from_the_merged_weights(cache_dir, tmp_path, straight):
    """A full fine-tuning run (or a new LoRA run) with ``finetune: true`` starts from base + alpha / r * B @ A;
    the checkpoint's model.safetensors holds exactly that, and peft's merge of its adapter gives the same."""
    folder = straight / "ckpt" / "iter_0000004"
    merged = load_file(str(folder / "model.safetensors"))
    load = ["actor_config.finetune=true", f"actor_config.load={folder}"]
    run = new_run(small(cache_dir) + load, tmp_path / "full")
    state = run.policy.state_dict()
    assert all(torch.equal(state[k], merged[k]) for k in merged)

    base = Qwen2(run.args)
    load_weights(base, folder, "reference.safetensors")
    peft_merged = lora_mod.merge_adapter(base, folder).state_dict()
    assert all(torch.allclose(peft_merged[k], merged[k], atol=1e-6) for k in merged)

    fresh = new_run(small(cache_dir) + load + LORA, tmp_path / "lora")
    assert all(torch.equal(v, merged[k]) for k, v in lora_mod.base_state(fresh.policy).items() if k in merged)


def test_the_checkpoint_opens_in_transformers_and_peft(straight):
    """model.safetensors is a Hugging Face Qwen2 folder of the merged policy; adapter/ is peft's adapter folder
    for the base (reference.safetensors): the two give the same logits."""
    transformers = pytest.importorskip("transformers")
    from peft import PeftModel

    folder = straight / "ckpt" / "iter_0000004"
    merged = transformers.Qwen2ForCausalLM.from_pretrained(str(folder)).eval()
    base_dir = folder.parent / "base-only"
    base_dir.mkdir()
    shutil.copy(folder / "config.json", base_dir / "config.json")
    shutil.copy(folder / "reference.safetensors", base_dir / "model.safetensors")
    with_adapter = PeftModel.from_pretrained(
        transformers.Qwen2ForCausalLM.from_pretrained(str(base_dir)), str(folder / "adapter")
    ).eval()
    ids = torch.tensor([[1, 5, 9, 12, 3, 7]])
    with torch.no_grad():
        a, b = merged(ids).logits, with_adapter(ids).logits
        with with_adapter.disable_adapter():
            base_logits = with_adapter(ids).logits
    assert torch.allclose(a, b, atol=1e-5)
    assert not torch.allclose(a, base_logits, atol=1e-5)


def test_validate_refuses_what_lora_would_not_carry_out(monkeypatch):
    def problems(*overrides):
        return check_config(load_config("grpo_trainer_tiny_cpu", list(overrides)))

    assert problems(*LORA) == []
    monkeypatch.setattr(lora_mod, "peft_installed", lambda: False)
    (line,) = problems(*LORA)
    assert "megatron_training.lora_target_modules: LoRA needs the peft package" in line
    assert "pip install 'grpo-sweep[lora]'" in line
    monkeypatch.undo()
    (line,) = problems("megatron_training.lora_target_modules=[linear_qkv,mlp]")
    assert "has no mlp; use linear_qkv, linear_proj, linear_fc1, linear_fc2" in line
    (line,) = problems("rl_config.share_backbone=true")
    assert "rl_config.share_backbone: the shared backbone works with LoRA only" in line
    assert problems(*LORA, "rl_config.share_backbone=true", "megatron_training.lora_fusion=true") == []
    (line,) = problems(*LORA, "megatron_training.lora_r=0")
    assert "lora_r: the LoRA rank must be >= 1" in line


def test_a_lora_winners_exported_config_trains_with_grpo_train(cache_dir, tmp_path):
    """``grpo-sweep best --export`` writes best_config.yaml (grpo.report.reproduce.config_yaml): for a LoRA
    trial it keeps the lora_* keys, and grpo-train trains LoRA from it."""
    from grpo.report.reproduce import config_yaml

    cfg = load_config("grpo_trainer_tiny_cpu", [*LORA, "megatron_training.lora_r=4"])
    study = optuna.create_study(study_name="lora_study", direction="maximize")
    study.add_trial(
        optuna.trial.create_trial(
            params={"megatron_training.lora_r": 4},
            distributions={"megatron_training.lora_r": optuna.distributions.CategoricalDistribution([4, 8])},
            value=0.5,
            user_attrs={"config": cfg.to_dict()},  # what the sweep records (trial_builder: first.to_dict())
        )
    )
    path = tmp_path / "export" / "best_config.yaml"
    path.parent.mkdir()
    path.write_text(config_yaml(study, study.trials[0], None, path))
    assert yaml.safe_load(path.read_text())["megatron_training"]["lora_r"] == 4
    assert "# it trains LoRA through peft: pip install 'grpo-sweep[lora]'" in path.read_text()
    exe = shutil.which("grpo-train", path=str(Path(sys.executable).parent)) or "grpo-train"
    overrides = small(cache_dir, **{"actor_config.save": tmp_path / "ckpt", "megatron_training.train_iters": 1})
    run = subprocess.run(
        [exe, "--config-dir", str(path.parent), "--config-name", "best_config", *overrides,
         f"hydra.run.dir={tmp_path / 'run'}"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    log = (tmp_path / "run" / "train.log").read_text()
    assert "LoRA (peft): r=4, alpha=16" in log
    assert (tmp_path / "ckpt" / "iter_0000001" / "adapter" / "adapter_model.safetensors").is_file()
