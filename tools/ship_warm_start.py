"""Build the shipped tiny config's warm start and record it as package data (grpo/_data/warm_start).

    python tools/ship_warm_start.py            # (re)build it, write <key>.safetensors and SHA256SUMS
    python tools/ship_warm_start.py --check    # exit 1 unless the current config's key is shipped intact

Run it when something the warm-start key hashes changes (architecture, tokenizer, task, steps, seed, init
std, FORMAT_VERSION): the test tests/test_engine_warm_start_shipped.py fails until then. The build runs on
one thread, as a trial does; its bytes depend on the machine that builds them, which is why they are shipped.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch

from grpo.config import GRPOConfig, load_config
from grpo.engine import data
from grpo.engine.build import tokenizer_for
from grpo.engine.model import ModelArgs
from grpo.engine.warm_start import SHIPPED, SUMS, cache_key, file_sha256, shipped_file, warm_started_policy

CONFIG = "grpo_trainer_tiny_cpu"


def shipped_key(cfg: GRPOConfig) -> str:
    """The warm-start cache key of ``cfg``'s fresh policy (what ``warm_started_policy`` looks up)."""
    eng = cfg.engine
    task = data.get_task(eng.task)
    args = ModelArgs.from_model_config(cfg.model_arch)
    demos = len(task.demonstrations(eng.task_seed))
    init_std = cfg.megatron_training.init_method_std
    return cache_key(args, tokenizer_for(cfg), task.name, demos, eng.task_seed, eng.warm_start_steps, init_std)


def build(cfg: GRPOConfig) -> Path:
    eng = cfg.engine
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        _, file = warm_started_policy(
            ModelArgs.from_model_config(cfg.model_arch),
            tokenizer_for(cfg),
            data.get_task(eng.task),
            eng.task_seed,
            eng.warm_start_steps,
            cfg.megatron_training.init_method_std,
            Path(tmp),
            log=print,
            use_shipped=False,
        )
        assert file is not None
        SHIPPED.mkdir(parents=True, exist_ok=True)
        for old in SHIPPED.glob("*.safetensors"):
            old.unlink()
        target = SHIPPED / file.name
        target.write_bytes(file.read_bytes())
    (SHIPPED / SUMS).write_text(f"{file_sha256(target)}  {target.name}\n")
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check that the current key is shipped intact")
    cfg = load_config(CONFIG)
    if parser.parse_args().check:
        key = shipped_key(cfg)
        if shipped_file(key) is None:
            print(f"{CONFIG}: warm start {key} is not shipped; run python tools/ship_warm_start.py", file=sys.stderr)
            return 1
        print(f"{CONFIG}: warm start {key} shipped intact")
        return 0
    target = build(cfg)
    print(f"wrote {target} ({target.stat().st_size} bytes) and {SHIPPED / SUMS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
