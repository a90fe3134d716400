"""Sympy for the graders, in a child process: ``parse_expr`` can evaluate 9**9**9**9 for ever, and MindSpeed-RL
bounds ``acc`` by 1 s (``acc_subprocess``: ``future.result(timeout=1)``), so a question that overruns the
response's time kills the child (a fresh one answers the next question).

Two ways in, one answer each:

- ``ask`` from a grader called on its own (``rewards.acc(text, label)``): one round trip per question.
- ``batched(calls)`` (``rewards.score``): every response is graded with the answers known so far;
  a grader reaching an unknown question stops (``_Pending``), the round's questions go to the child in one
  round trip, and the stopped responses are graded again with the answers, until none stops. The graders are
  pure functions of their text and the answers, so the scores are those of ``ask``; a response needing k
  sympy answers in a row takes k rounds (1 in nearly every case).

The child is started on first use, not at import.
"""

from __future__ import annotations

import atexit
import contextvars
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence

from grpo.engine.rewards import _fast

SYMPY_SECONDS = 1.0  # MindSpeed-RL's acc_subprocess timeout; an overrun scores 0.0 there
_PIPE_BYTES = 60_000  # below the pipe's 64 KiB: a batch written in parts this size never blocks the writer
_CACHE_SIZE = 1 << 16

Question = tuple[
    str, str, str
]  # (op, a, b): "msrl" (symbolic_equal(a, b)), "ruler" (a == 0), "mathverify" (label, text)


class OutOfTime(Exception):
    """The sympy child did not answer within the response's time budget."""


class _Pending(BaseException):
    """Raised inside a grader run by ``batched``: it needs this answer first. A BaseException (as GeneratorExit
    is), so a grader's ``except Exception`` cannot turn it into a score."""

    def __init__(self, question: Question):
        super().__init__(question)
        self.question = question


class Budget:
    """What is left of one response's sympy time (the child's answering time; its start is not counted)."""

    def __init__(self, seconds: float = SYMPY_SECONDS) -> None:
        self.seconds = seconds
        self.spent = 0.0

    def left(self) -> float:
        return self.seconds - self.spent


class _Replay:
    """One response's state across ``batched`` rounds: its answers so far (None: overran) and its budget."""

    def __init__(self) -> None:
        self.answers: dict[Question, bool | None] = {}
        self.budget = Budget()


_REPLAY: contextvars.ContextVar[_Replay | None] = contextvars.ContextVar("grpo_rewards_replay", default=None)
# Answers already given (sympy is deterministic); an overrun is not remembered (it depends on the machine).
_CACHE: dict[Question, bool] = {}


def _remember(question: Question, answer: bool) -> None:
    if _fast.ENABLED:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[question] = answer


def ask(op: str, a: str, b: str, budget: Budget) -> bool:
    """The child's answer to one question within ``budget``; ``OutOfTime`` when it overruns."""
    question = (op, a, b)
    replay = _REPLAY.get()
    if replay is not None:  # inside batched: the response's own budget (of the grader's length) and answers
        replay.budget.seconds = budget.seconds
        budget = replay.budget
        if question in replay.answers:
            known = replay.answers[question]
            if known is None:
                raise OutOfTime
            return known
    if budget.left() <= 0:
        raise OutOfTime
    if _fast.ENABLED and question in _CACHE:
        return _CACHE[question]
    if replay is not None:
        raise _Pending(question)
    ((answer, took),) = _child().ask_many([(question, budget.left())])
    budget.spent += took
    if answer is None:
        raise OutOfTime
    _remember(question, answer)
    return answer


