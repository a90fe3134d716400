"""A user's reward function gets, unchanged, what its own engine gives it (issue 41 item 1).

TRL form: TRL 1.16's own ``GRPOTrainer._generate_and_score_completions`` over the user's dataset (loaded with
``datasets`` as a TRL user loads it) records what a function receives; the project's seam (``UserReward.score``)
given the same batch hands it equal arguments, for a standard and a conversational dataset; a real backend-trl
trainer (``build_trainer``) and a real embedded run give a conversational function the records' chat messages as
``prompts`` and ``[{"role": "assistant", ...}]`` completions. verl form: verl 0.9.1's ``NaiveRewardManager`` over a
verl parquet row and the seam pass equal ``data_source``, ``ground_truth`` and ``extra_info``."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from hf_folder import make_qwen2_folder

from grpo.config import load_config
from grpo.engine.datasets import read_examples
from grpo.engine.rewards import load_user_reward

trl = pytest.importorskip("trl", reason="trl not installed (pip install -e .[trl])")

REWARDS = """
CALLS = []

def chat_reward(prompts, completions, solution, **kwargs):  # written for a conversational TRL dataset
    CALLS.append({"prompts": prompts, "completions": completions, "solution": solution, **kwargs})
    assert all(isinstance(i, int) for ids in kwargs["completion_ids"] for i in ids)
    assert kwargs["trainer_state"].global_step >= 0
    return [0.75 if p[-1]["content"].endswith("?") and isinstance(c[0]["content"], str) else 0.0
            for p, c in zip(prompts, completions)]

def plain_reward(prompts, completions, solution, **kwargs):  # written for a standard TRL dataset
    CALLS.append({"prompts": prompts, "completions": completions, "solution": solution, **kwargs})
    return [0.5 if p.endswith("?") and isinstance(c, str) else 0.0 for p, c in zip(prompts, completions)]

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    CALLS.append({"data_source": data_source, "solution_str": solution_str, "ground_truth": ground_truth,
                  "extra_info": extra_info})
    return 1.0
"""
QUESTIONS = [(f"What is {a} plus {a + 1}?", str(2 * a + 1)) for a in range(3, 7)]
CONTEXT = ("trainer_state", "log_extra", "log_metric")
LOG = logging.getLogger("test_own_run_native_args")


@pytest.fixture(scope="module")
def own(tmp_path_factory) -> Path:
    """A Qwen2 folder, a standard and a conversational TRL jsonl, and the user's reward file."""
    root = tmp_path_factory.mktemp("own")
    make_qwen2_folder(root / "model")
    standard = [{"prompt": q, "solution": s, "difficulty": i} for i, (q, s) in enumerate(QUESTIONS)]
    chat = [
        {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": q}], "solution": s,
         "difficulty": i, **({"hint": "add them"} if i == 1 else {})}  # a column of one record only
        for i, (q, s) in enumerate(QUESTIONS)
    ]  # fmt: skip
    for name, rows in (("standard", standard), ("chat", chat)):
        (root / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "rewards.py").write_text(REWARDS)
    return root


def _chat_run(own: Path, ref: str) -> list[str]:
    """One iteration on the conversational file: 2 prompts, 2 responses each, scored by ``ref`` alone."""
    return [
        "engine.task=dataset", f"megatron_training.data_path={own / 'chat.jsonl'}",
        f"actor_config.load={own / 'model'}", f"rl_config.verifier_function=['{ref}']", "rl_config.verifier_weight=[1]",
        "megatron_training.split='100,0,0'", "megatron_training.global_batch_size=2", "rl_config.mini_batch_size=2",
        "rl_config.n_samples_per_prompt=2", "actor_config.micro_batch_size=4", "engine.eval_every=null",
        "generate_config.sampling_config.max_tokens=6", "rl_config.max_prompt_length=96",
        "generate_config.max_model_len=128", "engine.device=cpu", "megatron_training.train_iters=1",
    ]  # fmt: skip


