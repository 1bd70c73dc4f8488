"""The load watch around every cell: other work on the machine is seen and flagged."""

import subprocess
import sys
import time

import pytest

from conftest import skip_unless_ci
from harness.machine import machine_load
from harness.machine.machine_load import CONTENDED_CORES, LoadWatch


@pytest.fixture
def linux():
    if not sys.platform.startswith("linux"):
        skip_unless_ci("the load watch reads /proc/stat, which only Linux has")


def test_a_busy_process_that_is_not_ours_is_counted_as_other_work(linux):
    # Not yet reaped, so its CPU time is not in our os.times(): to the watch it is someone else's.
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)  # let the interpreter start before the watch begins
        watch = LoadWatch()
        time.sleep(2.0)
        metrics = watch.finish()
    finally:
        spinner.kill()
        spinner.wait()
    assert metrics["other_busy_cores"] >= CONTENDED_CORES, metrics
    assert metrics["contended"] == 1.0
    assert metrics["load_avg_before"] >= 0 and metrics["load_avg_after"] >= 0


# The child spins for a second of its own CPU time (not wall time, which a loaded machine stretches)
# and prints how much it used.
SPIN_ONE_CPU_SECOND = ("import time\nwhile time.process_time() < 1.0: pass\n"
                       "print(time.process_time())")


def test_our_own_children_are_ours_once_reaped(linux):
    # What the watch subtracts as ours must hold the reaped child's CPU seconds; were they left out,
    # a DDP cell's own ranks would count as other work and flag every such cell as contended.
    before = machine_load._sample()
    child_cpu_s = float(subprocess.run([sys.executable, "-c", SPIN_ONE_CPU_SECOND], check=True,
                                       capture_output=True, text=True).stdout)
    after = machine_load._sample()
    # Clock ticks round each of the two readings by 1/100 s.
    assert after.own_cpu_s - before.own_cpu_s >= child_cpu_s - 0.05, (before, after, child_cpu_s)


def test_other_work_is_what_the_machine_was_busy_with_beyond_our_own_cpu_time(monkeypatch):
    """finish() over readings set by hand: (machine busy - ours) / wall, and never below zero."""
    def watched(start, end):
        samples = iter([start, end])
        monkeypatch.setattr(machine_load, "_sample", lambda: next(samples))
        watch = LoadWatch()
        return watch.finish()

    def sample(wall, busy, own, load):
        return machine_load._Sample(wall=wall, machine_busy_s=busy, own_cpu_s=own, load1=load)

    # 4 s wall; the machine's cores were busy 7 s, 5 s of them ours: others held 0.5 cores.
    assert watched(sample(10.0, 100.0, 3.0, 1.5), sample(14.0, 107.0, 8.0, 2.5)) == {
        "load_avg_before": 1.5, "load_avg_after": 2.5, "other_busy_cores": 0.5, "contended": 1.0}
    # 3 s of other work over 10 s: 0.3 cores, below CONTENDED_CORES.
    quiet = watched(sample(0.0, 50.0, 1.0, 0.2), sample(10.0, 54.0, 2.0, 0.2))
    assert quiet["other_busy_cores"] == pytest.approx(0.3) and quiet["contended"] == 0.0
    # Our reading ahead of the machine's (its ticks and ours are counted apart): none, not negative.
    assert watched(sample(0.0, 50.0, 1.0, 0.2), sample(2.0, 51.0, 2.5, 0.2))["other_busy_cores"] == 0.0
    # No reading (not Linux) or no time passed: nothing is recorded.
    assert watched(None, sample(1.0, 1.0, 1.0, 0.0)) == {}
    assert watched(sample(1.0, 1.0, 1.0, 0.0), sample(1.0, 2.0, 1.0, 0.0)) == {}


def test_the_report_says_how_many_cores_other_work_held_as_one_figure_or_a_range():
    from harness.report.contention import busy_cores

    assert busy_cores([{"other_busy_cores": 1.4}, {"other_busy_cores": 1.44}]) == "1.4"
    assert busy_cores([{"other_busy_cores": 1.6}, {"other_busy_cores": 0.9}, {}]) == "0.9-1.6"
    assert busy_cores([{}]) == "some"   # a cell from before the probe logged the figure
