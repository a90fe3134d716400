"""`grpo-sweep init NAME --backend B [--model DIR] [--data FILE] [--eval-data FILE] [--reward FILE:FUNCTION]`
(issue 42 item 3): a spec per backend that validates as written, comments naming each key in the user's engine
(TRL's names are GRPOConfig's own fields), ranges by model size, refusals in one line with nothing written, and
the demo of the issue run to a report on a CPU."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from hf_folder import make_qwen2_folder
from sweep_helpers import load, run_cli, states

from grpo.cli import sweep_main
from grpo.sweep.commands.init import LR_RANGES, _lr_range, parameter_count

KNOBS = ["actor_config.lr", "rl_config.init_kl_coef", "rl_config.clip_ratio", "rl_config.n_samples_per_prompt",
         "generate_config.sampling_config.temperature"]  # fmt: skip


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return make_qwen2_folder(tmp_path_factory.mktemp("hf") / "model")


@pytest.fixture
def user_dir(tmp_path, model, monkeypatch) -> Path:
    """What a user has: a model folder, GSM8K-style train and test files, a TRL-style reward function."""
    (tmp_path / "model").symlink_to(model, target_is_directory=True)
    for name, numbers in (("train.jsonl", range(1, 41)), ("test.jsonl", range(50, 58))):
        rows = [{"question": f"Raj has {a} coins and finds 2 more. How many coins?", "answer": f"{a}+2={a + 2}\n#### {a + 2}"}
                for a in numbers]  # fmt: skip
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "rewards.py").write_text("def score(prompts, completions, **kwargs):\n    return [0.5] * len(completions)\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


FULL = ["--model", "model", "--data", "train.jsonl", "--eval-data", "test.jsonl", "--reward", "rewards.py:score"]


@pytest.mark.parametrize(
    ("backend", "flags"),
    [
        ("embedded", []),
        ("embedded", ["--data", "train.jsonl"]),  # the built-in tiny model on your data: lengths for real prompts
        ("embedded", FULL),
        ("trl", []),
        ("trl", FULL),
        ("verl", FULL),
        ("verl", ["--model", "model", "--data", "train.jsonl"]),
        ("mindspeed", []),
        ("mindspeed", ["--model", "model", "--data", "data/prefix"]),
    ],
)
def test_init_writes_a_spec_that_validates_as_written(user_dir, capsys, backend, flags):
    assert sweep_main(["init", "mine", "--backend", backend, *flags]) == 0
    spec = yaml.safe_load((user_dir / "mine.yaml").read_text())
    assert spec["study"] == "mine" and spec["backend"] == backend and list(spec["search"]) == KNOBS
    assert [p.name for p in user_dir.iterdir() if p.name.startswith(".")] == []  # no temporary file left
    capsys.readouterr()
    assert sweep_main(["validate", "mine.yaml"]) == 0, capsys.readouterr().err
    assert "0 pruned before launch" in capsys.readouterr().out


def test_every_key_is_commented_with_its_name_in_trl_and_verl(user_dir):
    import trl

    fields = {f.name for f in dataclasses.fields(trl.GRPOConfig)}
    for backend in ("trl", "verl"):
        assert sweep_main(["init", backend, "--backend", backend, *FULL]) == 0
        lines = (user_dir / f"{backend}.yaml").read_text().splitlines()
        search = lines[lines.index("search:") + 1 : lines.index("search:") + 6]
        names = [line.split("# ")[1] for line in search]
        if backend == "trl":
            assert names == ["TRL: learning_rate", "TRL: beta", "TRL: epsilon", "TRL: num_generations", "TRL: temperature"]
            assert {n.removeprefix("TRL: ") for n in names} <= fields  # GRPOConfig's own fields
        else:
            assert names[0] == "verl: actor_rollout_ref.actor.optim.lr" and names[3] == "verl: actor_rollout_ref.rollout.n"
        overrides = [line for line in lines if line.startswith("  - ")]
        assert overrides and all("  # " in line for line in overrides)
    assert "# MindSpeed-RL: rl_config.clip_ratio" in _written(user_dir, "embedded")


def _written(user_dir: Path, backend: str) -> str:
    assert sweep_main(["init", f"x_{backend}", "--backend", backend]) == 0
    return (user_dir / f"x_{backend}.yaml").read_text()


def test_init_never_overwrites(user_dir, capsys):
    (user_dir / "demo.yaml").write_text("mine\n")
    assert sweep_main(["init", "demo", "--backend", "trl"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: demo.yaml: grpo-sweep init: the file exists; init never overwrites (pick another NAME)"]
    assert (user_dir / "demo.yaml").read_text() == "mine\n"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["init", "a b", "--backend", "trl"], "study names use letters"),
        (["init", "d", "--backend", "trl", "--reward", "rewards.py"], "is not FILE.py:FUNCTION"),
        (["init", "d", "--backend", "trl", "--reward", "nope.py:score"], "nope.py: grpo-sweep init: --reward: no such"),
        (["init", "d", "--backend", "trl", "--data", "missing.jsonl"], "missing.jsonl: grpo-sweep init: --data"),
        (["init", "d", "--backend", "trl", "--model", "train.jsonl"], "--model: not a Hugging Face model folder"),
        (["init", "d", "--backend", "verl"], "--model: backend verl needs a model folder"),
        (["init", "d", "--backend", "mindspeed", "--reward", "rewards.py:score"], "MindSpeed-RL has no reward hook"),
        (["init", "d", "--backend", "mindspeed", "--eval-data", "test.jsonl"], "runs no held-out evaluation"),
        (["init", "d", "--backend", "slime"], "invalid choice: 'slime'"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(user_dir, capsys, args, says):
    before = sorted(p.name for p in user_dir.iterdir())
    assert sweep_main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert sorted(p.name for p in user_dir.iterdir()) == before


def test_a_broken_model_folder_is_refused_by_init(user_dir, tmp_path_factory, capsys):
    broken = make_qwen2_folder(tmp_path_factory.mktemp("hf") / "broken")
    (broken / "model.safetensors").unlink()
    assert sweep_main(["init", "d", "--backend", "trl", "--model", str(broken)]) == 2
    assert "no *.safetensors weights" in capsys.readouterr().err and not (user_dir / "d.yaml").exists()


@pytest.mark.parametrize("tie", [True, False])
def test_the_model_size_is_transformers_parameter_count(tmp_path, tie):
    import transformers

    folder = make_qwen2_folder(tmp_path / "m", tie_word_embeddings=tie, hidden_size=64, intermediate_size=96)
    hf = json.loads((folder / "config.json").read_text())
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    biases = sum(p.numel() for n, p in model.named_parameters() if n.endswith("bias"))
    norms = sum(p.numel() for n, p in model.named_parameters() if "norm" in n)
    assert parameter_count(hf) == model.num_parameters() - biases - norms  # matrices only: biases/norms are tiny
    assert _lr_range(None) == _lr_range(parameter_count(hf)) == LR_RANGES[0][1]
    assert _lr_range(500_000_000) == (3e-7, 1e-5) and _lr_range(7_000_000_000) == (1e-7, 3e-6)


def test_the_issue_demo_runs_to_a_report_on_a_cpu(user_dir):
    """`grpo-sweep init demo --backend trl --model M --data D --reward R` then `grpo-sweep demo.yaml`."""
    init = run_cli(["init", "demo", "--backend", "trl", "--model", "model", "--data", "train.jsonl",
                    "--reward", "rewards.py:score"], user_dir)  # fmt: skip
    assert init.returncode == 0, init.stderr
    run = run_cli(["demo.yaml", "--quiet"], user_dir, timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr
    assert (user_dir / "reports" / "demo" / "index.html").is_file()
    assert states(load(user_dir, "demo")) == {"COMPLETE": 4}
    metrics = [json.loads(line) for f in (user_dir / "studies" / "demo" / "trials").glob("*/metrics.jsonl")
               for line in f.read_text().splitlines()]  # fmt: skip
    assert metrics and all(m["score_rewards/mean"] == 0.5 for m in metrics if "score_rewards/mean" in m)
    assert all("eval/acc" in m for m in metrics if m["iteration"] % 2 == 0)  # held out: the split's part


@pytest.mark.parametrize("backend", ["embedded", "trl"])
def test_a_larger_model_gets_the_gpu_base_and_its_ranges(user_dir, capsys, backend):
    """A folder of 500M parameters (stated: the fixture's weights stand in) on the GPU base, lengths cut to the
    folder's 512 positions; the spec validates on that backend."""
    from grpo.sweep.commands.init import Choices, spec_text

    choices = Choices("big", user_dir / "big.yaml", backend, "model", 500_000_000, 512, "train.jsonl", None, None)
    (user_dir / "big.yaml").write_text(spec_text(choices))
    spec = yaml.safe_load((user_dir / "big.yaml").read_text())
    assert spec["base"] == "grpo_trainer_gpu" and "cluster" in spec and "num_cpus" not in spec["cluster"]
    assert spec["search"]["actor_config.lr"] == "tag(log, interval(3e-07, 1e-05))"
    assert spec["search"]["rl_config.n_samples_per_prompt"] == "choice(4, 8, 16)"
    assert "generate_config.max_model_len=512" in spec["overrides"]
    capsys.readouterr()
    assert sweep_main(["validate", "big.yaml"]) == 0, capsys.readouterr().err
