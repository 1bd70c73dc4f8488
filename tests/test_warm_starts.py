"""Warm starts ([[warm_start]]): the known recipes run right after the baseline, in the file's order,
named in the report and --status; queued once (a resumed study does not queue them again); a bad
one is one sentence when the file loads."""

from __future__ import annotations

import textwrap

import optuna
import pandas as pd
import pytest

from harness.cli import main
from harness.errors import UserError
from harness.specs import study_spec
from harness.studies import baseline, warm_starts
from harness.studies.trial_tags import WARM_START_ATTR
from harness.store.tracking import Store
from conftest import assert_one_sentence_exit_2, mlflow_client

NATIVE_BF16 = "avx2 avx512f avx512_bf16"   # HARNESS_CPU_FLAGS of a host that computes bf16 itself

TINY_WARM_STUDY = """\
    name = "study_tinywarm"
    experiment = "recipe"
    metrics = ["test_accuracy"]
    directions = ["maximize"]
    n_trials = 5
    isolation = "none"

    [space]
    channels_last = { choices = [false, true] }
    execution = { choices = [{ execution = "eager" }, { execution = "compile", compile_backend = "eager" }] }
    dtype = { choices = ["fp32", "bf16"] }
    batch_size = { choices = [32, 64] }
    lr_factor = { choices = [1.0, 2.0, 4.0] }

    [baseline]
    name = "plain loop"
    [baseline.params]
    channels_last = false
    execution = { execution = "eager" }
    dtype = "fp32"
    batch_size = 32
    lr_factor = 1.0

    [[warm_start]]
    name = "wide batch"
    params = { batch_size = 64, lr_factor = 2.0 }
    [[warm_start]]
    name = "tuned + channels_last"
    params = { lr_factor = "tuned", channels_last = true }
    [[warm_start]]
    name = "bf16 stack"
    params = { dtype = "bf16", channels_last = true, batch_size = 64 }

    [sampler]
    name = "random"
    seed = 3

    [base]
    model = "tiny_cnn"
    dataset = "synthetic"
    train_limit = 128
    test_limit = 64
    optimizer = "adam"
    lr = 0.01
    lr_base_batch = 32
    epochs = 1
    threads = 1
    """


def write(folder, replace=(), warm_starts=True):
    text = textwrap.dedent(TINY_WARM_STUDY)
    if not warm_starts:
        text = text[:text.index("[[warm_start]]")] + text[text.index("[sampler]"):]
    for old, new in replace:
        assert old in text
        text = text.replace(old, new)
    path = folder / "study_tinywarm.toml"
    path.write_text(text)
    return path


def run(path, folder, *args):
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    code = main(["study", str(path), "--tracking-uri", uri, "--no-progress", "--out", str(folder / "out"), *args])
    return code, optuna.load_study(study_name="study_tinywarm-full", storage=f"sqlite:///{folder / 'optuna.db'}")


