"""A sweep file that extends another (`extends = "resnet"`) holds only its table and what differs:
how the two merge, the mistakes refused in one sentence, the shipped files that extend giving back
key for key the settings they held whole before (their cell ids and committed pages stand on them),
and `make sweep-resnet` finding the files that extend resnet.toml from the files themselves."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import textwrap
import tomllib

import pytest
from conftest import assert_one_sentence_exit_2, write_sweep

from harness.errors import UserError
from harness.folders import REPO_ROOT, SWEEPS_DIR
from harness.specs import extends, sweep_spec

PARENT = {
    "name": "parent", "title": "P", "source": "the book", "experiment": "pruning", "repeats": 3,
    "base": {"model": "cnn", "epochs": 10, "lr": 0.1},
    "grid": {"sparsity": [0.0, 0.5]},
    "scales": {"smoke": {"repeats": 1, "epochs": 1, "grid": {"sparsity": [0.0]}},
               "quick": {"epochs": 2, "train_limit": 100}},
    "report": {"x": "sparsity", "baseline": {"sparsity": 0.0}},
    "published": {"rows": [{"sparsity": 0.0, "train_time_s": 1.0}]},
}


# --- the merge ---------------------------------------------------------------------------------
def test_base_and_scales_merge_key_by_key_and_the_rest_is_taken_whole():
    child = {"extends": "parent", "name": "child", "base": {"lr": 0.2, "batch_size": 64},
             "scales": {"quick": {"train_limit": 50}, "cpu": {"threads": 1}},
             "report": {"x": "sparsity"}}
    merged = extends.merge(PARENT, child)
    assert merged["base"] == {"model": "cnn", "epochs": 10, "lr": 0.2, "batch_size": 64}
    assert merged["scales"]["quick"] == {"epochs": 2, "train_limit": 50}
    assert merged["scales"]["cpu"] == {"threads": 1} and list(merged["scales"]) == ["smoke", "quick", "cpu"]
    assert merged["report"] == {"x": "sparsity"}               # whole: the parent's baseline is not mixed in
    assert merged["grid"] == PARENT["grid"] and merged["published"] == PARENT["published"]
    assert merged["scales"]["smoke"]["grid"] == {"sparsity": [0.0]}   # no grid of its own: the parent's
    assert (merged["repeats"], merged["experiment"], merged["source"]) == (3, "pruning", "the book")
    assert merged["name"] == "child" and "title" not in merged and "extends" not in merged
    assert PARENT["base"] == {"model": "cnn", "epochs": 10, "lr": 0.1}   # neither file is changed


def test_a_child_grid_replaces_the_parents_grids_and_frees_what_it_sweeps():
    """The parent fixed epochs in base and in each scale; a child sweeping epochs inherits none of
    them (a scale's fixed epochs would pin the child's axis), nor the parent's narrowed scale grids."""
    child = {"extends": "parent", "name": "child", "grid": {"epochs": [1, 2]},
             "scales": {"quick": {"grid": {"lr": [0.1, 0.2]}}}}
    merged = extends.merge(PARENT, child)
    assert merged["grid"] == {"epochs": [1, 2]}
    assert merged["base"] == {"model": "cnn", "lr": 0.1}
    assert merged["scales"]["smoke"] == {"repeats": 1}
    assert merged["scales"]["quick"] == {"train_limit": 100, "grid": {"lr": [0.1, 0.2]}}


def test_a_compound_axis_frees_each_field_it_varies():
    child = {"extends": "parent", "name": "child",
             "grid": {"layout": [{"epochs": 1, "lr": 0.1}, {"epochs": 2, "lr": 0.2}]}}
    assert extends.merge(PARENT, child)["base"] == {"model": "cnn"}


def test_unset_leaves_out_an_inherited_key():
    child = {"extends": "parent", "name": "child", "unset": ["scales.quick.epochs", "published"]}
    merged = extends.merge(PARENT, child)
    assert merged["scales"]["quick"] == {"train_limit": 100} and "published" not in merged and "unset" not in merged