def batched(calls: Sequence[Callable[[], float]]) -> list[float]:
    """``[call() for call in calls]`` (graders of one response each), with one round trip to the child per round
    of questions instead of one per question."""
    states = [_Replay() for _ in calls]
    scores: list[float] = [0.0] * len(calls)
    todo: Sequence[int] = range(len(calls))
    while todo:
        waiting: dict[Question, list[int]] = {}
        for i in todo:
            token = _REPLAY.set(states[i])
            try:
                scores[i] = calls[i]()
            except _Pending as pending:
                waiting.setdefault(pending.question, []).append(i)
            finally:
                _REPLAY.reset(token)
        questions = list(waiting)
        if not questions:
            break
        # A question several responses ask is asked once, with the longest time any of them has left.
        seconds = [max(states[i].budget.left() for i in waiting[q]) for q in questions]
        answers = _child().ask_many(list(zip(questions, seconds, strict=True)))
        for question, (answer, took) in zip(questions, answers, strict=True):
            if answer is not None:
                _remember(question, answer)
            for i in waiting[question]:
                budget = states[i].budget
                states[i].answers[question] = answer if answer is not None and took <= budget.left() else None
                budget.spent += took
        todo = sorted(i for q in questions for i in waiting[q])
    return scores


class _Child:
    """One child process answering sympy questions (``_sympy_child.py``); killed and restarted when an answer
    overruns its time."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.lock = threading.Lock()
        self.buffer = b""
        self.registered = False

    def _start(self) -> subprocess.Popen[bytes]:
        if self.proc is not None and self.proc.poll() is None:
            return self.proc
        if not self.registered:
            atexit.register(self.close)
            self.registered = True
        code = (
            "import importlib.util as u, sys; s = u.spec_from_file_location('_grpo_sympy_child', sys.argv[1]); "
            "m = u.module_from_spec(s); s.loader.exec_module(m); m._serve()"
        )
        child = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_sympy_child.py")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, child], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
        )
        self.buffer = b""
        if self._line(time.monotonic() + 120) != b"ready":  # importing sympy is not the budget
            self.close()
            raise RuntimeError("the sympy child process of grpo.engine.rewards did not start")
        return self.proc

    def _line(self, deadline: float) -> bytes | None:
        """The child's next output line, None when it does not come by ``deadline`` (or the child died)."""
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0.0))
            chunk = os.read(fd, 65536) if ready else b""
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.strip()

    def ask_many(self, questions: Sequence[tuple[Question, float]]) -> list[tuple[bool | None, float]]:
        """(answer, seconds it took) per (question, seconds allowed), in order; None when it overran. The child
        answers in order, so each answer is timed from the one before; an overrun restarts the child and the
        rest are sent again."""
        out: list[tuple[bool | None, float]] = []
        with self.lock:
            while len(out) < len(questions):
                proc = self._start()
                assert proc.stdin is not None
                part: list[bytes] = []
                size = 0
                for question, _ in questions[len(out) :]:
                    line = (json.dumps(question) + "\n").encode()
                    if part and size + len(line) > _PIPE_BYTES:
                        break
                    part.append(line)
                    size += len(line)
                proc.stdin.write(b"".join(part))
                proc.stdin.flush()
                since = time.monotonic()
                for _ in part:
                    seconds = questions[len(out)][1]
                    answer = self._line(since + seconds)
                    now = time.monotonic()
                    if answer is None:  # overran (or died): a fresh child for the rest
                        out.append((None, seconds))
                        self.close()
                        break
                    out.append((bool(json.loads(answer)), now - since))
                    since = now
        return out

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


_CHILD: _Child | None = None
_CHILD_LOCK = threading.Lock()


def _child() -> _Child:
    global _CHILD
    with _CHILD_LOCK:
        if _CHILD is None:
            _CHILD = _Child()
        return _CHILD


_STARTER: threading.Thread | None = None


def start_soon() -> None:
    """Start the child in the background (once per process): importing sympy takes seconds, which would
    otherwise fall on the first iteration whose batch has a question. ``score`` calls this when one of its
    verifiers may ask."""
    global _STARTER
    with _CHILD_LOCK:
        if _STARTER is not None:
            return
        _STARTER = threading.Thread(target=_start_quietly, name="grpo-rewards-sympy-start", daemon=True)
    _STARTER.start()


def _start_quietly() -> None:
    child = _child()
    with child.lock:
        try:
            child._start()
        except RuntimeError:
            pass  # the first question starts it again and raises where it is asked
