"""A Hugging Face model folder is the model (issue 42 item 1), on an offline-built Qwen2 folder (tests/hf_folder.py):
its config.json gives model.* (checked against transformers' own model: equal logits), a contradicting user value
and a bad folder are one line at validate, the embedded engine refuses other architectures, the prompts come from
the tokenizer's chat_template as transformers renders it, the engine trains the folder as is, and a trial failure
that is a config error is not retried."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from hf_folder import make_qwen2_folder

from grpo.cli import sweep_main
from grpo.config import load_config
from grpo.engine import build, train
from grpo.engine.check import check_config
from grpo.engine.data import Example
from grpo.engine.hf_checkpoint import load_weights
from grpo.engine.model import ModelArgs, Qwen2
from grpo.engine.prompt import build_prompt
from grpo.engine.tokenizer import build_task_tokenizer, load_tokenizer
from grpo.errors import UserError, is_config_failure

TINY = "grpo_trainer_tiny_cpu"
# A template unlike the built-in ChatML turn: a system turn, the bos token, a raise on a bad role.
OTHER_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('unknown role ' + m['role']) }}{% endif %}"
    "[{{ m['role'] | upper }}] {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}[ASSISTANT] {% endif %}"
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return make_qwen2_folder(tmp_path_factory.mktemp("hf") / "qwen")


def _copy(folder: Path, dest: Path) -> Path:
    shutil.copytree(folder, dest)
    return dest


def _gsm8k(path: Path, n: int = 24) -> Path:
    rows = [{"question": f"Raj has {a} coins and finds 3 more. How many?", "answer": f"{a} + 3 = {a + 3}\n#### {a + 3}"}
            for a in range(n)]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_fixture_is_a_folder_transformers_opens(folder):
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    assert type(model).__name__ == "Qwen2ForCausalLM" and tok.chat_template and len(tok) <= model.config.vocab_size
    assert sum(p.stat().st_size for p in folder.iterdir()) < 2_000_000


@pytest.mark.parametrize("key", ["actor_config.load", "megatron_training.tokenizer_name_or_path"])
def test_config_json_is_the_architecture(folder, key):
    """No model.* override: the config's model is the folder's, and the engine's Qwen2 built from it holds the
    folder's weights with transformers' logits."""
    import transformers

    cfg = load_config(TINY, [f"{key}={folder}"])
    arch, hf = cfg.model_arch, transformers.AutoConfig.from_pretrained(folder)
    assert (arch.num_layers, arch.hidden_size, arch.ffn_hidden_size) == (
        hf.num_hidden_layers, hf.hidden_size, hf.intermediate_size)  # fmt: skip
    assert (arch.num_attention_heads, arch.effective_query_groups) == (hf.num_attention_heads, hf.num_key_value_heads)
    assert (arch.padded_vocab_size, arch.max_position_embeddings) == (hf.vocab_size, hf.max_position_embeddings)
    assert arch.untie_embeddings_and_output_weights is (not hf.tie_word_embeddings)
    assert arch.rotary_base == hf.rope_parameters["rope_theta"] and arch.norm_epsilon == hf.rms_norm_eps
    model = Qwen2(ModelArgs.from_model_config(arch))
    load_weights(model, folder)
    reference = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ids = torch.tensor([[5, 17, 99, 200, 3]])
    with torch.no_grad():
        assert torch.allclose(model.eval()(ids), reference(ids).logits, atol=1e-5)


def test_a_user_value_that_contradicts_the_folder_is_one_line(folder, capsys):
    agreeing = load_config(TINY, [f"actor_config.load={folder}", "model.tiny_qwen.ffn_hidden_size=64"])
    assert agreeing.model_arch.ffn_hidden_size == 64
    code = sweep_main(["validate", TINY, f"actor_config.load={folder}", "model.tiny_qwen.ffn_hidden_size=176"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "model.tiny_qwen.ffn_hidden_size=176 contradicts" in err[0] and f"{folder}/config.json (64" in err[0]


def _no_weights(f: Path) -> str:
    (f / "model.safetensors").unlink()
    return "no *.safetensors weights"


def _truncated(f: Path) -> str:
    data = (f / "model.safetensors").read_bytes()
    (f / "model.safetensors").write_bytes(data[: len(data) // 2])
    return "truncated safetensors file"


def _lacking(f: Path) -> str:
    hf = json.loads((f / "config.json").read_text())
    del hf["num_hidden_layers"]
    (f / "config.json").write_text(json.dumps(hf))
    return "lacks num_hidden_layers"


def _shapes(f: Path) -> str:
    hf = json.loads((f / "config.json").read_text())
    hf.update(hidden_size=64, num_hidden_layers=3)
    (f / "config.json").write_text(json.dumps(hf))
    return "model.embed_tokens.weight is 384x32 but config.json says vocab_size=384, hidden_size=64"


def _missing_shard(f: Path) -> str:
    index = {"weight_map": {"model.embed_tokens.weight": "model-00002-of-00002.safetensors"}}
    (f / "model.safetensors.index.json").write_text(json.dumps(index))
    return "names model-00002-of-00002.safetensors, which is not in the folder"


def _not_json(f: Path) -> str:
    (f / "config.json").write_text("{oops")
    return "not valid JSON"


@pytest.mark.parametrize("breaks", [_no_weights, _truncated, _lacking, _shapes, _missing_shard, _not_json])
def test_a_bad_folder_is_one_line_at_validate(folder, tmp_path, capsys, breaks):
    bad = _copy(folder, tmp_path / "bad")
    why = breaks(bad)
    assert sweep_main(["validate", TINY, f"actor_config.load={bad}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "actor_config.load" in err[0] and str(bad) in err[0] and why in err[0], err


def test_a_vocabulary_smaller_than_the_tokenizer_is_one_line(tmp_path, capsys):
    small = make_qwen2_folder(tmp_path / "small_vocab", vocab_size=300)
    tokens = load_tokenizer(small).vocab_size
    capsys.readouterr()
    assert tokens > 300 and sweep_main(["validate", TINY, f"megatron_training.tokenizer_name_or_path={small}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"the tokenizer has {tokens} tokens but config.json vocab_size=300" in err[0]


def test_the_embedded_engine_refuses_another_architecture_in_one_line(folder, tmp_path):
    """A Llama folder composes (trl and verl load any causal LM); the embedded engine's check names it."""
    import transformers

    llama = tmp_path / "llama"
    sizes = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2}
    config = transformers.LlamaConfig(vocab_size=384, num_hidden_layers=2, max_position_embeddings=512, **sizes)
    transformers.LlamaForCausalLM(config).save_pretrained(llama)
    cfg = load_config(TINY, [f"actor_config.load={llama}"])
    assert cfg.model_arch.add_qkv_bias is False  # Llama's attention has no bias: read from config.json
    problems = [p for p in check_config(cfg) if "llama" in p]
    assert problems == [
        f"{cfg._source}: actor_config.load: {llama}/config.json is a llama model; the embedded engine builds "
        f"Qwen2/Qwen2.5 only (backend: trl or verl runs any causal language model)"
    ]
    assert not [p for p in check_config(load_config(TINY, [f"actor_config.load={folder}"])) if "builds" in p]


