#!/usr/bin/env bash
# The embedded engine on an accelerator, in one command (issue 26): the engine's tests and the engine/TRL
# benchmark on CUDA, or on an Ascend NPU when torch_npu imports, then the figures.
#
#   bash benchmarks/accelerator_check.sh [--iters 3] [OVERRIDE ...]     (from anywhere; PYTHON=... to choose)
#
# The tests run with the tiny config's engine.device=auto, which picks the accelerator; no test needs one, so
# on a CPU-only machine the script stops at once and says why (exit 3). The benchmark needs the bench extra
# (pip install -e '.[bench]': trl, datasets, accelerate). Logs (tests.log, bench.log, device.txt) go to
# $ACCEL_CHECK_DIR (default: $TMPDIR or /tmp)/accelerator_check-<device>-<time>/; the figures are printed at the end.
#
# On CUDA it then runs one real TRL trial (backend trl, the tiny Qwen2, 2 iterations: trl.log) and one tiny real
# verl trial (backend verl: verl 0.9.1's main_ppo as a Ray job on one GPU with vLLM, the same tiny Qwen2 as a HF
# folder, 8 arithmetic prompts as verl parquet, a custom reward, 2 steps: verl.log). The verl trial needs an
# interpreter with verl[vllm]==0.9.1 and its CUDA torch: VERL_PYTHON=/path/to/python (else it says it skipped).
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python )}"

device="$("$PYTHON" - <<'EOF'
import torch

if torch.cuda.is_available():
    print("cuda")
else:
    try:
        import torch_npu  # noqa: F401  (registers torch.npu)

        print("npu" if torch.npu.is_available() else "none")
    except ImportError:
        print("none")
EOF
)"
if [ "$device" = "none" ]; then
    echo "accelerator_check: no accelerator here (torch.cuda.is_available() is False and torch_npu does not" \
         "import or sees no NPU); nothing was run" >&2
    exit 3
fi

out="${ACCEL_CHECK_DIR:-${TMPDIR:-/tmp}}/accelerator_check-${device}-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
"$PYTHON" - > "$out/device.txt" <<EOF
import torch
print("torch", torch.__version__, "device $device:", end=" ")
if "$device" == "cuda":
    print(torch.cuda.get_device_name(0), "x", torch.cuda.device_count())
else:
    import torch_npu  # noqa: F401
    print(torch.npu.get_device_name(0), "x", torch.npu.device_count())
EOF
cat "$out/device.txt"

echo "== engine tests on $device (engine.device=auto picks it) -> $out/tests.log"
tests_rc=0
"$PYTHON" -m pytest -q -p no:cacheprovider tests/test_engine_*.py \
    > "$out/tests.log" 2>&1 || tests_rc=$?
tail -n 3 "$out/tests.log"

echo "== engine vs TRL on $device -> $out/bench.log"
bench_rc=0
"$PYTHON" benchmarks/engine_vs_trl.py --device "$device" "$@" > "$out/bench.log" 2>&1 || bench_rc=$?

trl_rc=0
verl_rc=0
if [ "$device" = "cuda" ]; then
    echo "== one real TRL trial on cuda -> $out/trl.log"
    "$PYTHON" - "$out/trl_run" > "$out/trl.log" 2>&1 <<'EOF' || trl_rc=$?
import sys, time
from pathlib import Path
from grpo.config import load_config
from grpo.sweep.backends.trl.backend import TrlBackend

cfg = load_config("grpo_trainer_tiny_cpu", [
    "megatron_training.train_iters=2", "megatron_training.save_interval=2", "megatron_training.global_batch_size=8",
    "rl_config.mini_batch_size=8", "rl_config.n_samples_per_prompt=4", "actor_config.micro_batch_size=32",
    "rl_config.epochs=1", "engine.eval_every=1", "engine.eval_size=16", "engine.device=cuda"])
