"""harness/training/allocator.py: the `malloc` field each cell applies in the process that trains it. Each
check runs in a fresh interpreter (the setting lasts for the rest of a process), against glibc's own
behaviour read by the allocator probe of harness/machine/process_state.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from harness.training import allocator
from harness.folders import REPO_ROOT

pytestmark = pytest.mark.skipif(not allocator.glibc(), reason="glibc's malloc options only exist with glibc")

SCRIPT = """
import json, sys
from harness.training import allocator
from harness.machine import process_state
from harness.errors import CellSkipped
seen = {"fresh": process_state.allocator_returns_memory(), "keeps": allocator.keeps_freed()}
for mode in sys.argv[1:]:
    try:
        seen[mode] = allocator.apply(mode)[allocator.METRIC]
    except CellSkipped as err:
        seen[mode] = str(err)
    seen[mode + " probe"] = process_state.allocator_returns_memory()
print(json.dumps(seen))
"""


def _fresh(*modes: str, env: dict[str, str] | None = None) -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT, *modes], cwd=REPO_ROOT, capture_output=True, text=True,
                         timeout=120, check=True,
                         env={"PYTHONPATH": str(REPO_ROOT), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), **(env or {})})
    return json.loads(out.stdout.splitlines()[-1])


def test_keep_freed_makes_glibc_reuse_a_freed_large_block_instead_of_faulting_it_in_again():
    seen = _fresh("keep_freed")
    assert seen["fresh"] > 0.9 and seen["keeps"] is False   # glibc's default: an 8 MiB block faults every page
    assert seen["keep_freed"] == 1.0 and seen["keep_freed probe"] < 0.1   # kept on the heap: its pages reused


def test_glibc_default_leaves_a_fresh_process_as_glibc_starts_it():
    seen = _fresh("glibc_default")
    assert seen["glibc_default"] == 0.0 and seen["glibc_default probe"] > 0.9


def test_a_glibc_default_cell_after_keep_freed_in_one_process_is_a_skip_with_its_reason():
    seen = _fresh("keep_freed", "glibc_default")
    assert seen["glibc_default probe"] < 0.1   # refused: the process still keeps freed memory
    assert "malloc=glibc_default cannot run in a process that already keeps freed memory" in seen["glibc_default"]


def test_a_process_started_with_glibcs_variables_keeps_freed_memory_and_says_so():
    seen = _fresh("glibc_default", env={"MALLOC_MMAP_MAX_": "0"})
    assert seen["keeps"] is True and seen["glibc_default"] == 1.0   # the user's environment, recorded as it is


def test_every_cell_logs_the_malloc_param_and_what_was_in_effect(store):
    from experiments import make_config
    from harness.cells import run_single
    from conftest import TINY_BASE, mlflow_client

    # glibc_default, the default: this test process may not change its allocator for the tests after it
    result = run_single(make_config({**TINY_BASE, "epochs": 1}), store)
    run = mlflow_client(store).get_run(result.run_id)
    assert run.data.params["malloc"] == "glibc_default"
    assert run.data.metrics[allocator.METRIC] == float(allocator.keeps_freed())
