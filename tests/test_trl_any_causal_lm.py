"""backend trl takes any causal LM transformers loads (issue 42 item 1), on an offline Llama folder
(tests/hf_llama_folder.py) the embedded engine cannot build: a real TRL trial trains the folder's own
LlamaForCausalLM and evaluates it on the held-out prompts (eval/* as on the engine), a retry resuming from its
save dir keeps the folder's weights as the reference; validate accepts the folder on trl and verl, refuses it on
embedded, and on trl refuses one whose weights transformers would not fully load. The HF evaluation path
(hf_policy.py) gives the engine's figures on a Qwen2: the same metrics and responses as the engine's model."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
import yaml
from hf_folder import make_qwen2_folder
from hf_llama_folder import make_llama_folder

from grpo.cli import sweep_main
from grpo.config import load_config
from grpo.engine.rollout import SamplingParams

pytest.importorskip("trl")
from grpo.sweep.backends.trl.backend import TrlBackend
from grpo.sweep.backends.trl.hf_policy import evaluate
from grpo.sweep.backends.trl.model import START_FILE, build_base, load_hf

TINY = "grpo_trainer_tiny_cpu"
HELD_OUT = 8


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    return make_llama_folder(tmp_path_factory.mktemp("hf") / "llama")


def _rows(path: Path, n: int, start: int = 0) -> Path:
    rows = [{"question": f"Raj has {a} coins and finds 3 more. How many?", "answer": f"{a} + 3 = {a + 3}\n#### {a + 3}"}
            for a in range(start, start + n)]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _run(tmp_path: Path, folder: Path, *extra: str) -> list[str]:
    """A dataset run of ``folder`` as is (no model.* override): 4 prompts x 4 samples, held-out file of 8."""
    return [
        f"actor_config.load={folder}", "engine.task=dataset",
        f"megatron_training.data_path={_rows(tmp_path / 'train.jsonl', 16)}",
        f"engine.eval_data_path={_rows(tmp_path / 'held_out.jsonl', HELD_OUT, 96)}",
        "megatron_training.global_batch_size=4", "rl_config.mini_batch_size=4", "rl_config.n_samples_per_prompt=4",
        "actor_config.micro_batch_size=16", "rl_config.epochs=1", "rl_config.shuffle_mini_batch=true",
        "generate_config.sampling_config.max_tokens=12", "rl_config.max_prompt_length=64",
        "generate_config.max_model_len=96", "megatron_training.seq_length=96", "actor_config.lr=1e-3",
        "engine.eval_every=1", "engine.device=cpu", "engine.keep_checkpoints=null", *extra,
    ]  # fmt: skip


def test_a_llama_folder_trains_on_trl_and_evaluates_as_itself(llama, tmp_path):
    from safetensors.torch import load_file

    save = tmp_path / "ckpt"
    cfg = load_config(TINY, _run(tmp_path, llama, "megatron_training.train_iters=2",
                                 "megatron_training.save_interval=2", f"actor_config.save={save}"))  # fmt: skip
    backend, reported = TrlBackend(), []
    assert backend.check(cfg) == []
    summary = backend.run(cfg, tmp_path / "run", lambda i, m: reported.append((i, m)) or False, False)
    assert [i for i, _ in reported] == [0, 1, 2] and summary["iterations"] == 2
    for _, metrics in reported:  # the engine's held-out metrics, on the Llama itself
        assert metrics["eval/prompts"] == HELD_OUT
        assert all(0 <= metrics[k] <= 1 for k in ("eval/acc", "eval/acc_greedy", "eval/strict_format"))
    assert "grpo/score/mean" in reported[1][1] and "actor/kl_loss" in reported[2][1]
    shown = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert {(r["iteration"], r["kind"]) for r in shown} == {(i, k) for i in (0, 1, 2) for k in ("greedy", "sampled")}
    trained = save / "checkpoint-2"
    assert json.loads((trained / "config.json").read_text())["model_type"] == "llama"
    before, after = load_file(llama / "model.safetensors"), load_file(trained / "model.safetensors")
    assert set(before) == set(after) and any(not torch.equal(before[k], after[k]) for k in before)
    assert (save / START_FILE).read_text() == str(llama.resolve())

    # A retry resumes from the save dir: the Llama again (its reference: the folder's weights), iteration 3 on.
    again: list[tuple[int, dict[str, float]]] = []
    resumed = load_config(TINY, _run(tmp_path, llama, "megatron_training.train_iters=3", f"actor_config.save={save}",
                                     f"actor_config.load={save}", "actor_config.finetune=false"))  # fmt: skip
    assert backend.check(resumed) == []
    summary = backend.run(resumed, tmp_path / "run", lambda i, m: again.append((i, m)) or False, True)
    assert [i for i, _ in again] == [3] and summary["start_iteration"] == 2 and "eval/acc_greedy" in again[0][1]


def _spec(tmp_path: Path, backend: str, overrides: list[str]) -> Path:
    spec = tmp_path / f"{backend}.yaml"
    spec.write_text(yaml.safe_dump({
        "study": f"llama_{backend}", "base": TINY, "backend": backend, "overrides": overrides,
        "search": {"rl_config.clip_ratio": "choice(0.2, 0.3)"}, "trials": 2,
        "objective": {"metric": "eval/acc_greedy", "direction": "maximize"},
    }))  # fmt: skip
    return spec


def test_validate_takes_the_folder_on_trl_and_refuses_it_on_embedded(llama, tmp_path, capsys):
    from safetensors.torch import load_file, save_file

    run = _run(tmp_path, llama)
    assert sweep_main(["validate", str(_spec(tmp_path, "trl", run))]) == 0
    capsys.readouterr()
    embedded = [o for o in run if "shuffle_mini_batch" not in o]
    assert sweep_main(["validate", str(_spec(tmp_path, "embedded", embedded))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{llama}/config.json is a llama model; the embedded engine builds Qwen2" in err[0]

    broken = tmp_path / "broken"  # a tensor gone: transformers would initialise it at random and train it
    broken.mkdir()
    for f in llama.iterdir():
        (broken / f.name).write_bytes(f.read_bytes())
    weights = load_file(llama / "model.safetensors")
    del weights["model.layers.1.mlp.up_proj.weight"]
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})
    assert sweep_main(["validate", str(_spec(tmp_path, "trl", _run(tmp_path, broken)))]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "actor_config.load" in err[0]
    assert "the weights lack model.layers.1.mlp.up_proj.weight, which transformers would initialise" in err[0]

    tokenizer_only = load_config(TINY, [*run[1:], f"megatron_training.tokenizer_name_or_path={llama}"])
    assert [p for p in TrlBackend().check(tokenizer_only) if "llama" in p] == [
        f"{tokenizer_only._source}: megatron_training.tokenizer_name_or_path: {llama}/config.json is a llama model; "
        f"backend trl trains another architecture than Qwen2 from its weights only: set actor_config.load={llama}"
    ]
    lora = load_config(TINY, [*run, "actor_config.lora_target_modules=[linear_qkv]"])
    assert TrlBackend().check(lora) == []  # Llama names its projections as Qwen2 does
    # Without a folder of its own the trial builds the engine's Qwen2: what it does not build is refused.
    qk_norm = load_config(TINY, ["model.tiny_qwen.qk_layernorm=true", "rl_config.shuffle_mini_batch=true"])
    assert TrlBackend().check(qk_norm) == [
        f"{qk_norm._source}: model.tiny_qwen.qk_layernorm: per-head query/key norms (Qwen3); backend trl builds the "
        "engine's Qwen2 from model.* (a Hugging Face folder of this architecture in actor_config.load runs as it is)"
    ]


def test_verl_validates_with_the_folder(llama, tmp_path):
    pytest.importorskip("verl")
    from verl.utils.config import omega_conf_to_dataclass

    from grpo.sweep.backends.verl import _validate
    from grpo.sweep.backends.verl.backend import VerlBackend

    cfg = load_config(TINY, [f"megatron_training.tokenizer_name_or_path={llama}"])  # verl's model.path
    assert VerlBackend().check(cfg) == []
    composed = _validate.validate(VerlBackend().launch_overrides(cfg, tmp_path / "run").overrides)
    model = omega_conf_to_dataclass(composed.actor_rollout_ref.model)  # HFModelConfig: loads config and tokenizer
    assert model.path == str(llama) and model.hf_config.model_type == "llama"


def test_the_hf_evaluation_gives_the_engines_figures_on_a_qwen2(tmp_path):
    """The same metrics and the same responses from the engine's Qwen2 (the weights copied in) and from the
    transformers model through hf_policy, greedy and sampled with every filter: the HF path means the same."""
    folder = make_qwen2_folder(tmp_path / "qwen", layers=2)
    cfg = load_config(TINY, _run(tmp_path, folder))
    base = build_base(cfg, tmp_path / "run", logging.getLogger("test"))
    model, _ = load_hf(base)
    sampling = SamplingParams(temperature=0.9, top_p=0.95, top_k=50, min_p=0.01, max_tokens=12)
    scoring = (["acc"], [1.0])
    engine = evaluate(base, model, sampling, 0, 4, scoring, tmp_path / "engine.jsonl")
    model.train()
    hf_base = type(base)(**{**base.__dict__, "evaluator": None})
    hf = evaluate(hf_base, model, sampling, 0, 4, scoring, tmp_path / "hf.jsonl")
    assert model.training  # the trainer's mode is given back
    assert hf == engine and engine["eval/prompts"] == HELD_OUT
    assert (tmp_path / "hf.jsonl").read_text() == (tmp_path / "engine.jsonl").read_text()
