"""A reproduction or a study refuses to start from a working tree with uncommitted changes (its runs
would record a commit whose code they did not run) unless told --allow-dirty; the suite itself runs
with HARNESS_ALLOW_DIRTY=1 (tests/conftest.py), which these tests take away."""

from __future__ import annotations

import pytest

from harness.cli import dirty_tree, main
from harness.errors import UserError

CHANGED = [" M harness/report/checks.py", " M sweeps/sparsity.toml"]


@pytest.fixture
def dirty(monkeypatch):
    monkeypatch.delenv(dirty_tree.ALLOW_ENV, raising=False)
    monkeypatch.setattr(dirty_tree, "uncommitted", lambda: CHANGED)


def test_a_dirty_tree_is_refused_in_one_sentence_naming_the_files_and_the_way_out(dirty):
    with pytest.raises(UserError, match=r"harness reproduce refuses to start .* \(harness/report/checks.py, "
                                        r"sweeps/sparsity.toml\).*--allow-dirty"):
        dirty_tree.refuse_dirty(False, "harness reproduce")
    dirty_tree.refuse_dirty(True, "harness reproduce")   # --allow-dirty


def test_a_clean_tree_or_no_checkout_starts(monkeypatch):
    monkeypatch.delenv(dirty_tree.ALLOW_ENV, raising=False)
    for status in ([], None):   # clean; not a git checkout: nothing to record either way
        monkeypatch.setattr(dirty_tree, "uncommitted", lambda status=status: status)
        dirty_tree.refuse_dirty(False, "harness study")


def test_the_study_command_refuses_a_dirty_tree_before_it_runs_anything(dirty, tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    assert main(["study", "lr_batch", "--scale", "smoke", "--tracking-uri", uri]) == 2
    assert "harness study refuses to start from a working tree with uncommitted changes" in capsys.readouterr().err
    assert not (tmp_path / "mlflow.db").exists()
