"""The verl key probe (issue 40 item 3): every key backend verl's table calls applied, moved off its value, changes
what verl resolves. What verl resolves is the job's whole command line as ``VerlBackend.launch_overrides`` builds
it (rows, reward module and checkpoint paths included), composed by Hydra over verl 0.9.1's ``ppo_trainer`` and
validated by verl's ``validate_config``; the files it names (training and held-out parquet, the generated reward
module) count by their contents. Each probe is accepted by ``VerlBackend.check`` on both sides, so no probe moves a
key to a value the backend refuses. The table is checked against the probe: an applied key has a probe, or is
applied with one value only (nothing to move it to) and says so in its row."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from grpo.config import load_config
from grpo.engine.coverage import Kind
from grpo.sweep.backends.verl import _validate, coverage
from grpo.sweep.backends.verl.backend import VerlBackend

pytest.importorskip("verl")
TINY = "grpo_trainer_tiny_cpu"
BASE = ["engine.task_size=256", "engine.eval_size=16", "actor_config.lr_warmup_fraction=0.0"]  # small rows, fast
KL_IN_REWARD = ["rl_config.use_kl_in_reward=true", "rl_config.kl_ctrl_type=adaptive"]
CLIP_HIGHER = ["rl_config.clip_higher_enable=true"]
DAPO = ["rl_config.filter_groups_enable=true", "+rl_config.filter_groups_train_batch_size=32",
        "+rl_config.filter_groups_max_batches=0"]  # fmt: skip
LORA = ["megatron_training.lora_target_modules=[linear_qkv]"]


def _probes(tmp: Path) -> dict[str, tuple[list[str], list[str]]]:
    """key -> (context, moved): the overrides both sides share, and the key moved off its value."""
    a, b, ckpt = tmp / "a.jsonl", tmp / "b.jsonl", tmp / "ckpt"  # written by _files
    data = ["engine.task=dataset", f"megatron_training.data_path={a}", "megatron_training.split='80,20,0'"]
    resume = [f"actor_config.load={ckpt}", f"actor_config.save={ckpt}", "actor_config.finetune=false"]  # a retry
    return {
        "megatron.train_iters": ([], ["megatron_training.train_iters=99"]),
        "megatron.save_interval": ([], ["megatron_training.save_interval=7"]),
        "megatron.seed": ([], ["megatron_training.seed=99"]),
        "megatron.global_batch_size": ([], ["megatron_training.global_batch_size=64"]),
        "megatron.micro_batch_size": ([], ["actor_config.micro_batch_size=32"]),
        "megatron.data_path": (data, [f"megatron_training.data_path={b}"]),
        "megatron.split": (data, ["megatron_training.split='70,30,0'"]),
        "megatron.no_shuffle": ([], ["megatron_training.no_shuffle=true"]),
        "megatron.tokenizer_name_or_path": ([], [f"megatron_training.tokenizer_name_or_path={tmp}"]),
        "megatron.lr": ([], ["actor_config.lr=3e-5"]),
        "megatron.lr_decay_style": ([], ["actor_config.lr_decay_style=cosine"]),
        "megatron.min_lr": (["actor_config.lr_decay_style=cosine"], ["actor_config.min_lr=1e-6"]),
        "megatron.lr_warmup_fraction": ([], ["actor_config.lr_warmup_fraction=0.2"]),
        "megatron.weight_decay": ([], ["actor_config.weight_decay=0.1"]),
        "megatron.clip_grad": ([], ["actor_config.clip_grad=0.5"]),
        "megatron.adam_beta1": ([], ["actor_config.adam_beta1=0.8"]),
        "megatron.adam_beta2": ([], ["actor_config.adam_beta2=0.95"]),
        "megatron.save": ([], [f"actor_config.save={tmp / 'elsewhere'}"]),
        "megatron.load": (["actor_config.finetune=false"], [f"actor_config.load={ckpt}"]),
        "megatron.finetune": ([f"actor_config.load={ckpt}"], ["actor_config.finetune=false"]),
        "megatron.no_load_optim": (resume, ["actor_config.no_load_optim=false"]),
        "megatron.no_load_rng": (resume, ["actor_config.no_load_rng=false"]),
        "megatron.lora_r": (LORA, ["megatron_training.lora_r=16"]),
        "megatron.lora_alpha": (LORA, ["megatron_training.lora_alpha=32"]),
        "megatron.lora_target_modules": ([], LORA),
        "rl_config.verifier_function": ([], ["rl_config.verifier_function=[acc,format]"]),
        "rl_config.verifier_weight": ([], ["rl_config.verifier_weight=[1.0,0.5]"]),
        "rl_config.n_samples_per_prompt": ([], ["rl_config.n_samples_per_prompt=4"]),
        "rl_config.mini_batch_size": ([], ["rl_config.mini_batch_size=8"]),
        "rl_config.epochs": ([], ["rl_config.epochs=1"]),
        "rl_config.shuffle_mini_batch": ([], ["rl_config.shuffle_mini_batch=true"]),
        "rl_config.max_prompt_length": ([], ["rl_config.max_prompt_length=24"]),
        "rl_config.clip_ratio": ([], ["rl_config.clip_ratio=0.3"]),
        "rl_config.entropy_coeff": ([], ["rl_config.entropy_coeff=0.01"]),
        "rl_config.clip_higher_enable": ([], CLIP_HIGHER),
        "rl_config.clip_ratio_low": (CLIP_HIGHER, ["rl_config.clip_ratio_low=0.05"]),
        "rl_config.clip_ratio_high": (CLIP_HIGHER, ["rl_config.clip_ratio_high=0.3"]),
        "rl_config.token_level_loss": ([], ["rl_config.token_level_loss=false"]),
        "rl_config.kl_penalty": ([], ["rl_config.kl_penalty=kl"]),
        "rl_config.kl_ctrl_type": (["rl_config.use_kl_in_reward=true"], ["rl_config.kl_ctrl_type=adaptive"]),
        "rl_config.init_kl_coef": ([], ["rl_config.init_kl_coef=0.05"]),
        "rl_config.kl_target": (KL_IN_REWARD, ["rl_config.kl_target=0.5"]),
        "rl_config.kl_horizon": (KL_IN_REWARD, ["rl_config.kl_horizon=500"]),
        "rl_config.use_kl_in_reward": ([], ["rl_config.use_kl_in_reward=true"]),
        "rl_config.filter_groups_enable": (DAPO[1:], DAPO[:1]),
        "rl_config.filter_groups_metric": (DAPO, ["rl_config.filter_groups_metric=strict_format"]),
        # under dynamic sampling global_batch_size must equal it (verl has no generation batch): both move
        "rl_config.filter_groups_train_batch_size": (DAPO, ["++rl_config.filter_groups_train_batch_size=16",
                                                            "megatron_training.global_batch_size=16"]),
        "rl_config.actor_forward_micro_batch_size": ([], ["rl_config.actor_forward_micro_batch_size=16"]),
        "rl_config.ref_forward_micro_batch_size": ([], ["rl_config.ref_forward_micro_batch_size=16"]),
        "rl_config.gamma": ([], ["rl_config.gamma=0.9"]),
        "rl_config.lam": ([], ["rl_config.lam=0.9"]),
        "rl_config.actor_resource": ([], ["rl_config.actor_resource.num_npus=2"]),
        "generate_config.infer_tensor_parallel_size": (["rl_config.actor_resource.num_npus=2"],
                                                        ["generate_config.infer_tensor_parallel_size=2"]),
        "generate_config.gpu_memory_utilization": ([], ["generate_config.gpu_memory_utilization=0.7"]),
        "generate_config.sampling_config.max_tokens": ([], ["generate_config.sampling_config.max_tokens=16"]),
        "generate_config.sampling_config.top_p": ([], ["generate_config.sampling_config.top_p=0.9"]),
        "generate_config.sampling_config.top_k": ([], ["generate_config.sampling_config.top_k=50"]),
        "generate_config.sampling_config.temperature": ([], ["generate_config.sampling_config.temperature=1.0"]),
        "generate_config.sampling_config.seed": ([], ["generate_config.sampling_config.seed=7"]),
        "engine.task": (data[1:], data[:1]),
        "engine.eval_data_path": ([*data, "engine.eval_every=5"], [f"engine.eval_data_path={b}"]),
        "engine.data_fields": ([*data[:1], f"megatron_training.data_path={tmp / 'c.jsonl'}", data[2]],
                               ["+engine.data_fields={prompt: q, label: a}"]),
        "engine.task_size": ([], ["engine.task_size=300"]),
        "engine.task_seed": ([], ["engine.task_seed=5"]),
        "engine.eval_size": ([], ["engine.eval_size=24"]),
        "engine.eval_every": ([], ["engine.eval_every=5"]),
        "engine.exit_interval": ([], ["engine.exit_interval=10"]),
        "engine.loss_agg_mode": ([], ["engine.loss_agg_mode=seq-mean-token-sum"]),
        "engine.policy_loss": ([], ["engine.policy_loss=gspo"]),
        "engine.advantage_estimator": ([], ["engine.advantage_estimator=group_norm_no_std"]),
        "verl": ([], ["verl.actor_rollout_ref.rollout.enforce_eager=true"]),
    }  # fmt: skip


def _files(tmp: Path) -> None:
    """Two datasets and a checkpoint folder verl's resume finds (latest_checkpointed_iteration.txt)."""
    for name, offset in (("a", 0), ("b", 100)):
        (tmp / f"{name}.jsonl").write_text("".join(
            json.dumps({"prompt": f"{i}+{offset}=?", "label": str(i + offset)}) + "\n" for i in range(80)))  # fmt: skip
    (tmp / "c.jsonl").write_text("".join(json.dumps({"prompt": f"{i}?", "label": str(i), "q": f"{i}+1=?", "a": str(i + 1)})
                                         + "\n" for i in range(80)))  # fmt: skip
    (tmp / "ckpt" / "global_step_2").mkdir(parents=True, exist_ok=True)
    (tmp / "ckpt" / "latest_checkpointed_iteration.txt").write_text("2")


