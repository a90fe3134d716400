"""A user's own reward functions (issue 41 item 1): TRL's batched form and verl's per-sample form, unchanged, scored
beside the verifiers (None left out, a dict's keys as metrics, async awaited); loaded by verl 0.9.1's own loader
from the generated module; every bad function or record one line at validate (exit 2); the study's fingerprint
covers the reward files; MindSpeed-RL refuses them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from sweep_helpers import run_cli

from grpo.config import load_config
from grpo.engine.rewards import load_user_reward, reward_means, score
from grpo.errors import UserCodeError, UserError, is_user_code_failure
from grpo.sweep.spec.load import load_spec
from grpo.sweep.study.store import fingerprint, reward_files

REWARDS = """
import asyncio

def const_reward(prompts, completions, **kwargs):
    return [0.25 for _ in completions]

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return {"score": 1.0 if ground_truth in solution_str else 0.0, "length": float(len(solution_str)), "note": "x"}

async def maybe(prompts, completions, **kwargs):
    await asyncio.sleep(0)
    return [None if "skip" in c else 1.0 for c in completions]

def by_column(prompts, completions, difficulty, **kwargs):
    return [float(d) for d in difficulty]

def chat_shape(prompts, completions, **kwargs):
    return [float(isinstance(p, list) and c[0]["role"] == "assistant") for p, c in zip(prompts, completions)]

def raises(prompts, completions, **kwargs):
    values = {}
    return [values["missing"] for _ in completions]

def not_a_number(prompts, completions, **kwargs):
    return ["high" for _ in completions]

def unclear(a, b):
    return 1.0

def generic(*args, **kwargs):
    return kwargs["ground_truth"] == "41"

def no_kwargs(prompts, completions):
    return [1.0 for _ in completions]
