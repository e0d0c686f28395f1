"""Hold a real vLLM engine still, from a process of its own.

The engine-death test must kill vLLM's EngineCore while a chat and a benchmark answer are
streaming, so no answer may end before the kill however slowly a busy machine relays. It
freezes the engine (SIGSTOP) and lets it run only in short slices. That cannot be done
from the test's own process: the chat relay and the benchmark harness stream there on
threads of their own, and while a 1900-token answer streamed, the test's main thread was
measured waiting up to 4.5 s between 0.1 s polls on two busy cores (the streaming threads
keep taking the GIL back: most likely CPython's convoy effect), so a 10 ms slice could last
seconds. So the throttle is this small helper process, real-time scheduled where it
may be (else at nice -10), driven over a pipe: it times each slice itself, and its timing
does not depend on the test process getting the GIL. (The freeze before the measured
answer is asked for by the harness's own thread as it opens that stream: see the test.)

Protocol: one JSON object per line on stdin, one answer per line on stdout.
  {"op": "lowest_priority"}                      the engine family at nice 19
  {"op": "freeze"}
  {"op": "slice", "seconds": S}                   resume, sleep S, freeze: {"spent": s}
  {"op": "kill"}                                  SIGKILL EngineCore, resume the rest
EOF on stdin (the test ended, or died): whatever is still frozen is killed and resumed, so
nothing stays stopped behind a failed test.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time

import psutil


class _Helper:
    def __init__(self, pids: list[int]) -> None:
        self.engine = psutil.Process(pids[0])
        self.family = [psutil.Process(pid) for pid in pids]
        self.frozen = False

    def _signal(self, resume: bool) -> None:
        for proc in self.family:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.resume() if resume else proc.suspend()

    def lowest_priority(self) -> dict:
        for proc in self.family:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.nice(19)
        return {"ok": True}

    def freeze(self) -> dict:
        self._signal(resume=False)
        self.frozen = True
        return {"ok": True}

    def slice(self, seconds: float) -> dict:
        started = time.monotonic()
        self._signal(resume=True)
        time.sleep(seconds)
        self._signal(resume=False)
        return {"ok": True, "spent": time.monotonic() - started}

    def kill(self) -> dict:
        self.engine.kill()
        self.family.remove(self.engine)
        self._signal(resume=True)
        self.frozen = False
        return {"ok": True}

    def release(self) -> None:
        if self.frozen:
            for proc in self.family:
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.kill()
                    proc.resume()


def _serve(pids: list[int]) -> None:
    # Real-time when allowed (root, as in CI): the helper preempts everything the moment a
    # slice's sleep ends, so a slice is its length on the busiest machine; else nice -10.
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    except (PermissionError, OSError):
        with contextlib.suppress(PermissionError):
            os.setpriority(os.PRIO_PROCESS, 0, -10)
    helper = _Helper(pids)
    try:
        for line in sys.stdin:
            command = json.loads(line)
            op = command.pop("op")
            try:
                answer = getattr(helper, op)(**command)
            except Exception as exc:  # an answer, so the test fails with it
                answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(answer), flush=True)
    finally:
        helper.release()


class EngineThrottle:
    """vLLM's EngineCore and the worker processes it drives (the CPU build has its own),
    at the lowest CPU priority, frozen (SIGSTOP) and let run only in slices of engine time
    that the test hands out — all done by the helper process above."""

    def __init__(self, engine_proc: psutil.Process) -> None:
        family = [engine_proc, *engine_proc.children(recursive=True)]
        self.proc = subprocess.Popen(
            [sys.executable, __file__, *(str(p.pid) for p in family)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip

    def _ask(self, op: str, **args) -> dict:
        self._send(op, **args)
        return self._answer(op)

    def _send(self, op: str, **args) -> None:
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()

    def _answer(self, op: str) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"the throttle helper exited ({self.proc.wait()}) on {op}")
        answer = json.loads(line)
        if not answer.get("ok"):
            raise AssertionError(f"throttle {op}: {answer.get('error')}")
        return answer

    def lowest_priority(self) -> None:
        self._ask("lowest_priority")

    def freeze(self) -> None:
        self._ask("freeze")

    def run_until(self, check, *, slice_s: float, budget_s: float, what: str) -> tuple[int, float]:
        """Slices of `slice_s` of engine time, each followed by a frozen `check()`, until it
        holds (the engine is frozen when this returns) — at most `budget_s` of engine time
        in all, as the helper measured it."""
        spent, slices = 0.0, 0
        while not check():
            if spent >= budget_s:
                raise AssertionError(f"{what}: not after {slices} slices, {spent:.3f} s")
            spent += self._ask("slice", seconds=slice_s)["spent"]
            slices += 1
        return slices, spent

    def kill(self) -> None:
        """EngineCore alone is killed; its workers run on and see their engine gone."""
        self._ask("kill")

    def release(self) -> None:
        """The helper ends; whatever it still holds frozen is killed and resumed."""
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


if __name__ == "__main__":
    _serve([int(pid) for pid in sys.argv[1:]])
