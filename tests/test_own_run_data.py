"""Datasets in the formats people have (issue 41 item 2), read by grpo.engine.datasets: GSM8K's ``#### N``, MATH's
last ``\\boxed{}``, verl's parquet, TRL's standard and conversational records, a field map; the held-out file;
``split=80,20,0`` unquoted; a record whose label cannot be read is one line naming the file and the record."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from grpo.config import load_config
from grpo.engine.data import train_and_eval_examples
from grpo.engine.datasets import detect_format, read_examples, write_verl_parquet
from grpo.errors import UserError

GSM8K = [
    {
        "question": "Raj has 19 coins and finds 22 more. How many coins?",
        "answer": "Raj has 19 + 22 = 41 coins.\n#### 41",
    },
    {"question": "A farm sells 1,200 eggs a day. How many in 2 days?", "answer": "1,200 * 2 = 2,400\n#### 2,400"},
]
MATH = [
    {"problem": "Simplify 2/4.", "solution": "We have $\\frac{2}{4} = \\boxed{\\frac{1}{2}}$.", "level": "Level 1"},
    {"problem": "Compute 1+1.", "solution": "First \\boxed{3} is wrong; so $1+1=\\boxed{2}$.", "type": "Algebra"},
]


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_gsm8k_labels_are_the_final_answer_never_the_solution(tmp_path):
    read = read_examples(jsonl(tmp_path / "gsm8k.jsonl", GSM8K))
    assert read.formats == ["gsm8k"]
    assert [e.label for e in read] == ["41", "2400"]  # commas dropped, as verl's gsm8k preprocessing does
    assert read[0].prompt == GSM8K[0]["question"] and read[0].extra == {"answer": GSM8K[0]["answer"]}


def test_math_labels_are_the_last_boxed_with_nested_braces(tmp_path):
    read = read_examples(jsonl(tmp_path / "math.jsonl", MATH))
    assert read.formats == ["math"] and [e.label for e in read] == ["\\frac{1}{2}", "2"]
    assert read[1].extra == {"solution": MATH[1]["solution"], "type": "Algebra"}


def test_verl_parquet_rows_keep_messages_ground_truth_and_columns(tmp_path):
    rows = [
        {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "system", "content": "Think."}, {"role": "user", "content": "What is 2+3?"}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "5"},
            "extra_info": {"index": 0, "split": "train"},
        }
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    (e,) = read_examples(tmp_path / "train.parquet")
    assert (e.prompt, e.label) == ("What is 2+3?", "5")
    assert e.messages == tuple(rows[0]["prompt"])
    assert e.extra["data_source"] == "openai/gsm8k" and e.extra["extra_info"] == {"index": 0, "split": "train"}


def test_trl_standard_and_conversational_records_pass_every_column(tmp_path):
    standard = {"prompt": "Solve 3*3.", "solution": "9", "difficulty": 2}
    chat = {"prompt": [{"role": "user", "content": "Solve 4*4."}], "solution": "16", "tags": ["x"]}
    assert detect_format(standard) == "trl" and detect_format(chat) == "trl-conversational"
    (s,) = read_examples(jsonl(tmp_path / "s.jsonl", [standard]))
    (c,) = read_examples(jsonl(tmp_path / "c.jsonl", [chat]))
    assert (s.prompt, s.label, s.messages, s.extra) == ("Solve 3*3.", "9", None, {"solution": "9", "difficulty": 2})
    assert (c.prompt, c.label, c.messages) == ("Solve 4*4.", "16", tuple(chat["prompt"]))
    assert c.extra == {"solution": "16", "tags": ["x"]}


def test_a_field_map_reads_any_columns_dotted_for_nested_ones(tmp_path):
    rows = [{"query": "Name 7.", "meta": {"gold": 7}}]
    (e,) = read_examples(jsonl(tmp_path / "x.jsonl", rows), fields={"prompt": "query", "label": "meta.gold"})
    assert (e.prompt, e.label, e.extra) == ("Name 7.", "7", {"meta": {"gold": 7}})
    with pytest.raises(UserError, match=r"x\.jsonl:1: megatron_training\.data_path: fields record: .*'meta\.nope'"):
        read_examples(tmp_path / "x.jsonl", fields={"prompt": "query", "label": "meta.nope"})


@pytest.mark.parametrize(
    ("rows", "why"),
    [
        (
            [GSM8K[0], {"question": "q", "answer": "no final answer here"}],
            r"gsm8k record: GSM8K answer has no '#### N'",
        ),
        ([MATH[0], {"problem": "p", "solution": "the answer is 3"}], r"math record: MATH solution has no \\boxed"),
        ([{"prompt": "p", "label": None}], r"mindspeed record: record has no label field"),
    ],
)
def test_a_record_whose_label_cannot_be_read_is_one_line_naming_file_and_record(tmp_path, rows, why):
    path = jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(UserError, match=f"^{path}:{len(rows)}: megatron_training.data_path: {why}") as err:
        read_examples(path)
    assert "\n" not in str(err.value)


def test_write_verl_parquet_is_read_back_the_same_and_carries_the_columns(tmp_path):
    examples = read_examples(jsonl(tmp_path / "gsm8k.jsonl", GSM8K))
    path = write_verl_parquet(list(examples), tmp_path / "train.parquet")
    row = pq.read_table(path).to_pylist()[0]
    assert row["prompt"] == [{"role": "user", "content": GSM8K[0]["question"]}]
    assert row["reward_model"]["ground_truth"] == "41" and row["data_source"] == "grpo_sweep"
    assert json.loads(row["extra_info"]["grpo_columns"])["answer"] == GSM8K[0]["answer"]
    back = read_examples(path)
    assert [(e.prompt, e.label) for e in back] == [(e.prompt, e.label) for e in examples]


def test_the_held_out_file_replaces_the_split_and_split_works_unquoted(tmp_path):
    train = jsonl(tmp_path / "train.jsonl", GSM8K * 5)
    test = jsonl(tmp_path / "test.jsonl", MATH)
    common = ["engine.task=dataset", f"megatron_training.data_path={train}"]
    cfg = load_config("grpo_trainer_tiny_cpu", [*common, "megatron_training.split=80,20,0"])  # unquoted
    assert cfg.megatron_training.split == "80,20,0"
    rows, held = train_and_eval_examples(cfg, tmp_path)
    assert (len(rows), len(held)) == (8, 2)
    cfg = load_config("grpo_trainer_tiny_cpu", [*common, f"engine.eval_data_path={test}"])
    rows, held = train_and_eval_examples(cfg, tmp_path)
    assert len(rows) == 10 and [e.label for e in held] == ["\\frac{1}{2}", "2"]