def test_prompts_are_the_tokenizer_chat_template_as_transformers_renders_it(tmp_path):
    import transformers

    other = make_qwen2_folder(tmp_path / "other", chat_template=OTHER_TEMPLATE)
    tok, fast = load_tokenizer(other), transformers.AutoTokenizer.from_pretrained(other)
    tok.special_tokens["bos_token"] = fast.bos_token = "<|endoftext|>"
    plain = Example("What is 2 + 3?", "5")
    chat = Example("What is 2 + 3?", "5", messages=({"role": "system", "content": "Be brief."},
                                                     {"role": "user", "content": "What is 2 + 3?"}))  # fmt: skip
    for example, messages in ((plain, [{"role": "user", "content": plain.prompt}]), (chat, list(chat.messages))):
        expected = fast.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert build_prompt(tok, example) == expected and expected.startswith("<|endoftext|>[")
    with pytest.raises(UserError, match="chat_template: unknown role tool"):
        build_prompt(tok, Example("x", "y", messages=({"role": "tool", "content": "x"},)))
    builtin = build_task_tokenizer()  # the built-in tokenizer keeps its ChatML user turn
    turn = "<|im_start|>user\n12+34=?<|im_end|>\n<|im_start|>assistant\n"
    assert build_prompt(builtin, Example("12+34=?", "46")) == turn
    (tmp_path / "saved").mkdir()
    builtin.save(tmp_path / "saved")  # a checkpoint's copy prompts the same, also one saved without the template
    meta = json.loads((tmp_path / "saved" / "tokenizer_config.json").read_text())
    assert meta.pop("chat_template")
    (tmp_path / "saved" / "tokenizer_config.json").write_text(json.dumps(meta))
    assert build_prompt(load_tokenizer(tmp_path / "saved"), Example("12+34=?", "46")) == turn
    base = load_tokenizer(make_qwen2_folder(tmp_path / "base", chat_template=False))
    assert build_prompt(base, plain) == plain.prompt  # a base model's folder: the text as is
    with pytest.raises(UserError, match="no chat_template"):
        build_prompt(base, chat)