@pytest.mark.parametrize("child, words", [
    ({"unset": ["scales.quick.epoch"]}, "unset names 'scales.quick.epoch', which the parent does not set"),
    ({"unset": "scales.quick.epochs"}, "unset must be a list"),
])
def test_an_unset_that_leaves_out_nothing_is_refused(child, words):
    with pytest.raises(extends.Refused, match=re.escape(words)):
        extends.merge(PARENT, {"extends": "parent", "name": "child", **child})


def test_a_parent_that_itself_extends_is_refused():
    with pytest.raises(extends.Refused, match="which itself extends 'grandparent'"):
        extends.merge({**PARENT, "extends": "grandparent"}, {"extends": "parent", "name": "child"}, "parent.toml")


# --- reading files: the refusals, one sentence each ---------------------------------------------
def _child(folder, name, text):
    path = folder / f"{name}.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_a_file_that_extends_loads_as_the_whole_sweep(tmp_path):
    write_sweep(tmp_path, "family", {"sparsity": [0.0, 0.5]}, repeats=2)
    path = _child(tmp_path, "family-lr", """\
        extends = "family"
        name = "family-lr"
        [base]
        lr = 0.02
        [grid]
        sparsity = [0.5]
        """)
    spec = sweep_spec.load(str(path))
    assert (spec.name, spec.title, spec.experiment, spec.repeats) == ("family-lr", "family-lr", "pruning", 2)
    assert spec.base["lr"] == 0.02 and spec.base["model"] == "tiny_cnn"
    assert spec.fixed("smoke")["epochs"] == 1 and spec.report["x"] == "sparsity"
    assert [c.values["sparsity"] for c in sweep_spec.expand(spec, "smoke")] == [0.5, 0.5]


@pytest.mark.parametrize("text, words", [
    ('extends = "family-lr"\nname = "grandchild"\n', ["grandchild.toml", "family-lr.toml, which itself extends 'family'",
                                                      "extend 'family'"]),
    ('extends = "famly"\nname = "grandchild"\n', ["grandchild.toml", "no famly.toml beside it", "did you mean 'family'?"]),
    ('extends = "grandchild"\nname = "grandchild"\n', ["grandchild.toml", "names this very file"]),
    ('extends = 3\nname = "grandchild"\n', ["grandchild.toml", "extends must name a sweep file", "(got 3)"]),
    ('name = "grandchild"\nunset = ["base.lr"]\n', ["grandchild.toml", "extends none"]),
    ('extends = "family"\nname = "grandchild"\nunset = ["base.lrr"]\n', ["unset names 'base.lrr'", "family.toml does not set"]),
])
def test_a_mistake_in_how_a_file_extends_is_one_sentence_and_exit_2(tmp_path, capsys, text, words):
    write_sweep(tmp_path, "family", {"sparsity": [0.0, 0.5]})
    _child(tmp_path, "family-lr", 'extends = "family"\nname = "family-lr"\n')
    path = _child(tmp_path, "grandchild", text + '[grid]\nsparsity = [0.0]\n')
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert_one_sentence_exit_2(["sweep", str(path), "--scale", "smoke", "--tracking-uri", uri], words, capsys)
    assert not (tmp_path / "mlflow.db").exists()   # refused before a store was opened
    with pytest.raises(UserError, match=r"\.$"):
        sweep_spec.load(str(path))


# --- the shipped files that extend -------------------------------------------------------------
# What each exercise of D12.6 held itself before it extended resnet.toml, key for key (its model,
# data, devices and scales are resnet.toml's; its own: world size 2 and the two settings its axis
# leaves fixed, the grids, and base's 10 epochs at the quick scale where resnet trains 2).
_BASE = {"model": "resnet18_d2l", "dataset": "fashion_mnist", "warmup_epochs": 1, "optimizer": "sgd",
         "weight_decay": 0.0, "batch_is_global": True, "device": "cuda", "backend": "nccl", "eval_batch_size": 256,
         "world_size": 2}
_SMOKE = {"repeats": 1, "dataset": "digits", "train_limit": 128, "test_limit": 128, "device": "cpu",
          "backend": "gloo", "threads": 1}