def test_warm_starts_run_after_the_baseline_in_order_named_and_once(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_CPU_FLAGS", NATIVE_BF16)
    path = write(tmp_path)
    code, study = run(path, tmp_path)
    assert code == 0
    trials = study.trials
    assert len(trials) == 5 and trials[0].user_attrs[baseline.BASELINE_ATTR]
    assert [t.user_attrs.get(WARM_START_ATTR) for t in trials] == [None, "wide batch", "tuned + channels_last",
                                                                   "bf16 stack", None]
    # a warm start sets what it names; the rest is the baseline's ("tuned": the baseline's own x1 here)
    assert trials[1].params == {"channels_last": False, "execution": "execution=eager", "dtype": "fp32",
                                "batch_size": 64, "lr_factor": 2.0}
    assert trials[2].params["lr_factor"] == 1.0 and trials[2].params["channels_last"] is True
    assert trials[3].params["dtype"] == "bf16" and trials[3].params["lr_factor"] == 1.0
    out = capsys.readouterr().out
    assert "queued 3 warm start(s): wide batch, tuned + channels_last, bf16 stack" in out
    client = mlflow_client(Store(f"sqlite:///{tmp_path / 'mlflow.db'}"))   # its MLflow run is named so too
    assert client.get_run(trials[1].user_attrs["mlflow_run_id"]).info.run_name.endswith("(warm start: wide batch)")

    # the report and --status name each warm start beside its trial
    every = pd.read_csv(tmp_path / "out" / "study_tinywarm-full-trials.csv", keep_default_na=False)
    assert list(every.columns[:2]) == ["trial", "warm_start"]
    assert dict(zip(every["trial"], every["warm_start"])) == {0: "", 1: "wide batch", 2: "tuned + channels_last",
                                                              3: "bf16 stack", 4: ""}
    assert main(["study", str(path), "--status", "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"]) == 0
    status = capsys.readouterr().out
    assert "| trial | warm_start |" in status

    # resumed with a larger target: sampled trials only, no warm start queued again
    code, study = run(path, tmp_path, "--n-trials", "7")
    assert code == 0 and len(study.trials) == 7
    names = [t.user_attrs.get(WARM_START_ATTR) for t in study.trials]
    assert names[5:] == [None, None] and sorted(filter(None, names)) == ["bf16 stack", "tuned + channels_last",
                                                                          "wide batch"]
    assert "queued" not in capsys.readouterr().out


def test_a_study_that_ran_sampled_trials_before_its_warm_starts_does_not_get_them(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_CPU_FLAGS", NATIVE_BF16)
    without = write(tmp_path, warm_starts=False)
    assert run(without, tmp_path, "--n-trials", "2")[0] == 0
    path = write(tmp_path)   # the same space: the same study, now with warm starts in its file
    code, study = run(path, tmp_path, "--n-trials", "3")
    assert code == 0 and not any(WARM_START_ATTR in t.user_attrs for t in study.trials)
    assert "warm starts not queued: the study ran sampled trials before its file had them" in capsys.readouterr().out


def test_a_warm_start_that_repeats_the_baseline_is_left_out_with_a_line(tmp_path, monkeypatch, capsys):
    """At a scale without a calibration "tuned" is the baseline's own factor: the tuned loop is the baseline."""
    spec = study_spec.load(str(write(tmp_path, replace=[('params = { lr_factor = "tuned", channels_last = true }',
                                                         'params = { lr_factor = "tuned" }')])))
    planned = warm_starts.plan(spec, "full")
    assert [name for name, _ in planned.starts] == ["wide batch", "bf16 stack"]
    assert planned.left_out == ["warm start 'tuned + channels_last' left out: at scale full it sets the values of "
                                "the baseline (plain loop)"]


def test_tuned_is_the_calibrated_factor_and_one_the_space_lacks_is_one_sentence(tmp_path, monkeypatch):
    from harness.studies import trial_target

    spec = study_spec.load(str(write(tmp_path)))
    monkeypatch.setattr(trial_target, "tuned_factor", lambda spec, scale: 4.0)
    assert dict(warm_starts.plan(spec, "full").starts)["tuned + channels_last"]["lr_factor"] == 4.0
    monkeypatch.setattr(trial_target, "tuned_factor", lambda spec, scale: 8.0)
    with pytest.raises(UserError) as err:
        warm_starts.plan(spec, "full")
    assert "'tuned + channels_last' trains at the tuned lr_factor 8" in str(err.value)
    assert "does not offer (1.0, 2.0, 4.0); add it to [space]." in str(err.value)


@pytest.mark.parametrize("replace, words", [
    ((("params = { batch_size = 64, lr_factor = 2.0 }", "params = { batch_size = 64, momentum = 0.9 }"),),
     ["[[warm_start]] 'wide batch' sets 'momentum', which [space] does not search"]),
    ((("params = { batch_size = 64, lr_factor = 2.0 }", "params = { batch_size = 48 }"),),
     ["[[warm_start]] 'wide batch' sets batch_size = 48, which is not a value [space] allows", "(32, 64)"]),
    ((("params = { batch_size = 64, lr_factor = 2.0 }", 'params = { batch_size = "tuned" }'),),
     ["batch_size = 'tuned'", 'only lr_factor takes "tuned"']),
    ((("params = { batch_size = 64, lr_factor = 2.0 }", 'params = { execution = "execution=compile" }'),),
     ["execution = 'execution=compile', which is not a value [space] allows"]),
    ((('name = "bf16 stack"', 'name = "wide batch"'),), ["'wide batch' is named twice"]),
    ((("params = { batch_size = 64, lr_factor = 2.0 }", "params = {}"),), ["warm_start.0.params", "at least 1 item"]),
])
def test_a_bad_warm_start_is_one_sentence_when_the_file_loads(tmp_path, capsys, replace, words):
    path = write(tmp_path, replace=replace)
    assert_one_sentence_exit_2(["study", str(path), "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"], words, capsys)
    assert not (tmp_path / "optuna.db").exists()   # refused before the study was made


def test_the_shipped_speed_recipe_study_warm_starts_from_the_book_methods():
    spec = study_spec.load("speed_recipe")
    from harness.studies import trial_target

    cpu = dict(warm_starts.plan(spec, "cpu").starts)   # tuned: the committed calibration's factor
    tuned = trial_target.tuned_factor(spec, "cpu")
    book = {name: p for name, p in cpu.items() if "one-cycle" not in name}
    assert len(book) == 9 and {p["lr_factor"] for p in book.values()} == {tuned}
    beyond = [p for name, p in cpu.items() if "one-cycle" in name]
    assert len(beyond) == 3 and all(p["lr_factor"] == 128.0 and p["lr_schedule"] != "lr_schedule=constant"
                                    for p in beyond)
    stack = cpu["stack: bf16 + channels_last + batch 128 + sparsity 0.25"]
    assert (stack["dtype"], stack["channels_last"], stack["batch_size"], stack["sparsity"]) == ("bf16", True, 128, 0.25)
    smoke = warm_starts.plan(spec, "smoke")   # no calibration: the tuned loop is the baseline itself
    assert len(smoke.starts) == 11 and smoke.left_out[0].startswith("warm start 'tuned loop' left out")


def test_without_a_baseline_warm_starts_run_first_and_the_sampler_draws_what_they_leave(study_file, tmp_path):
    path = study_file("nobase", n_trials=3, base={"epochs": 1},
                      space='lr = { type = "float", low = 1e-3, high = 1e-1, log = true }\n'
                            'batch_size = { choices = [16, 32] }\n',
                      extra='[[warm_start]]\nname = "small batch"\nparams = { batch_size = 16 }\n'
                            '[[warm_start]]\nname = "set lr"\nparams = { lr = 0.01, batch_size = 32 }\n')
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["study", str(path), "--tracking-uri", uri, "--no-progress", "--out", str(tmp_path / "out")]) == 0
    study = optuna.load_study(study_name="nobase-full", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    assert [t.user_attrs.get(WARM_START_ATTR) for t in study.trials] == ["small batch", "set lr", None]
    assert study.trials[0].params["batch_size"] == 16 and 1e-3 <= study.trials[0].params["lr"] <= 1e-1
    assert study.trials[1].params == {"lr": 0.01, "batch_size": 32}
