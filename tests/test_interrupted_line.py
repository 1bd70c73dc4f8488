"""The line Ctrl-C leaves a sweep with says that a cell reruns only when one was cut short, and names
it; stopped before the first cell (or between cells), it says the same command resumes the sweep."""

from __future__ import annotations

import dataclasses


def test_an_interrupt_before_any_cell_started_does_not_say_one_reruns(tmp_path, monkeypatch, capsys):
    from conftest import write_sweep

    from harness.cli import main
    from harness.sweeps import sweep_engine

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_engine, "measure_speed", interrupted)   # the calibration, before the first cell
    path = write_sweep(tmp_path, "early", {"sparsity": [0.0]})
    assert main(["sweep", str(path), "--no-progress", "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"]) == 130
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line == "harness: interrupted; finished cells are kept, the same command resumes the sweep."


def test_an_interrupt_inside_a_cell_names_the_cell_that_reruns(tmp_path, monkeypatch, capsys):
    import experiments.descriptors.pruning as pruning
    from conftest import write_sweep

    from harness.cli import main

    def cut(cfg, on_epoch=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(pruning, "EXPERIMENT", dataclasses.replace(pruning.EXPERIMENT, run=cut))
    path = write_sweep(tmp_path, "cut", {"sparsity": [0.0]})
    assert main(["sweep", str(path), "--no-progress", "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"]) == 130
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line == "harness: interrupted; finished cells are kept, the interrupted one (sparsity=0.0) reruns next time."