def test_the_engine_trains_on_the_folder_as_is_and_resumes_from_its_save(folder, tmp_path):
    """No model.* override: the embedded engine trains the folder with its own tokenizer and template; a retry
    resuming from the run's save folder (no folder named any more) keeps the architecture and the tokenizer."""
    import transformers

    data = _gsm8k(tmp_path / "train.jsonl")
    run = [f"engine.task=dataset", f"megatron_training.data_path={data}", "megatron_training.save_interval=2",
           "megatron_training.global_batch_size=4", "rl_config.n_samples_per_prompt=4", "rl_config.mini_batch_size=2",
           "actor_config.micro_batch_size=4", "rl_config.max_prompt_length=64", "generate_config.max_model_len=96",
           "megatron_training.seq_length=96", "generate_config.sampling_config.max_tokens=16",
           "engine.eval_every=null", "engine.device=cpu", f"actor_config.save={tmp_path / 'ckpt'}"]  # fmt: skip
    cfg = load_config(TINY, [f"actor_config.load={folder}", "megatron_training.train_iters=2", *run])
    tok = build.tokenizer_for(cfg)
    train_set, _, prompt_ids, _ = build.prompts(cfg, tok, tmp_path / "ids", logging.getLogger("test"))
    fast = transformers.AutoTokenizer.from_pretrained(folder)
    first = train_set[0]
    expected = fast.apply_chat_template([{"role": "user", "content": first.prompt}], add_generation_prompt=True)
    assert prompt_ids[first.prompt] == list(getattr(expected, "input_ids", expected))
    assert train(cfg, run_dir=tmp_path / "run")
    resumed = load_config(TINY, [f"actor_config.load={tmp_path / 'ckpt'}", "megatron_training.train_iters=3", *run,
                                 "actor_config.finetune=false", "actor_config.no_load_optim=false",
                                 "actor_config.no_load_rng=false"])  # fmt: skip
    assert resumed.model_arch == cfg.model_arch
    assert build.tokenizer_for(resumed).fingerprint() == tok.fingerprint()
    assert train(resumed, run_dir=tmp_path / "run")
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1, 2, 3] and all("grpo/score/mean" in r for r in rows)


