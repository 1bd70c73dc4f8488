"""Every command a sweep's summary and its report print runs as pasted: it keeps the scale, the
`--set` overrides and the store the cells came from (harness/rerun.py). The test runs a tiny sweep
on a narrowed grid into a store of its own, with MLFLOW_TRACKING_URI pointing at a decoy store, then
pastes each printed `harness ...` command as a shell would split it, and checks that it measured the
same cells in the same store: a hint that dropped --set would run the file's whole grid, one that
dropped --scale the full scale, one that dropped --tracking-uri would write to the decoy."""

from __future__ import annotations

import re
import shlex
import subprocess

import pytest

from harness import folders
from harness.cli import decide, main
from harness.machine import machine_load
from harness.store import Store

HINT = re.compile(r"`(harness [^`]+)`")
# Commands the report names that take no sweep, scale or store (the peak cache is the machine's).
STORE_FREE = {"harness peak"}


class _Busy:
    def finish(self):
        return {"load_avg_before": 1.2, "load_avg_after": 2.3, "other_busy_cores": 1.6, "contended": 1.0}


class _Idle:
    def finish(self):
        return {"load_avg_before": 0.1, "load_avg_after": 0.1, "other_busy_cores": 0.0, "contended": 0.0}


def _hints(text: str) -> list[str]:
    """The commands in `text` that name a sweep; any other must be one that takes none."""
    found = list(dict.fromkeys(HINT.findall(text)))
    others = [h for h in found if shlex.split(h)[1] not in ("sweep", "report")]
    assert set(others) <= STORE_FREE, f"a printed command this test does not paste: {others}"
    return [h for h in found if h not in others]


def _paste(hint: str, capsys) -> str:
    """Run `hint` as pasted into bash: split as bash splits it (checked against bash itself), then
    `harness` with those words; its exit status must be 0. Returns what it printed."""
    words = shlex.split(hint)
    said = subprocess.run(["bash", "-c", f"printf '%s\\0' {hint}"], capture_output=True, text=True, check=True)
    assert said.stdout.split("\0")[:-1] == words, (hint, said.stdout)
    assert words[0] == "harness"
    capsys.readouterr()
    assert main(words[1:]) == 0, hint
    return capsys.readouterr().out


def _cells(store: Store, name: str) -> list:
    return store.sweep_runs(store.find_experiment(name), name)


def test_every_hint_the_summary_and_the_report_print_runs_as_pasted(sweep_file, tmp_path, monkeypatch, capsys):
    decoy = tmp_path / "decoy" / "mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{decoy}")
    monkeypatch.setattr(decide, "DEFAULT_MAX_REPEATS", 3)   # --until-decided's ceiling, for a short test
    monkeypatch.setattr(folders, "REPORTS_DIR", tmp_path / "reports")   # `harness report` writes there
    # the baseline's own speed-up is 1 with no interval: INCONCLUSIVE however many rounds
    check = ('[[checks]]\nkind = "bound"\nmetric = "speedup"\nmin = 0.5\nwhere = { sparsity = 0.0 }\n'
             'scales = ["smoke"]\n')
    path = sweep_file("pasted", {"sparsity": [0.0, 0.3, 0.5, 0.7]}, repeats=2, published=check)
    store = Store(f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    narrowed = ["--scale", "smoke", "--set", "sparsity=[0.0,0.5]", "--tracking-uri", store.uri]

    # A busy machine: every cell contended; the summary prints --remeasure-contended and the report.
    monkeypatch.setattr(machine_load, "LoadWatch", _Busy)
    assert main(["sweep", str(path), *narrowed, "--no-progress"]) == 0
    summary = capsys.readouterr().out
    hints = _hints(summary)
    remeasure = next(h for h in hints if h.endswith("--remeasure-contended"))
    report = next(h for h in hints if h.split()[1] == "report")
    assert len(hints) == 2, hints
    reported = _paste(report, capsys)
    assert "**Timed under contention**" in reported
    assert _hints(reported) == [remeasure], _hints(reported)   # the report gives the summary's command

    # Pasted on a quiet machine, it measures the same four cells again, in the same store.
    monkeypatch.setattr(machine_load, "LoadWatch", _Idle)
    again = _paste(remeasure, capsys)
    cells = _cells(store, "pasted")
    assert len(cells) == 4 and {c.params["sparsity"] for c in cells} == {"0.0", "0.5"}
    assert all(c.metrics["contended"] == 0 for c in cells) and all(c.tags["harness.scale"] == "smoke" for c in cells)
    assert _hints(again) == [report]

    # The check stays INCONCLUSIVE: the report prints --until-decided; pasted, it adds rounds to the
    # grid point the check reads (the baseline), up to the ceiling, and to no other point.
    reported = _paste(report, capsys)
    (until,) = _hints(reported)
    assert until.endswith("--until-decided") and "INCONCLUSIVE" in reported
    _paste(until, capsys)
    cells = _cells(store, "pasted")
    added = [c for c in cells if c.params["repeat"] == "2"]
    assert len(cells) == 5 and [c.params["sparsity"] for c in added] == ["0.0"], [c.name for c in cells]
    assert not decoy.exists(), "a pasted hint wrote to MLFLOW_TRACKING_URI's store, not the sweep's"


@pytest.mark.parametrize("overrides, words", [
    ({"sparsity": [0.0, 0.5], "train_limit": "1000"}, ["--set", "sparsity=[0.0,0.5]", "--set", "train_limit=1000"]),
    ({"dataset": "image folder"}, ["--set", "dataset=image folder"]),   # quoted for the shell
])
def test_a_hint_writes_the_overrides_as_the_command_line_reads_them_back(overrides, words, sweep_file, tmp_path):
    from harness.rerun import of_invocation
    from harness.specs import sweep_spec
    from harness.fields.config import parse_assignment

    spec = sweep_spec.load(str(sweep_file("words", {"sparsity": [0.0]})))
    command = shlex.split(of_invocation(spec, "quick", overrides, f"sqlite:///{tmp_path}/s.db")
                          .sweep_command("--until-decided"))
    assert command[:5] == ["harness", "sweep", str(spec.path.resolve()), "--scale", "quick"]
    assert command[5:5 + len(words)] == words and command[-1] == "--until-decided"
    assert dict(parse_assignment(w) for w in command[6:5 + len(words):2]) == overrides


def test_a_shipped_sweep_is_named_and_a_password_never_printed(monkeypatch):
    from harness.rerun import of_invocation
    from harness.specs import sweep_spec
    from harness.store.uris import DEFAULT_TRACKING_URI

    spec = sweep_spec.load("sparsity")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert of_invocation(spec, "smoke", {}, DEFAULT_TRACKING_URI).report_command() == \
        "harness report sparsity --scale smoke"   # the default store: found without the option
    secret = "postgresql://harness:s3cret@db/runs"
    assert "s3cret" not in of_invocation(spec, "smoke", {}, secret).report_command()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", secret)   # from the environment: read from there again
    assert of_invocation(spec, "smoke", {}, secret).report_command() == \
        'harness report sparsity --scale smoke --tracking-uri "$MLFLOW_TRACKING_URI"'
