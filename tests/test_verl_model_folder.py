"""backend verl trains the model the config names, read from what verl resolves: a Hugging Face folder in
``actor_config.load`` is verl's ``actor_rollout_ref.model.path`` (its weights, config.json and tokenizer, the folder
grpo.config.hf_model reads the architecture keys from), built by verl's own ``HFModelConfig``; a different tokenizer
folder beside it is honoured only where verl's vLLM rollout would read the same tokenizer, else refused in one line;
a verl save folder in ``load`` is a resume, as before. And a spec metric verl never reports is refused at validate."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grpo.config import load_config
from grpo.sweep.backends._base import TrialFailed
from grpo.sweep.backends.verl import _validate
from grpo.sweep.backends.verl.backend import VerlBackend

sys.path.insert(0, str(Path(__file__).parent))
from hf_folder import make_qwen2_folder  # noqa: E402

pytest.importorskip("verl")
TINY = "grpo_trainer_tiny_cpu"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return make_qwen2_folder(tmp_path_factory.mktemp("hf") / "qwen", max_positions=256)


def _model(cfg, run_dir: Path):
    """verl's HFModelConfig of the trial's job (its overrides composed and validated by verl), and the launch."""
    from verl.utils.config import omega_conf_to_dataclass

    launch = VerlBackend().launch_overrides(cfg, run_dir)
    composed = _validate.validate(launch.overrides)
    return omega_conf_to_dataclass(composed.actor_rollout_ref.model), launch


def test_a_load_folder_is_the_model_verl_trains(folder, tmp_path):
    cfg = load_config(TINY, [f"actor_config.load={folder}"])  # no tokenizer key: the folder is the model
    assert VerlBackend().check(cfg) == []
    model, launch = _model(cfg, tmp_path / "run")
    assert Path(model.local_path) == folder and Path(model.local_tokenizer_path) == folder
    assert model.hf_config.max_position_embeddings == 256 and model.hf_config.vocab_size == 384
    assert len(model.tokenizer) < 384  # the folder's own BPE, not the project's character tokenizer
    assert "trainer.resume_mode=disable" in launch.overrides


def test_load_and_the_same_tokenizer_folder(folder, tmp_path):
    cfg = load_config(TINY, [f"actor_config.load={folder}", f"megatron_training.tokenizer_name_or_path={folder}"])
    model, _ = _model(cfg, tmp_path / "run")
    assert Path(model.local_path) == folder and model.tokenizer_path == str(folder)


def test_a_tokenizer_folder_with_the_same_tokenizer_is_verls_tokenizer_path(folder, tmp_path):
    copy = shutil.copytree(folder, tmp_path / "copy")
    cfg = load_config(TINY, [f"actor_config.load={folder}", f"megatron_training.tokenizer_name_or_path={copy}"])
    assert VerlBackend().check(cfg) == []
    model, _ = _model(cfg, tmp_path / "run")
    assert Path(model.local_path) == folder and Path(model.local_tokenizer_path) == copy


def test_another_tokenizer_beside_a_load_folder_is_refused_in_one_line(folder, tmp_path):
    other = make_qwen2_folder(tmp_path / "base", chat_template=False)  # another tokenizer_config.json
    cfg = load_config(TINY, [f"actor_config.load={folder}", f"megatron_training.tokenizer_name_or_path={other}"])
    (line,) = VerlBackend().check(cfg)
    assert line == (
        f"configs/{TINY}.yaml: megatron_training.tokenizer_name_or_path: {other} is another tokenizer than "
        f"actor_config.load's model folder {folder}: verl's vLLM rollout serves actor_rollout_ref.model.path with "
        "that folder's own tokenizer (its tokenizer_path reaches only the trainer); put the tokenizer in the model "
        "folder and set tokenizer_name_or_path to it, or leave it unset"
    )
    with pytest.raises(TrialFailed, match="is another tokenizer than actor_config.load's model folder"):
        VerlBackend().launch_overrides(cfg, tmp_path / "run")


def test_a_verl_save_folder_in_load_is_a_resume_on_the_tokenizer_folders_model(folder, tmp_path):
    save = tmp_path / "save"
    (save / "global_step_4").mkdir(parents=True)
    (save / "latest_checkpointed_iteration.txt").write_text("4")
    cfg = load_config(TINY, [f"actor_config.load={save}", "actor_config.finetune=false",
                             f"megatron_training.tokenizer_name_or_path={folder}"])  # fmt: skip
    model, launch = _model(cfg, tmp_path / "run")
    assert Path(model.local_path) == folder
    assert f"trainer.resume_from_path={save / 'global_step_4'}" in launch.overrides and launch.start == 4


def test_a_retry_of_a_load_folder_run_trains_the_same_model(folder, tmp_path):
    """A retry names its first attempt's save folder in load: verl takes the weights from the checkpoint and the
    model (config.json, tokenizer) from model.path, which is the folder the attempt started from (recorded)."""
    first = load_config(TINY, [f"actor_config.load={folder}", f"actor_config.save={tmp_path / 'save'}"])
    launch = VerlBackend().prepare(first, tmp_path / "run0")  # what run() writes before submitting the job
    (launch.save_dir / "global_step_2").mkdir()  # the checkpoint verl saved
    (launch.save_dir / "latest_checkpointed_iteration.txt").write_text("2")
    retry = load_config(TINY, [f"actor_config.load={launch.save_dir}", "actor_config.finetune=false",
                               f"actor_config.save={tmp_path / 'save1'}"])  # fmt: skip
    model, resumed = _model(retry, tmp_path / "run1")
    assert Path(model.local_path) == folder and model.hf_config.max_position_embeddings == 256
    assert f"trainer.resume_from_path={launch.save_dir / 'global_step_2'}" in resumed.overrides


# ------------------------------------------------------------------ metrics verl never reports
def _spec(tmp_path, objective: str, pruner: str = "") -> Path:
    path = tmp_path / "v.yaml"
    path.write_text(
        f"study: v\nbase: {TINY}\nbackend: verl\nsearch:\n  rl_config.clip_ratio: choice(0.2, 0.3)\n"
        f"objective: {objective}\n{pruner}"
    )
    return path


@pytest.mark.parametrize(
    ("objective", "pruner", "key"),
    [
        ("eval/acc_greedy", "", "objective"),
        ("eval/acc", "pruner:\n  collapse: {}\n", "pruner.collapse.metric"),  # its default metric: eval/acc_greedy
    ],
)
def test_eval_acc_greedy_is_refused_at_validate(tmp_path, objective, pruner, key):
    path = _spec(tmp_path, objective, pruner)
    done = subprocess.run([sys.executable, "-m", "grpo.cli", "validate", str(path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: {path}: {key}: eval/acc_greedy: backend verl never reports it: verl runs one validation setting per "
        "run (rollout.val_kwargs, sampled as the rollout samples), reported as eval/acc; use eval/acc"
    )


def test_other_eval_names_are_refused_and_verls_own_pass(tmp_path):
    from grpo.sweep.backends import load_backend
    from grpo.sweep.run.preflight import metric_problems
    from grpo.sweep.spec.load import load_spec

    spec = load_spec(_spec(tmp_path, "eval/strict_format"))
    assert metric_problems(spec, load_backend(spec)) == [
        f"{spec.source}: objective: eval/strict_format: backend verl never reports it (its held-out metrics are "
        "eval/acc, eval/prompts)"
    ]
    for ok in ("eval/acc", "grpo/score/mean", "actor/pg_loss", "acc_rewards/mean"):
        spec = load_spec(_spec(tmp_path, ok))
        assert metric_problems(spec, load_backend(spec)) == []