_QUICK = {"train_limit": 10000, "test_limit": 2000}
_CPU = {"dataset": "imagefolder_grey28", "train_limit": 6000, "test_limit": 2000, "warmup_epochs": 0,
        "device": "cpu", "backend": "gloo", "threads": 1}
SHIPPED = {
    "resnet-lr": {
        "base": {**_BASE, "batch_size": 512, "epochs": 10},
        "grid": {"lr": [0.05, 0.1, 0.2, 0.3, 0.4]},
        "scales": {"smoke": {**_SMOKE, "batch_size": 64, "epochs": 1, "grid": {"lr": [0.05, 0.2, 0.4]}},
                   "quick": _QUICK, "cpu": {**_CPU, "epochs": 2}, "full": {}}},
    "resnet-batch": {
        "base": {**_BASE, "lr": 0.2, "epochs": 10},
        "grid": {"batch_size": [128, 256, 512, 1024]},
        "scales": {"smoke": {**_SMOKE, "lr": 0.2, "epochs": 1, "grid": {"batch_size": [32, 64, 128]}},
                   "quick": _QUICK, "cpu": {**_CPU, "epochs": 2}, "full": {}}},
    "resnet-epochs": {
        "base": {**_BASE, "batch_size": 512, "lr": 0.2},
        "grid": {"epochs": [5, 10, 20, 30]},
        "scales": {"smoke": {**_SMOKE, "batch_size": 64, "lr": 0.2, "grid": {"epochs": [1, 2, 3]}},
                   "quick": _QUICK, "cpu": {**_CPU, "grid": {"epochs": [1, 2, 4, 6]}}, "full": {}}},
}


def _extending() -> dict[str, str]:
    """Each shipped sweep file that extends another, with the one it extends."""
    found = {p.stem: tomllib.loads(p.read_text()).get("extends") for p in SWEEPS_DIR.glob("*.toml")}
    return {name: parent for name, parent in found.items() if parent is not None}


def test_every_shipped_file_that_extends_has_its_checked_expectation():
    assert sorted(_extending()) == sorted(SHIPPED)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_a_shipped_file_that_extends_gives_back_what_it_held(name):
    merged, wanted = extends.read(SWEEPS_DIR / f"{name}.toml"), SHIPPED[name]
    assert (merged["experiment"], merged["repeats"]) == ("data_parallel", 3)
    assert merged["base"] == wanted["base"]
    assert merged["grid"] == wanted["grid"]
    assert merged["scales"] == wanted["scales"] and list(merged["scales"]) == list(wanted["scales"])
    spec = sweep_spec.load(name)
    assert spec.base == wanted["base"] and spec.grid == wanted["grid"] and spec.repeats_at("smoke") == 1
    for scale, values in wanted["scales"].items():
        assert spec.scale_values(scale) == {k: v for k, v in values.items() if k not in ("grid", "repeats")}
        assert spec.scale_grids.get(scale) == values.get("grid")


def test_the_recompute_reader_merges_as_the_harness_does():
    found = importlib.util.spec_from_file_location("read_store", REPO_ROOT / "results" / "recompute" / "read_store.py")
    read_store = importlib.util.module_from_spec(found)
    found.loader.exec_module(read_store)
    for name in SHIPPED:
        spec = read_store.load_sweep(REPO_ROOT, name)
        assert spec.pop("axes") == list(SHIPPED[name]["grid"])
        assert spec == extends.read(SWEEPS_DIR / f"{name}.toml")
        assert read_store.repeats_at(spec, "cpu") == 3


def test_make_sweep_resnet_runs_resnet_and_every_file_that_extends_it():
    """No list of D12.6's sweeps in the Makefile: a file joins `make sweep-resnet` by extending resnet.toml."""
    family = ["resnet", *sorted(n for n, parent in _extending().items() if parent == "resnet")]
    for target in ("sweep-resnet", "report-resnet"):
        dry = subprocess.run(["make", "-n", target, "SCALE=smoke"], cwd=REPO_ROOT, capture_output=True, text=True,
                             check=True).stdout
        assert re.search(r"for s in (.*?); do", dry).group(1).split() == family, dry
    assert "RESNET_SWEEPS" not in (REPO_ROOT / "Makefile").read_text()
