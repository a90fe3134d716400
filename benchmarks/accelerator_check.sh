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

echo
echo "== figures ($(cat "$out/device.txt"))"
echo "tests: $(tail -n 1 "$out/tests.log") (exit $tests_rc)"
sed -n '/^seconds per iteration/,$p' "$out/bench.log"
if [ "$bench_rc" -ne 0 ]; then
    echo "benchmark failed (exit $bench_rc); the end of $out/bench.log:"
    tail -n 20 "$out/bench.log"
fi
[ "$tests_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]
