"""MindSpeed-RL console log parsing: iteration lines of both naming generations, and failure causes.

The lines are written the way MindSpeed-RL's Loggers.handle_msg formats them (lr in %e, other
values with 4 decimals), behind Ray's prefixes, as they appear in real logs.
"""

import math

import pytest

from grpo.sweep.backends.mindspeed.log import (
    classify_failure,
    clean_line,
    finite,
    normalise,
    parse_metrics_line,
    strip_ray_prefix,
)

NEW = ("(train pid=1234) 2025-06-01 12:00:00,123 - INFO - [2025-06-01 12:00:00] iteration: 12 / 500 | "
       "timing/all : 41.2000 | actor/pg_loss : 0.0123 | actor/lr : 1.000000e-06 | grpo/score/mean : 0.5100 | "
       "grpo/rewards/mean : 0.4800 | e2e_tps : 210.0000 | vllm_tps : 512.5000 | actor/grad_norm : 0.3300")
# MindSpeed-RL <= 2.0 (spring 2025): tokens/p/s, vllm_throughput, grpo/lr, grad_norm.
OLD = ("\x1b[36m(IntegratedWorker pid=88, ip=10.0.0.2)\x1b[0m 2025-03-28 10:00:00,001 - INFO - [2025-03-28 10:00:00] "
       "iteration: 3 / 10 | grpo/lr : 2.000000e-06 | grad_norm : 0.2500 | grpo/rewards/mean : 0.2500 | "
       "tokens/p/s : 99.0000 | vllm_throughput : 12.5000 | timing/all : 80.0000 [repeated 2x across cluster]")


def test_new_generation_line_behind_ray_prefix():
    parsed = parse_metrics_line(NEW)
    assert (parsed.iteration, parsed.total) == (12, 500)
    assert parsed.metrics == {
        "timing/all": 41.2, "actor/pg_loss": 0.0123, "actor/lr": 1e-6, "grpo/score/mean": 0.51,
        "grpo/rewards/mean": 0.48, "e2e_tps": 210.0, "vllm_tps": 512.5, "actor/grad_norm": 0.33,
    }


def test_old_generation_names_are_mapped_to_todays():
    parsed = parse_metrics_line(OLD)
    assert (parsed.iteration, parsed.total) == (3, 10)
    assert parsed.metrics == {
        "actor/lr": 2e-6, "actor/grad_norm": 0.25, "grpo/rewards/mean": 0.25, "grpo/score/mean": 0.25,
        "e2e_tps": 99.0, "vllm_tps": 12.5, "timing/all": 80.0,
    }


def test_new_spelling_wins_and_rewards_only_fill_a_missing_score():
    both = normalise({"tokens/p/s": 1.0, "e2e_tps": 2.0, "grpo/rewards/mean": 0.1, "grpo/score/mean": 0.9})
    assert both == {"e2e_tps": 2.0, "grpo/rewards/mean": 0.1, "grpo/score/mean": 0.9}


@pytest.mark.parametrize("line", [
    "",
    "sync start grpo training at iteration: 0/500 ...",  # MindSpeed's start message: no "N / M |"
    "(train pid=9) 2025-06-01 - INFO - [2025-06-01] iteration: 3 / 10 |  free text message",
    "iteration: x / y | a : b",
    "Traceback (most recent call last):",
    "\x00\xff garbage \ufffd iteration",
    "(raylet) [2025-06-01] WARNING: 4 PYTHON worker processes have been started",
])
def test_other_lines_are_not_metrics(line):
    assert parse_metrics_line(line) is None


def test_non_numeric_fields_are_skipped_and_nan_is_kept_for_the_caller():
    parsed = parse_metrics_line("iteration: 2 / 5 | timing/all : 3.5000 | note : n/a | actor/pg_loss : nan")
    assert parsed.metrics["timing/all"] == 3.5 and "note" not in parsed.metrics
    assert math.isnan(parsed.metrics["actor/pg_loss"])
    assert finite(parsed.metrics) == {"timing/all": 3.5}


def test_prefix_and_colour_stripping():
    assert strip_ray_prefix("\x1b[36m(train pid=12)\x1b[0m hello") == "hello"
    assert strip_ray_prefix("(IntegratedWorker pid=5, ip=1.2.3.4) x") == "x"
    assert clean_line("a [repeated 3x across cluster]\n") == "a"


HCCL = ("(IntegratedWorker pid=13075, ip=10.0.0.3) EI0002: [PID: 13075] 2025-06-25-10:45:23.586.187 The wait execution "
        "of the Notify register times out. Reason: The Notify register has not received the Notify record from remote rank")


@pytest.mark.parametrize("lines, returncode, expected", [
    (["RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 3; 60.96 GiB total capacity)"], 1,
     "NPU out of memory (exit code 1): RuntimeError: NPU out of memory."),
    (["EL0004: [PID: 77] 2025-06-01-10:00:00 Failed to allocate memory."], 1, "NPU out of memory"),
    (["ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`"], 1,
     "KV cache does not fit"),
    ([HCCL], 1, "HCCL timeout (exit code 1): EI0002:"),
    (["EI0006: Getting socket times out. Reason: Remote Rank did not send the data in time."], 1, "HCCL timeout"),
    (["EI9999: hccl fftsplus task timeout occurred during task execution, stream_id:5"], 1, "HCCL timeout"),
    (["[ERROR] 2024-05-21-11:57:54 (PID:927000, Device:3, RankID:3) ERR02200 DIST call hccl api failed."], 1,
     "HCCL error"),
    (["ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."], 1, "Ray actor died"),
    (["ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory."], 1,
     "host out of memory"),
    (["omegaconf.errors.ConfigAttributeError: Key 'actor_config' is not in struct"], 1, "config error"),
    (["Traceback (most recent call last):", '  File "x.py", line 1', "ValueError: The key: foo is missing"], 1,
     "exit code 1: ValueError: The key: foo is missing"),
    (["ray.exceptions.RayTaskError(ValueError): ray::train() (pid=5)"], 1, "exit code 1: ray.exceptions.RayTaskError"),
    (["just some output"], 3, "exit code 3"),
    ([], -9, "killed by SIGKILL"),
])
def test_failure_classification(lines, returncode, expected):
    reason = classify_failure(lines, returncode)
    assert reason.startswith(expected), reason


def test_out_of_memory_wins_over_the_hccl_timeouts_it_causes():
    lines = [HCCL, "RuntimeError: NPU out of memory. Tried to allocate 1.00 GiB", HCCL]
    assert classify_failure(lines, 1).startswith("NPU out of memory")


def test_hccl_env_vars_printed_at_start_up_are_not_a_timeout():
    lines = ["ray init with runtime_env: {'env_vars': {'HCCL_CONNECT_TIMEOUT': '1800', 'HCCL_EXEC_TIMEOUT': '3600'}}",
             "ValueError: global_batch_size 30 must be divisible by data_parallel_size 4"]
    assert classify_failure(lines, 1) == "exit code 1: ValueError: global_batch_size 30 must be divisible by data_parallel_size 4"


def test_exit_code_zero_is_not_a_failure_whatever_was_printed():
    assert classify_failure([HCCL, "RuntimeError: NPU out of memory"], 0) is None