t0 = time.time()
out = TrlBackend().run(cfg, Path(sys.argv[1]), lambda i, m: print(f"iteration {i}: {m.get('grpo/score/mean')}") or False, False)
print(f"trl trial: {out['iterations']} iterations in {time.time() - t0:.1f} s, last {out['metrics'].get('grpo/score/mean')}")
EOF
    tail -n 1 "$out/trl.log"

    echo "== one tiny real verl trial on cuda -> $out/verl.log"
    if [ -z "${VERL_PYTHON:-}" ] || ! "$VERL_PYTHON" -c "import verl, vllm" >/dev/null 2>&1; then
        echo "verl trial skipped: set VERL_PYTHON to an interpreter with verl[vllm]==0.9.1 (and its CUDA torch)" \
            | tee "$out/verl.log"
    else
        "$PYTHON" - "$out/verl_run" "$VERL_PYTHON" > "$out/verl.log" 2>&1 <<'EOF' || verl_rc=$?
import json, logging, sys, time
from pathlib import Path

import pandas as pd
import ray

from grpo.config import load_config
from grpo.sweep.backends.trl.model import build_base
from grpo.sweep.backends.verl.backend import VerlBackend

run = Path(sys.argv[1]).resolve()
run.mkdir(parents=True, exist_ok=True)
cfg = load_config("grpo_trainer_tiny_cpu", ["engine.device=cpu"])
base = build_base(cfg, run, logging.getLogger("base"))  # the tiny Qwen2 as a HF folder (config.json, tokenizer)
rows = [{"data_source": "grpo_arith", "prompt": [{"role": "user", "content": e.prompt}],
         "reward_model": {"style": "rule", "ground_truth": str(e.label)}, "extra_info": {"index": i}}
        for i, e in enumerate(base.train_set[:8])]
pd.DataFrame(rows).to_parquet(run / "train.parquet")
(run / "reward.py").write_text(
    "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n"
    "    return float(ground_truth.strip() in solution_str)\n")
cfg = load_config("grpo_trainer_tiny_cpu", [
    f"megatron_training.tokenizer_name_or_path={base.folder}", f"megatron_training.data_path={run / 'train.parquet'}",
    "megatron_training.train_iters=2", "megatron_training.save_interval=2", "megatron_training.global_batch_size=8",
    "rl_config.mini_batch_size=8", "rl_config.n_samples_per_prompt=4", "actor_config.micro_batch_size=8",
    "rl_config.actor_forward_micro_batch_size=8", "rl_config.ref_forward_micro_batch_size=8", "rl_config.epochs=1",
    "engine.eval_every=2", "generate_config.gpu_memory_utilization=0.3", f"actor_config.save={run / 'ckpt'}"])
backend = VerlBackend(python=sys.argv[2], env={"VERL_USE_EXTERNAL_PLUGINS": "none"},
                      extra_overrides=[f"reward.custom_reward_function.path={run / 'reward.py'}"])
problems = backend.check(cfg)  # verl's own validation, as grpo-sweep validate runs it
assert not problems, problems
ray.init(num_gpus=1, include_dashboard=True, log_to_driver=False)
t0 = time.time()
out = backend.run(cfg, run / "runs" / "seed0", lambda i, m: print(f"step {i}: {json.dumps(m)[:300]}") or False, False)
print(f"verl trial: {out['iterations']} steps in {time.time() - t0:.1f} s, job {out['job_status']}")
EOF
        tail -n 1 "$out/verl.log"
    fi
fi

echo
echo "== figures ($(cat "$out/device.txt"))"
echo "tests: $(tail -n 1 "$out/tests.log") (exit $tests_rc)"
sed -n '/^seconds per iteration/,$p' "$out/bench.log"
if [ "$bench_rc" -ne 0 ]; then
    echo "benchmark failed (exit $bench_rc); the end of $out/bench.log:"
    tail -n 20 "$out/bench.log"
fi
[ "$trl_rc" -eq 0 ] || { echo "TRL trial failed (exit $trl_rc); the end of $out/trl.log:"; tail -n 20 "$out/trl.log"; }
[ "$verl_rc" -eq 0 ] || { echo "verl trial failed (exit $verl_rc); the end of $out/verl.log:"; tail -n 20 "$out/verl.log"; }
[ "$tests_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ] && [ "$trl_rc" -eq 0 ] && [ "$verl_rc" -eq 0 ]
