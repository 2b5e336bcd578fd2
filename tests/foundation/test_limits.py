"""The tests' time limits (tests/limits.py) count idle-machine seconds: a busy machine slows a test and never
fails it; a process that hangs is still stopped."""

import os
import subprocess
import sys
import time

import pytest

from tests import limits

SPIN = "import time\nwhile time.process_time() < {seconds}: pass\n"  # needs `seconds` of CPU


def fake_times(monkeypatch, share: float) -> None:
    """Every reading: one thread that got `share` of the time since the last one and waited the rest."""
    state = {"last": time.monotonic(), "run": 0, "wait": 0}

    def times(pid):
        now = time.monotonic()
        state["run"] += int((now - state["last"]) * share * 1e9)
        state["wait"] += int((now - state["last"]) * (1 - share) * 1e9)
        state["last"] = now
        return {pid: (state["run"], state["wait"])}

    monkeypatch.setattr(limits, "tree_times", times)


def test_a_second_counts_the_share_of_a_core_the_process_got(monkeypatch):
    fake_times(monkeypatch, 0.1)
    clock = limits.LoadClock()
    time.sleep(0.5)
    assert clock.elapsed() == pytest.approx(0.05, rel=0.3)  # waited 90 % of 0.5 s for a core
    fake_times(monkeypatch, 1.0)
    time.sleep(0.5)
    assert clock.elapsed() == pytest.approx(0.55, rel=0.3)  # a second on a core (or asleep) counts whole


def test_a_hung_process_is_stopped_and_named():
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        limits.run([sys.executable, "-c", "import time; time.sleep(60)"], timeout=1, capture_output=True)
    assert time.monotonic() - start < 30  # asleep, never waiting for a core: every second counts


def test_the_watchdog_fires_after_its_idle_seconds_only(monkeypatch):
    fired = []
    limits.Watchdog(1, lambda: fired.append("idle")).thread.join(timeout=30)
    fake_times(monkeypatch, 0.001)
    busy = limits.Watchdog(1, lambda: fired.append("busy"))
    time.sleep(2 * limits.POLL + 1)
    busy.stop()
    assert fired == ["idle"]


def test_a_run_on_a_machine_busy_with_spinning_processes_passes_its_limit():
    """Two spinning processes per core (an artificial load): a run that needs 0.5 CPU-s gets at most 2/5 of a
    core, so it takes longer than its 1-second limit on the wall clock, and passes on the idle-machine one."""
    cores = os.cpu_count() or 1
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=60)]) for _ in range(2 * cores)]
    try:
        time.sleep(1)  # the spinners run
        start = time.monotonic()
        result = limits.run([sys.executable, "-c", SPIN.format(seconds=0.5)], timeout=1, capture_output=True)
        wall = time.monotonic() - start
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    assert result.returncode == 0
    assert wall > 1, f"the load did not slow the run ({wall:.1f} s): the check shows nothing"
