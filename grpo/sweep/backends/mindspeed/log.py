"""Reading MindSpeed-RL's console log: per-iteration metric lines and the cause of a failed run.

MindSpeed-RL's trainer logs one line per GRPO iteration through ``mindspeed_rl.utils.loggers.Loggers``::

    2025-06-01 12:00:00,123 - INFO - [2025-06-01 12:00:00] iteration: 12 / 500 | timing/all : 41.2000 |
    actor/lr : 1.000000e-06 | grpo/score/mean : 0.5100 | e2e_tps : 210.0000          (one line)

The trainer runs inside a Ray task, so the driver prints the line behind Ray's prefix
(``(train pid=1234)`` or ``(IntegratedWorker pid=1234, ip=10.0.0.2)``), sometimes coloured with ANSI
codes and, with log de-duplication on, followed by ``[repeated 3x across cluster]``. ``parse_metrics_line``
finds the ``iteration: N / M |`` part wherever it sits and reads every ``name : number`` field after it.
Older MindSpeed-RL releases (up to mid 2025) printed some metrics under other names; ``normalise``
maps them to the names the rest of grpo-sweep uses. A line that is not a metrics line gives ``None``:
it stays in the log and is never an error.

``classify_failure`` turns the tail of a failed run's log and its exit code into a one-line reason
(out of memory, HCCL timeout, a dead Ray actor ...), citing the line that gave it away.
"""

from __future__ import annotations

import math
import re
import signal
from collections.abc import Iterable
from dataclasses import dataclass, field

# ANSI colour / cursor sequences (Ray colours its "(name pid=N)" prefixes on a terminal).
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# Ray's log de-duplication suffix.
_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
# Ray's per-process prefix: "(train pid=1234)", "(IntegratedWorker pid=5, ip=10.0.0.2)", "(raylet)".
_RAY_PREFIX = re.compile(r"^\s*\((?:[^()]*\bpid=\d+[^()]*|raylet|autoscaler[^()]*)\)\s?")
_ITERATION = re.compile(r"\biteration:\s*(?P<it>\d+)\s*/\s*(?P<total>\d+)\s*\|(?P<fields>.*)$")
_FIELD = re.compile(
    r"^\s*(?P<key>[^\s:|][^:|]*?)\s*:\s*"
    r"(?P<value>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf|infinity))\s*$",
    re.IGNORECASE,
)

# Old name -> name used today (the quantity is the same; the old key is dropped).
RENAMED: dict[str, str] = {
    "tokens/p/s": "e2e_tps",  # MindSpeed-RL <= 2.0: end-to-end tokens per NPU per second
    "vllm_throughput": "vllm_tps",  # MindSpeed-RL <= 2.0: rollout tokens per NPU per second
    "grpo/lr": "actor/lr",  # MindSpeed-RL <= 2.0: the actor's learning rate
    "grad_norm": "actor/grad_norm",  # MindSpeed-RL <= 2.0: the actor's gradient norm
}
# Metrics that stand in for a missing one (both are real, distinct metrics when both are printed:
# grpo/rewards/* is the rule reward, grpo/score/* the total score; with rule rewards only they agree).
FALLBACKS: dict[str, str] = {
    "grpo/rewards/mean": "grpo/score/mean",
    "grpo/rewards/max": "grpo/score/max",
    "grpo/rewards/min": "grpo/score/min",
}


@dataclass(frozen=True)
class MetricsLine:
    """One parsed iteration line: ``iteration`` counts from 1, ``total`` is MindSpeed's train_iters."""

    iteration: int
    total: int
    metrics: dict[str, float] = field(default_factory=dict)


def clean_line(line: str) -> str:
    """The line without ANSI codes, Ray's de-duplication suffix and the trailing newline."""
    return _REPEATED.sub("", _ANSI.sub("", line)).rstrip("\r\n")


def strip_ray_prefix(line: str) -> str:
    """The line without Ray's ``(name pid=N, ip=...)`` prefix (and without ANSI codes)."""
    return _RAY_PREFIX.sub("", clean_line(line), count=1)


def normalise(metrics: dict[str, float]) -> dict[str, float]:
    """Metrics under today's names: old names renamed, ``grpo/score/*`` filled from ``grpo/rewards/*``.

    A name printed under both spellings keeps the new spelling's value.
    """
    out = {RENAMED.get(k, k): v for k, v in metrics.items() if k not in RENAMED or RENAMED[k] not in metrics}
    for old, new in FALLBACKS.items():
        if old in out and new not in out:
            out[new] = out[old]
    return out