def _trl_received(own: Path, fn: Any, data: Path, tmp_path: Path) -> dict[str, Any]:
    """What ``fn`` receives from TRL's own GRPOTrainer on the user's dataset: two prompts, two completions each."""
    import datasets
    import transformers

    model = transformers.Qwen2ForCausalLM.from_pretrained(own / "model", dtype="float32")
    tokenizer = transformers.AutoTokenizer.from_pretrained(own / "model", padding_side="left")
    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=2, max_completion_length=6,
        report_to="none", use_cpu=True, bf16=False, seed=0,
    )  # fmt: skip
    dataset = datasets.load_dataset("json", data_files=str(data), split="train")  # as a TRL user loads it
    trainer = trl.GRPOTrainer(
        model=model, reward_funcs=[fn], args=args, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.model.train()
    fn.__globals__["CALLS"].clear()
    trainer._generate_and_score_completions([dict(dataset[i]) for i in (0, 0, 1, 1)])
    (received,) = fn.__globals__["CALLS"]
    fn.__globals__["CALLS"].clear()
    return received


@pytest.mark.parametrize(("function", "data"), [("chat_reward", "chat"), ("plain_reward", "standard")])
def test_the_seam_gives_a_trl_function_what_trls_own_trainer_gives_it(own, tmp_path, function, data):
    reward = load_user_reward(f"{own / 'rewards.py'}:{function}")
    trl_got = _trl_received(own, reward.fn, own / f"{data}.jsonl", tmp_path)
    examples = [read_examples(own / f"{data}.jsonl")[i] for i in (0, 0, 1, 1)]
    texts = [c[0]["content"] if data == "chat" else c for c in trl_got["completions"]]
    values, _ = reward.score(
        [e.messages or e.prompt for e in examples], texts, [e.label for e in examples], [e.extra for e in examples],
        trl_got["completion_ids"], **{k: trl_got[k] for k in CONTEXT},
    )  # fmt: skip
    (ours,) = reward.fn.__globals__["CALLS"]
    assert values == [0.75 if data == "chat" else 0.5] * 4
    assert ours.pop("label") == trl_got["solution"]  # added: the dataset has no label column of its own
    assert ours == trl_got  # prompts as given, completions shaped as TRL shapes them, every column, the context
    hint = {"hint"} if data == "chat" else set()
    assert set(trl_got) == {"prompts", "completions", "completion_ids", "solution", "difficulty", *hint, *CONTEXT}
    if data == "chat":
        assert trl_got["hint"] == [None, None, "add them", "add them"]
        assert trl_got["prompts"][0] == [{"role": "system", "content": "Be brief."},
                                         {"role": "user", "content": QUESTIONS[0][0]}]  # fmt: skip
        assert all(c[0]["role"] == "assistant" and len(c) == 1 for c in trl_got["completions"])


def test_backend_trl_gives_a_conversational_function_the_records_messages(own, tmp_path):
    from grpo.engine.rollout import SamplingParams
    from grpo.sweep.backends.trl.backend import build_trainer

    ref = f"{own / 'rewards.py'}:chat_reward"
    cfg = load_config("grpo_trainer_tiny_cpu", _chat_run(own, ref))
    trainer = build_trainer(cfg, tmp_path, lambda i, m: False, LOG, SamplingParams).trainer
    calls = load_user_reward(ref).fn.__globals__["CALLS"]
    calls.clear()
    trainer.model.train()
    rows = [dict(trainer.train_dataset[i]) for i in (0, 0, 1, 1)]
    out = trainer._generate_and_score_completions(rows)
    (got,) = calls
    records = [json.loads(line) for line in (own / "chat.jsonl").read_text().splitlines()]
    by_question = {r["prompt"][-1]["content"]: r for r in records}
    assert got["prompts"] == [by_question[p[-1]["content"]]["prompt"] for p in got["prompts"]]  # as given
    assert len({p[-1]["content"] for p in got["prompts"]}) == 2 and got["prompts"][0] == got["prompts"][1]
    assert got["solution"] == [by_question[p[-1]["content"]]["solution"] for p in got["prompts"]]
    assert got["difficulty"] == [by_question[p[-1]["content"]]["difficulty"] for p in got["prompts"]]
    assert got["hint"] == [by_question[p[-1]["content"]].get("hint") for p in got["prompts"]]  # None where absent
    assert set(got) == {"prompts", "completions", "completion_ids", "solution", "difficulty", "hint", "label", *CONTEXT}
    decode = trainer.processing_class.batch_decode(got["completion_ids"], skip_special_tokens=True)
    assert got["completions"] == [[{"role": "assistant", "content": text}] for text in decode]
    assert got["trainer_state"] is trainer.state  # TRL's own transformers.TrainerState
    assert got["log_metric"] == trainer._log_metric and got["log_extra"] == trainer._log_completion_extra
    assert out["advantages"].shape == (4,)  # scored: 0.75 for every completion


def test_an_embedded_run_scores_with_a_conversational_trl_function(own, tmp_path):
    from grpo.sweep.backends.embedded import EmbeddedBackend

    cfg = load_config("grpo_trainer_tiny_cpu", _chat_run(own, f"{own / 'rewards.py'}:chat_reward"))
    calls = load_user_reward(f"{own / 'rewards.py'}:chat_reward").fn.__globals__["CALLS"]
    calls.clear()
    reported: list[tuple[int, dict[str, float]]] = []
    EmbeddedBackend().run(cfg, tmp_path / "run", lambda i, m: reported.append((i, m)) or False, False)
    assert [m["chat_reward_rewards/mean"] for i, m in reported if i > 0] == [0.75]
    (got,) = calls
    assert all(p[0] == {"role": "system", "content": "Be brief."} for p in got["prompts"])
    assert all(len(c) == 1 and c[0]["role"] == "assistant" for c in got["completions"])
    # optimizer steps done and in the run: epochs 2 x 1 mini batch x 1 iteration, as trainer.py counts them
    assert (got["trainer_state"].global_step, got["trainer_state"].max_steps) == (0, 2)
    assert len(got["completion_ids"]) == 4


def test_the_seam_gives_a_verl_function_what_verls_reward_manager_gives_it(own, tmp_path):
    """verl's NaiveRewardManager (verl/workers/reward_manager/naive.py: the keywords the reward loop's naive
    manager passes too) over a verl parquet row, a single-turn rollout's ``__num_turns__`` = 2."""
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    pytest.importorskip("verl")
    import pyarrow as pa
    import pyarrow.parquet as pq
    import transformers
    from verl import DataProto
    from verl.workers.reward_manager.naive import NaiveRewardManager

    row = {
        "data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": QUESTIONS[0][0]}], "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": QUESTIONS[0][1]},
        "extra_info": {"split": "train", "index": 7, "answer": "3 + 4 = 7\n#### 7"},
    }  # fmt: skip
    pq.write_table(pa.Table.from_pylist([row]), tmp_path / "train.parquet")
    reward = load_user_reward(f"{own / 'rewards.py'}:compute_score")
    tokenizer = transformers.AutoTokenizer.from_pretrained(own / "model")
    prompt, response = tokenizer("Q?")["input_ids"], tokenizer("The answer is 7.")["input_ids"]
    table = pq.read_table(tmp_path / "train.parquet").to_pandas()  # as verl's RLHFDataset reads it
    data = DataProto.from_dict(
        tensors={
            "prompts": torch.tensor([prompt]), "responses": torch.tensor([response]),
            "attention_mask": torch.ones(1, len(prompt) + len(response), dtype=torch.long),
        },
        non_tensors={
            "data_source": np.array([table["data_source"][0]], dtype=object),
            "reward_model": np.array([table["reward_model"][0]], dtype=object),
            "extra_info": np.array([table["extra_info"][0]], dtype=object),
            "__num_turns__": np.array([2]),
        },
    )  # fmt: skip
    calls = reward.fn.__globals__["CALLS"]
    calls.clear()
    NaiveRewardManager(tokenizer, num_examine=0, compute_score=reward.fn)(data)
    (example,) = read_examples(tmp_path / "train.parquet")
    reward.score([example.messages], [calls[0]["solution_str"]], [example.label], [example.extra])
    verl_got, ours = calls
    assert ours == verl_got
    assert ours["extra_info"] == {**row["extra_info"], "num_turns": 2, "rollout_reward_scores": {}}