"""


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "my_rewards.py"
    path.write_text(REWARDS)
    return path


def test_both_forms_score_beside_a_verifier_none_left_out_dict_keys_as_metrics(user_file):
    names = ["acc", f"{user_file}:const_reward", f"{user_file}:compute_score", f"{user_file}:maybe"]
    texts = ["<answer>\\boxed{41}</answer>", "skip 40"]
    totals, per = score(texts, ["41", "41"], names, [1.0, 1.0, 0.5, 2.0])
    assert per["const_reward"] == [0.25, 0.25] and per["compute_score"] == [1.0, 0.0]
    assert per["maybe"][0] == 1.0 and per["maybe"][1] != per["maybe"][1]  # None -> NaN, out of the sum
    assert per["compute_score/length"] == [float(len(texts[0])), 7.0]  # numeric keys only ("note" is not)
    assert totals == [pytest.approx(1.0 + 0.25 + 0.5 + 2.0), pytest.approx(-1.0 + 0.25 + 0.0)]
    means = reward_means(per)
    assert means["const_reward_rewards/mean"] == 0.25 and means["maybe_rewards/mean"] == 1.0
    assert means["compute_score/length"] == pytest.approx((len(texts[0]) + 7) / 2)


def test_trl_functions_get_the_dataset_columns_and_conversational_completions(user_file):
    reward = load_user_reward(f"{user_file}:by_column")
    assert (reward.name, reward.form) == ("by_column", "trl")
    values, _ = reward.score(["p", "q"], ["a", "b"], ["1", "2"], [{"difficulty": 3}, {"difficulty": 5}])
    assert values == [3.0, 5.0]
    chat = load_user_reward(f"{user_file}:chat_shape")
    values, _ = chat.score([[{"role": "user", "content": "hi"}]], ["ok"], ["x"], [{}])
    assert values == [1.0]  # TRL's conversational shape: completions as assistant messages


def test_the_form_is_read_from_the_signature_or_stated(user_file):
    assert load_user_reward(f"{user_file}:compute_score").form == "verl"
    stated = load_user_reward(f"{user_file}:generic@verl")  # *args, **kwargs: the signature cannot tell
    assert stated.form == "verl" and stated.score(["p"], ["c"], ["41"], [{}])[0] == [1.0]


@pytest.mark.parametrize(
    ("ref", "why"),
    [
        ("nope.py:f", r"nope\.py: no such file"),
        ("{file}:absent", r"my_rewards\.py has no 'absent'"),
        ("{file}:unclear", r"its signature tells neither form; state it: .*unclear@trl .* or .*unclear@verl"),
        ("{file}:no_kwargs", r"a TRL reward function takes \*\*kwargs"),
        ("{file}:unclear@trl", r"a TRL reward function takes \*\*kwargs"),
        ("no_such_package_x.mod:f", r"no_such_package_x\.mod: importing it failed: ModuleNotFoundError"),
    ],
)
def test_a_function_that_cannot_be_loaded_is_one_line(user_file, ref, why):
    with pytest.raises(UserError, match=f"^rl_config.verifier_function: .*{why}") as err:
        load_user_reward(ref.format(file=user_file), user_file.parent)
    assert "\n" not in str(err.value)


def test_a_broken_file_names_the_line(tmp_path):
    (tmp_path / "broken.py").write_text("def f(prompts, completions, **kw):\n    return [\n")
    with pytest.raises(UserError, match=r"broken\.py: importing it failed: SyntaxError: .* \(line 2\)"):
        load_user_reward("broken.py:f", tmp_path)


@pytest.mark.parametrize(
    ("name", "why"),
    [("raises", r"KeyError: 'missing' \(my_rewards\.py line \d+: return \[values\[.missing.\]"),
     ("not_a_number", r"returned str 'high' for sample 0, not a number")],
)  # fmt: skip
def test_a_function_failing_in_a_trial_is_a_user_code_error_that_is_not_retried(user_file, name, why):
    with pytest.raises(UserCodeError, match=f"^user code failed: reward function .*:{name}: {why}") as err:
        score(["a"], ["1"], [f"{user_file}:{name}"], [1.0])
    assert is_user_code_failure(f"UserCodeError: {err.value}")
    assert is_user_code_failure("exit code 1", ["...", f"grpo.errors.UserCodeError: {err.value}"])
    assert not is_user_code_failure("CUDA out of memory", ["RuntimeError: NCCL timeout"])


def test_verl_loads_the_generated_module_with_its_own_loader_and_scores_both_forms(user_file, tmp_path):
    verl_reward = pytest.importorskip("verl.trainer.ppo.reward")
    from grpo.engine.datasets import read_examples, write_verl_parquet
    from grpo.sweep.backends.verl import _validate
    from grpo.sweep.backends.verl._reward import reward_settings

    names = ["acc", f"{user_file}:const_reward", f"{user_file}:compute_score"]
    cfg = load_config(
        "grpo_trainer_tiny_cpu",
        [f"rl_config.verifier_function=[{','.join(repr(n) for n in names)}]", "rl_config.verifier_weight=[1,1,1]"],
    )
    settings = reward_settings(cfg, tmp_path / "run")
    composed = _validate.compose([f"{k}={v}" for k, v in settings.items()])  # keys of verl's own config
    compute_score = verl_reward.get_custom_reward_fn(composed)
    (tmp_path / "d.jsonl").write_text(json.dumps({"question": "19+22?", "answer": "19 + 22 = 41\n#### 41"}) + "\n")
    row = write_verl_parquet(list(read_examples(tmp_path / "d.jsonl")), tmp_path / "d.parquet")
    import pyarrow.parquet as pq

    record = pq.read_table(row).to_pylist()[0]
    out = compute_score(  # as verl's naive reward manager calls it
        data_source=record["data_source"],
        solution_str="<think>x</think><answer>\\boxed{41}</answer>",
        ground_truth=record["reward_model"]["ground_truth"],
        extra_info=record["extra_info"],
    )
    assert out["acc_rewards"] == 1.0 and out["const_reward_rewards"] == 0.25 and out["compute_score_rewards"] == 1.0
    assert out["acc"] == 1.0  # correct (is_correct): verl's held-out acc, the engine's eval/acc
    assert out["score"] == pytest.approx(2.25) and "compute_score/length" in out


def test_mindspeed_refuses_a_user_function_in_one_line(user_file):
    from grpo.sweep.backends.mindspeed.backend import MindSpeedBackend

    cfg = load_config(
        "grpo_trainer_tiny_cpu",
        [f"rl_config.verifier_function=[acc,'{user_file}:const_reward']", "rl_config.verifier_weight=[1,1]"],
    )
    lines = [p for p in MindSpeedBackend().config_problems(cfg) if "verifier_function" in p]
    assert len(lines) == 1 and "MindSpeed-RL has no reward hook" in lines[0]


def _spec(tmp_path: Path, functions: list[str], data: list[dict], backend: str = "embedded", *extra: str) -> Path:
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in data))
    spec = {
        "study": "own",
        "base": "grpo_trainer_tiny_cpu",
        "backend": backend,
        "overrides": [
            "engine.task=dataset",
            f"megatron_training.data_path={tmp_path / 'train.jsonl'}",
            f"rl_config.verifier_function=[{','.join(repr(f) for f in functions)}]",
            f"rl_config.verifier_weight=[{','.join('1' for _ in functions)}]",
            *extra,
        ],
        "search": {"rl_config.clip_ratio": "choice(0.2, 0.3)"},
        "objective": {"metric": "grpo/score/mean", "direction": "maximize", "reduce": "last"},
        "trials": 2,
    }
    path = tmp_path / "own.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


GSM = [{"question": "Raj has 19 coins and finds 22 more?", "answer": "19 + 22 = 41\n#### 41"}] * 4


def test_verl_validate_shows_the_format_the_first_record_and_what_each_function_returns(user_file, tmp_path):
    pytest.importorskip("verl")
    functions = ["acc", "my_rewards.py:const_reward", "my_rewards.py:compute_score"]  # both forms, on verl
    batch = ["megatron_training.global_batch_size=4", "rl_config.mini_batch_size=4", "actor_config.micro_batch_size=8"]
    spec = _spec(tmp_path, functions, GSM, "verl", *batch, f"engine.eval_data_path={tmp_path / 'train.jsonl'}")
    done = run_cli(["validate", str(spec)], cwd=tmp_path.parent)  # the reward file: relative to the spec's folder
    assert done.returncode == 0, done.stderr
    out = " ".join(done.stdout.split())
    assert "format gsm8k; first: prompt 'Raj has 19 coins and finds 22 more?', label '41'" in out
    assert "reward const_reward (trl form): [0.25, 0.25, 0.25] on the first 3 records" in out
    assert "reward compute_score (verl form): [1, 1, 1] on the first 3 records; also compute_score/length" in out


@pytest.mark.parametrize(
    ("functions", "data", "why"),
    [
        (["my_rewards.py:raises"], GSM, r"own\.yaml: rl_config\.verifier_function\[0\]: scoring the first 3 records: "
         r"user code failed: reward function .*my_rewards\.py:raises: KeyError: 'missing' \(my_rewards\.py line"),
        (["broken.py:f"], GSM, r"own\.yaml: rl_config\.verifier_function\[0\]: .*broken\.py: importing it failed: "
         r"NameError: name 'undefined_name' is not defined \(line 1\)"),
        (["my_rewards.py:exits"], GSM, r"own\.yaml: rl_config\.verifier_function\[0\]: .*my_rewards\.py:exits: "
         r"importing the reward functions ended the process"),
        (["acc"], [*GSM, {"question": "q", "answer": "no answer"}], r"train\.jsonl:5: megatron_training\.data_path: "
         r"gsm8k record: GSM8K answer has no '#### N'"),
        (["acc"], [{"prompt": "p", "difficulty": 1}], r"own\.yaml: rl_config\.verifier_function: acc scores against "
         r"a label, but .*train\.jsonl has no label column"),
    ],
)  # fmt: skip
def test_bad_functions_and_records_are_one_line_at_validate(user_file, tmp_path, functions, data, why):
    (tmp_path / "broken.py").write_text("undefined_name\n")
    if "my_rewards.py:exits" in functions:
        user_file.write_text(REWARDS + "\nimport os\nos._exit(3)\n")
    done = run_cli(["validate", str(_spec(tmp_path, functions, data))], cwd=tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert __import__("re").search(why, lines[0]), lines[0]


def test_the_fingerprint_covers_the_reward_files_contents(user_file, tmp_path):
    spec = load_spec(_spec(tmp_path, ["acc", "my_rewards.py:const_reward"], GSM))
    before = fingerprint(spec)
    assert fingerprint(spec) == before
    user_file.write_text(REWARDS.replace("0.25", "0.5"))
    assert fingerprint(spec) != before
    assert reward_files(spec) == {"my_rewards.py:const_reward": hashlib.sha256(user_file.read_bytes()).hexdigest()[:16]}
    assert reward_files(load_spec(_spec(tmp_path, ["acc"], GSM))) == {}  # none: earlier studies' fingerprints hold
