"""Time limits of the tests, counted in seconds of an idle machine: a busy machine slows a test down and
never fails it; a test that hangs still fails.

`LoadClock` counts the wall time of a process tree less the time its threads spent waiting for a core
(Linux's per-thread schedstat): a tree that gets a third of a core counts a third of each second, whatever
makes the machine busy (other processes, `nice`), and a tree that sleeps or waits on another program counts
every second. `run` is `subprocess.run` with its `timeout` on that clock (the SLURM slice, every Snakemake run
of the tests); tests/conftest.py counts pytest-timeout's limits (pyproject.toml `timeout`,
`@pytest.mark.timeout`) on the clock of the test's own process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

POLL = 2.0  # seconds between two readings


def tree_times(pid: int) -> dict[int, tuple[int, int]]:
    """{thread id: (ns on a core, ns waiting for one)} of every thread of process `pid` and its descendants."""
    times, todo = {}, [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            try:
                run, wait, _ = (task / "schedstat").read_text().split()
                todo += [int(child) for child in (task / "children").read_text().split()]
            except (OSError, ValueError):  # gone meanwhile
                continue
            times[int(task.name)] = (int(run), int(wait))
    return times


class LoadClock:
    """Idle-machine seconds of process `pid` (default: this one) and its descendants since the clock was made."""

    def __init__(self, pid: int | None = None):
        self.pid = os.getpid() if pid is None else pid
        self.seen, self.last, self.spent = tree_times(self.pid), time.monotonic(), 0.0

    def elapsed(self) -> float:
        now, times = time.monotonic(), tree_times(self.pid)
        run = wait = 0
        for tid, (on, off) in times.items():
            before = self.seen.get(tid, (0, 0))
            run, wait = run + max(on - before[0], 0), wait + max(off - before[1], 0)
        self.spent += (now - self.last) * (run / (run + wait) if run + wait else 1.0)
        self.seen, self.last = times, now
        return self.spent


def run(
    command, *, timeout: float, interrupt: int = signal.SIGKILL, grace: float = 10.0, check: bool = False, **kwargs
):
    """`subprocess.run(command, timeout=..., check=..., **kwargs)` with `timeout` in idle-machine seconds of the
    process and its descendants. Past it the process gets `interrupt` (SIGINT for Snakemake, which finishes
    its running jobs on SIGTERM but stops on SIGINT), SIGKILL `grace` seconds later, and TimeoutExpired is raised."""
    if kwargs.pop("capture_output", False):
        kwargs.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    given = kwargs.pop("input", None)
    if given is not None:
        kwargs["stdin"] = subprocess.PIPE
    with subprocess.Popen(command, **kwargs) as process:
        clock = LoadClock(process.pid)
        while True:
            try:
                out, err = process.communicate(given, timeout=POLL)
                break
            except subprocess.TimeoutExpired:
                given = None  # handed over in the first call
                if clock.elapsed() > timeout:
                    process.send_signal(interrupt)
                    try:
                        out, err = process.communicate(timeout=grace)
                    except subprocess.TimeoutExpired:
                        process.kill()
                        out, err = process.communicate()
                    raise subprocess.TimeoutExpired(command, timeout, out, err) from None
    if check and process.returncode:
        raise subprocess.CalledProcessError(process.returncode, command, out, err)
    return subprocess.CompletedProcess(command, process.returncode, out, err)


class Watchdog:
    """Calls `fire()` once `limit` idle-machine seconds of this process have passed, unless `stop()` came first."""

    def __init__(self, limit: float, fire: Callable[[], None]):
        self.clock, self.stopped = LoadClock(), threading.Event()
        self.thread = threading.Thread(target=self._watch, args=(limit, fire), daemon=True)
        self.thread.start()

    def _watch(self, limit: float, fire: Callable[[], None]) -> None:
        while not self.stopped.wait(POLL):
            if self.clock.elapsed() > limit:
                fire()
                return

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join()
