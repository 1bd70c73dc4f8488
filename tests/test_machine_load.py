"""The load watch around every cell: other work on the machine is seen and flagged."""

import os
import subprocess
import sys
import time

import pytest

from harness.machine_load import CONTENDED_CORES, LoadWatch

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/stat")


def test_a_busy_process_that_is_not_ours_is_counted_as_other_work():
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


def test_our_own_children_are_ours_once_reaped():
    watch = LoadWatch()
    subprocess.run([sys.executable, "-c", "import time; end = time.monotonic() + 1.5\nwhile time.monotonic() < end: pass"],
                   check=True)
    metrics = watch.finish()
    # The machine has this many cores: other work can never have held more, which it would
    # appear to if our reaped child's CPU time were not subtracted on a saturated machine.
    assert 0 <= metrics["other_busy_cores"] <= os.cpu_count() + 0.1, metrics


def test_a_contended_cell_says_so_in_its_report_row():
    from harness.report.tables import _contention
    from harness.store.tracking import RunRecord

    def run(metrics):
        return RunRecord("r", "cell", "FINISHED", {}, metrics, {}, 0)

    quiet = run({"contended": 0.0, "other_busy_cores": 0.1, "load_avg_before": 1.0, "load_avg_after": 1.1})
    busy = run({"contended": 1.0, "other_busy_cores": 1.4, "load_avg_before": 3.2, "load_avg_after": 3.9})
    assert _contention(quiet) == [] and _contention(run({})) == []
    assert _contention(busy) == ["timed while other work held 1.4 cores (load 3.2 -> 3.9)"]