def parse_metrics_line(line: str) -> MetricsLine | None:
    """The iteration and metrics of a MindSpeed-RL iteration line, or None for any other line.

    Fields that are not ``name : number`` are skipped; a line with no numeric field is not a
    metrics line (MindSpeed also logs plain messages with an ``iteration: N / M`` header).
    """
    match = _ITERATION.search(clean_line(line))
    if match is None:
        return None
    metrics: dict[str, float] = {}
    for piece in match.group("fields").split("|"):
        field_match = _FIELD.match(piece)
        if field_match:
            value = float(field_match.group("value"))
            metrics[field_match.group("key").strip()] = value
    if not metrics:
        return None
    return MetricsLine(int(match.group("it")), int(match.group("total")), normalise(metrics))


def finite(metrics: dict[str, float]) -> dict[str, float]:
    """Only the finite values (NaN/inf stay in the log but cannot go into JSON or Optuna)."""
    return {k: v for k, v in metrics.items() if math.isfinite(v)}


# --------------------------------------------------------------------------------------- failures
# Checked in this order: the first kind found anywhere in the tail names the failure. Out-of-memory
# comes first because an OOM on one rank makes the others time out in HCCL; HCCL comes before Ray
# because a rank that fails in HCCL then takes its Ray actor down with it.
FAILURE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (label, re.compile(pattern, re.IGNORECASE))
    for label, pattern in (
        # Ray's memory monitor killing workers when the *host* runs out of RAM.
        ("host out of memory", r"ray\.exceptions\.OutOfMemoryError|node running low on memory"),
        # torch_npu: "RuntimeError: NPU out of memory. Tried to allocate ..."; CANN: "EL0004 ... Failed to
        # allocate memory"; torch's generic "... out of memory" and OutOfMemoryError.
        (
            "NPU out of memory",
            r"NPU out of memory|\bEL0004\b|Failed to allocate memory|\bout of memory\b|"
            r"OutOfMemoryError",
        ),
        # vLLM refusing a KV cache that cannot hold one max_model_len sequence.
        (
            "KV cache does not fit",
            r"No available memory for the cache blocks|"
            r"maximum number of tokens that can be stored in KV cache",
        ),
        # CANN/HCCL: EI0002 notify wait timeout (HCCL_EXEC_TIMEOUT), EI0006 socket timeout
        # (HCCL_CONNECT_TIMEOUT), "hccl fftsplus task timeout", torch's collective watchdog timeout.
        # Word boundaries keep env-var names such as HCCL_EXEC_TIMEOUT (printed at start-up) out.
        (
            "HCCL timeout",
            r"\bEI000[26]\b|Getting socket times out|Notify register times out|"
            r"\bhccl\w*\b.*\b(?:timeout|timed out|times out|time out)\b|collective operation timeout",
        ),
        # torch_npu distributed errors: "ERR02200 DIST call hccl api failed", watchdog crashes.
        ("HCCL error", r"\bERR02\d{3}\b|DIST call hccl api failed|HCCL (?:error|function error)|HCCL watchdog"),
        ("Ray actor died", r"RayActorError|ActorDiedError|ActorUnavailableError|\bactor died\b"),
        ("Ray node died", r"NodeDiedError|node .* (?:has been )?marked (?:as )?dead|raylet died"),
        (
            "cannot reach the Ray cluster",
            r"Could not find any running Ray instance|Failed to connect to GCS|"
            r"Unable to connect to GCS",
        ),
        # (Not Hydra's "Error executing job with overrides": it precedes every error of a Hydra app.)
        ("config error", r"omegaconf\.errors|hydra\.errors|MissingConfigException|ConfigCompositionException"),
    )
)
_EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)(?:\([\w.]*\))?(?::.*)?$"
)
_MAX_QUOTE = 240


def _quote(line: str) -> str:
    text = strip_ray_prefix(line).strip()
    return text if len(text) <= _MAX_QUOTE else text[: _MAX_QUOTE - 3] + "..."


def _exit_text(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def classify_failure(lines: Iterable[str], returncode: int | None) -> str | None:
    """Why a MindSpeed-RL run failed, as one line, or None when it did not fail (exit code 0).

    The reason names the kind of failure (see ``FAILURE_PATTERNS``) and quotes the first line that
    shows it; without a known kind it quotes the last Python exception line; failing that it is the
    exit code or the signal that killed the process.
    """
    if returncode == 0:
        return None
    tail = [strip_ray_prefix(line) for line in lines]
    exit_text = _exit_text(returncode) if returncode is not None else "no exit code"
    for label, pattern in FAILURE_PATTERNS:
        for line in tail:
            if pattern.search(line):
                return f"{label} ({exit_text}): {_quote(line)}"
    for line in reversed(tail):
        if _EXCEPTION_LINE.match(line.strip()):
            return f"{exit_text}: {_quote(line)}"
    return exit_text