# Applied keys with one accepted value only (coverage.VALUES): there is nothing to move them to.
ONE_VALUE = {"rl_config.rule_reward", "rl_config.adv_estimator"}


def _files_by_content(node: object, root: Path) -> object:
    """The resolved config with each file under ``root`` it names replaced by its contents' digest."""
    if isinstance(node, dict):
        return {k: _files_by_content(v, root) for k, v in node.items() if k != "experiment_name"}
    if isinstance(node, list):
        return [_files_by_content(v, root) for v in node]
    if isinstance(node, str) and node.startswith(str(root)) and Path(node).is_file():
        return "sha256:" + hashlib.sha256(Path(node).read_bytes()).hexdigest()
    return node


def _leaves(node: object, prefix: str = "") -> dict[str, object]:
    if isinstance(node, dict):
        out: dict[str, object] = {}
        for k, v in node.items():
            out.update(_leaves(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: node}


def _resolved(overrides: list[str], run_dir: Path) -> dict[str, object]:
    cfg = load_config(TINY, [*BASE, *overrides])
    backend = VerlBackend()
    assert backend.check(cfg) == [], (overrides, backend.check(cfg))
    composed = _validate.validate(backend.launch_overrides(cfg, run_dir).overrides)
    return _leaves(_files_by_content(OmegaConf.to_container(composed), run_dir))


def test_the_key_table_and_the_probe_agree(tmp_path):
    table = coverage.KEYS.table()
    applied = {k for k, row in table.items() if row.kind is Kind.APPLIED and row.reason != "the section"}
    assert applied == set(_probes(tmp_path)) | ONE_VALUE
    for key in ONE_VALUE:
        assert key in coverage.VALUES and len(coverage.VALUES[key]) == 1


@pytest.fixture(scope="module")
def probe_dir(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("probe")
    _files(tmp)
    return tmp


_SEEN: dict[tuple[str, ...], dict[str, object]] = {}  # a context's resolved config, shared by its probes


@pytest.mark.parametrize("key", sorted(_probes(Path("probe"))))
def test_every_applied_key_changes_what_verl_resolves(key, probe_dir):
    context, moved = _probes(probe_dir)[key]
    run_dir = probe_dir / "run"  # one run folder for every side: their files differ only by content
    if tuple(context) not in _SEEN:
        _SEEN[tuple(context)] = _resolved(context, run_dir)
    before = _SEEN[tuple(context)]
    after = _resolved([*context, *moved], run_dir)
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert changed, f"{key}: moving it ({moved}) changes nothing verl resolves"