def test_a_trial_failure_that_is_a_config_error_is_not_retried(folder, tmp_path):
    """Read off the real exceptions: weights that do not fit the model a config built, a file not there."""
    model = Qwen2(ModelArgs(num_layers=2, hidden_size=32, ffn_hidden_size=64, num_attention_heads=4,
                            num_query_groups=2, padded_vocab_size=128))  # fmt: skip
    with pytest.raises(RuntimeError) as shape:
        model.load_state_dict({k: torch.zeros(500, 32) if "embed" in k else v for k, v in model.state_dict().items()})
    with pytest.raises(RuntimeError) as broadcast:
        _ = torch.zeros(128) + torch.zeros(500)
    with pytest.raises(FileNotFoundError) as missing:
        open(tmp_path / "gone.jsonl")  # noqa: SIM115
    tail = ["Traceback (most recent call last):", f"FileNotFoundError: {missing.value}"]
    assert is_config_failure(str(shape.value)) and is_config_failure(str(broadcast.value))
    assert is_config_failure("exit 1", tail) and is_config_failure("bad trial config: x.yaml: actor_config.load: ...")
    assert not is_config_failure("driver died: heartbeat lost", ["ray.exceptions.ActorDiedError: worker died"])


def test_rope_scaling_in_the_folder_is_derived_and_refused_by_the_embedded_engine(folder, tmp_path):
    scaled = _copy(folder, tmp_path / "yarn")
    hf = json.loads((scaled / "config.json").read_text())
    hf["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128}
    (scaled / "config.json").write_text(json.dumps(hf))
    cfg = load_config(TINY, [f"actor_config.load={scaled}"])
    arch = cfg.model_arch
    assert (arch.rope_scaling_type, arch.rope_scaling_factor, arch.original_max_position_embeddings) == ("yarn", 4.0, 128)
    assert [p for p in check_config(cfg) if "rope_scaling_type: RoPE scaling (yarn)" in p]


def test_a_trial_that_fails_on_a_shape_mismatch_is_not_retried(folder, tmp_path):
    """The issue's case, end to end: a folder whose weights pass validate's checks but not the model (one q_proj
    of the wrong shape) fails its trial with torch's own shape error, once, with no retry."""
    from safetensors.torch import load_file, save_file

    from sweep_helpers import load, run_cli, write_spec

    bad = _copy(folder, tmp_path / "bad")
    state = load_file(str(bad / "model.safetensors"))
    state["model.layers.1.self_attn.q_proj.weight"] = torch.zeros(16, 32)
    save_file(state, str(bad / "model.safetensors"), metadata={"format": "pt"})
    data = _gsm8k(tmp_path / "train.jsonl")
    overrides = [f"actor_config.load={bad}", "engine.task=dataset", f"megatron_training.data_path={data}",
                 "megatron_training.train_iters=2", "megatron_training.global_batch_size=4",
                 "rl_config.n_samples_per_prompt=4", "rl_config.mini_batch_size=2", "actor_config.micro_batch_size=4",
                 "rl_config.max_prompt_length=64", "generate_config.max_model_len=96",
                 "megatron_training.seq_length=96", "engine.eval_every=null", "engine.device=cpu"]  # fmt: skip
    write_spec(tmp_path, overrides=overrides, trials=1, concurrency=1, retries=2, backend="embedded",
               cluster={"address": "local", "num_cpus": 1})  # fmt: skip
    run = run_cli(["s.yaml", "--quiet", "--no-report"], tmp_path, timeout=600)
    assert run.returncode == 1 and "study s: 1 fail" in run.stdout, run.stdout + run.stderr
    trials = load(tmp_path).trials
    assert len(trials) == 1 and trials[0].state.name == "FAIL" and trials[0].user_attrs["retried"] is False
    assert "The size of tensor a" in trials[0].user_attrs["failure_reason"]


def test_a_trl_save_folder_gives_its_latest_checkpoints_architecture(folder, tmp_path):
    """TRL numbers checkpoints in optimizer steps (checkpoint-6 for iteration 3 at 2 steps each)."""
    save = tmp_path / "trl_save"
    for step in (4, 6):
        _copy(folder, save / f"checkpoint-{step}")
        (save / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    (save / "latest_checkpointed_iteration.txt").write_text("3")
    cfg = load_config(TINY, [f"actor_config.load={save}"])
    assert cfg.model_arch == load_config(TINY, [f"actor_config.load={folder}"]).model_arch
