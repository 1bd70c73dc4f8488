"""A study's space fitted to its host: a dtype this CPU emulates leaves the space (what Optuna samples
from, the report and --status say so), --keep-emulated keeps it, and a study resumed on a host of
another class is refused before any trial. The CPU is faked with HARNESS_CPU_FLAGS, which every
process a study starts reads."""

from __future__ import annotations

import textwrap

import optuna
import pytest

from harness.cli import emulated_dtype, main
from harness.errors import UserError
from harness.specs import study_spec
from harness.studies import host_space
from conftest import assert_one_sentence_exit_2

EMULATES_BF16 = "avx2 avx512f"                 # no AVX512-BF16, no AMX: torch converts bf16 through fp32
NATIVE_BF16 = "avx2 avx512f avx512_bf16"       # computes bf16 itself (fp16 still emulated)

TINY_DTYPE_STUDY = """\
    name = "study_tinyhost"
    experiment = "recipe"
    metrics = ["test_accuracy"]
    directions = ["maximize"]
    n_trials = 3
    isolation = "none"

    [space]
    dtype = { choices = ["fp32", "bf16"] }
    batch_size = { choices = [32, 64] }

    [baseline]
    name = "plain loop"
    [baseline.params]
    dtype = "fp32"
    batch_size = 32

    [[warm_start]]
    name = "bf16"
    params = { dtype = "bf16" }

    [sampler]
    name = "random"
    seed = 2

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


def write(folder, text=TINY_DTYPE_STUDY, replace=()):
    text = textwrap.dedent(text)
    for old, new in replace:
        assert old in text
        text = text.replace(old, new)
    path = folder / "study_tinyhost.toml"
    path.write_text(text)
    return path


def run(path, folder, *args):
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    return main(["study", str(path), "--tracking-uri", uri, "--no-progress", "--out", str(folder / "out"), *args])


def load(folder):
    return optuna.load_study(study_name="study_tinyhost-full", storage=f"sqlite:///{folder / 'optuna.db'}")


def status(path, folder, capsys) -> str:
    capsys.readouterr()
    assert main(["study", str(path), "--status", "--tracking-uri", f"sqlite:///{folder / 'mlflow.db'}"]) == 0
    return capsys.readouterr().out


def test_an_emulating_host_leaves_the_dtype_out_of_the_space_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_CPU_FLAGS", EMULATES_BF16)
    path = write(tmp_path)
    assert run(path, tmp_path) == 0
    out = capsys.readouterr().out
    assert "study study_tinyhost (full): bf16 left out: this CPU emulates it; --keep-emulated keeps it" in out
    assert "warm start 'bf16' left out: this CPU emulates bf16; --keep-emulated keeps it" in out
    study = load(tmp_path)
    assert len(study.trials) == 3
    assert all(t.distributions["dtype"].choices == ("fp32",) for t in study.trials)   # what Optuna samples from
    host = study.user_attrs[host_space.HOST_ATTR]
    assert (host["native"], host["emulated"], host["left_out"]) == (["fp32"], ["bf16"], ["bf16"]) and host["cpu"]
    report = (tmp_path / "out" / "study_tinyhost-full.md").read_text()
    assert "space on this host: bf16 left out (emulated)" in report
    assert "warm start 'bf16' left out" in report
    assert "space on this host: bf16 left out (emulated)" in status(path, tmp_path, capsys)


def test_a_native_host_keeps_every_dtype(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_CPU_FLAGS", NATIVE_BF16)
    path = write(tmp_path)
    assert run(path, tmp_path, "--n-trials", "2") == 0
    assert "left out" not in capsys.readouterr().out
    study = load(tmp_path)
    assert all(t.distributions["dtype"].choices == ("fp32", "bf16") for t in study.trials)
    assert study.trials[1].params["dtype"] == "bf16"   # the bf16 warm start ran
    host = study.user_attrs[host_space.HOST_ATTR]
    assert (host["native"], host["emulated"], host["left_out"]) == (["fp32", "bf16"], [], [])
    assert "space on this host" not in (tmp_path / "out" / "study_tinyhost-full.md").read_text()


def test_keep_emulated_keeps_the_dtype_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_CPU_FLAGS", EMULATES_BF16)
    path = write(tmp_path)
    assert run(path, tmp_path, "--n-trials", "2", "--keep-emulated") == 0
    assert "bf16 kept although this CPU emulates it (--keep-emulated)" in capsys.readouterr().out
    study = load(tmp_path)
    assert all(t.distributions["dtype"].choices == ("fp32", "bf16") for t in study.trials)
    assert study.trials[1].params["dtype"] == "bf16"
    assert study.user_attrs[host_space.HOST_ATTR]["left_out"] == []
    assert "space on this host: bf16 kept although emulated" in status(path, tmp_path, capsys)


def test_a_study_resumed_on_a_host_of_another_class_is_refused_before_any_trial(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_CPU_FLAGS", EMULATES_BF16)
    path = write(tmp_path)
    assert run(path, tmp_path, "--n-trials", "1") == 0
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("HARNESS_CPU_FLAGS", NATIVE_BF16)
    capsys.readouterr()
    assert_one_sentence_exit_2(["study", str(path), "--tracking-uri", uri, "--n-trials", "3"],
                               ["ran on a host that computes fp32 itself and emulates bf16",
                                "this one computes fp32 and bf16 itself", "times from two classes of host do not mix"],
                               capsys)
    assert len(load(tmp_path).trials) == 1
    # the same class with the other choice of --keep-emulated is another space: refused too
    monkeypatch.setenv("HARNESS_CPU_FLAGS", EMULATES_BF16)
    assert main(["study", str(path), "--tracking-uri", uri, "--n-trials", "3", "--keep-emulated"]) == 2
    err = capsys.readouterr().err.splitlines()   # after the emulated-dtype line that --keep-emulated brings
    assert err[-1].startswith("harness: error:") and "was made without --keep-emulated (bf16 out of its space)" in err[-1]
    assert len(load(tmp_path).trials) == 1
    assert run(path, tmp_path, "--n-trials", "2") == 0 and len(load(tmp_path).trials) == 2   # its own class resumes


COMPOUND = """\
    [space]
    precision = { choices = [{ dtype = "fp32", grad_scaler = false }, { dtype = "bf16", grad_scaler = false },
                             { dtype = "fp16", grad_scaler = true }] }
    batch_size = { choices = [32, 64] }

    [baseline]
    name = "plain loop"
    [baseline.params]
    precision = { dtype = "fp32", grad_scaler = false }
    batch_size = 32

    [sampler]"""


def compound_spec(tmp_path, replace=()):
    text = textwrap.dedent(TINY_DTYPE_STUDY)
    text = text[:text.index("[space]")] + textwrap.dedent(COMPOUND) + text[text.index("[sampler]") + len("[sampler]"):]
    for old, new in replace:
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "study_tinyhost.toml"
    path.write_text(text)
    return path


def test_compound_choices_lose_the_emulated_dtypes_and_the_baselines_stays(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_CPU_FLAGS", NATIVE_BF16)
    spec = study_spec.load(str(compound_spec(tmp_path)))
    fitted = host_space.fit(spec, "full", {}, keep_emulated=False)
    assert [c["dtype"] for c in fitted.space["precision"].choices] == ["fp32", "bf16"]
    assert [c["dtype"] for c in spec.space["precision"].choices] == ["fp32", "bf16", "fp16"]   # the file's, untouched
    assert host_space.lines(fitted) == ["fp16 left out: this CPU emulates it; --keep-emulated keeps it"]
    assert host_space.worker_args(fitted) == []
    kept = host_space.fit(spec, "full", {}, keep_emulated=True)
    assert len(kept.space["precision"].choices) == 3 and host_space.worker_args(kept) == ["--keep-emulated"]

    # a baseline in an emulated dtype keeps it (Optuna must find the baseline's value), and is warned of
    monkeypatch.setenv("HARNESS_CPU_FLAGS", EMULATES_BF16)
    spec = study_spec.load(str(compound_spec(tmp_path, replace=[
        ('precision = { dtype = "fp32", grad_scaler = false }\nbatch', 'precision = { dtype = "bf16", grad_scaler = false }\nbatch')])))
    fitted = host_space.fit(spec, "full", {}, keep_emulated=False)
    assert [c["dtype"] for c in fitted.space["precision"].choices] == ["fp32", "bf16"]
    assert host_space.lines(fitted) == ["fp16 left out: this CPU emulates it; --keep-emulated keeps it",
                                        "bf16 kept although this CPU emulates it (the baseline trains in it)"]
    emulated_dtype.warn_study(fitted, "full", fitted.fixed("full", {}))
    assert "study study_tinyhost (full) trains in bf16" in capsys.readouterr().err


def test_a_choice_left_with_no_option_is_one_sentence(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_CPU_FLAGS", EMULATES_BF16)
    path = compound_spec(tmp_path, replace=[('{ dtype = "fp32", grad_scaler = false }, { dtype = "bf16"',
                                             '{ dtype = "bf16"'),
                                            ('precision = { dtype = "fp32", grad_scaler = false }\nbatch',
                                             'precision = { dtype = "fp16", grad_scaler = true }\nbatch')])
    spec = study_spec.load(str(path))
    spec.baseline = None   # a baseline in fp16 would keep fp16
    with pytest.raises(UserError, match="every choice of 'precision' trains in bf16 and fp16, which this CPU emulates"):
        host_space.fit(spec, "full", {}, keep_emulated=False)
    path.write_text(path.read_text().replace(path.read_text()[path.read_text().index("[baseline]"):
                                                              path.read_text().index("[sampler]")], ""))
    assert_one_sentence_exit_2(["study", str(path), "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"],
                               ["every choice of 'precision'", "--keep-emulated"], capsys)
    assert not (tmp_path / "optuna.db").exists()


def test_a_dtype_left_out_is_not_warned_of_and_a_gpu_or_fp32_study_is_not_fitted(monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_CPU_FLAGS", EMULATES_BF16)
    spec = study_spec.load("speed_recipe")
    fitted = host_space.fit(spec, "cpu", {}, keep_emulated=False)
    assert fitted.space["dtype"].choices == ["fp32"]
    emulated_dtype.warn_study(fitted, "cpu", fitted.fixed("cpu", {}))
    assert capsys.readouterr().err == ""
    emulated_dtype.warn_study(spec, "cpu", spec.fixed("cpu", {}))   # the file's space would have been told
    assert "trains in bf16" in capsys.readouterr().err
    lr_batch = study_spec.load("lr_batch")   # fp32 only
    assert host_space.fit(lr_batch, "smoke", {}, keep_emulated=False) is lr_batch
    airbench = study_spec.load("airbench_cpu")   # its quick scale trains on a GPU
    assert host_space.fit(airbench, "quick", {}, keep_emulated=False) is airbench


def test_a_study_made_before_the_fit_is_told_to_resume_with_keep_emulated(tmp_path, monkeypatch, capsys):
    from harness.studies.study_storage import open_study

    path = write(tmp_path)
    # made by a harness that did not fit spaces: the file's whole space recorded, no host class
    open_study(study_spec.load(str(path)), "study_tinyhost-full", f"sqlite:///{tmp_path / 'optuna.db'}", create=True)
    monkeypatch.setenv("HARNESS_CPU_FLAGS", EMULATES_BF16)
    capsys.readouterr()
    assert_one_sentence_exit_2(["study", str(path), "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}"],
                               ["was made before emulated dtypes left a study's space, with bf16 in its space",
                                "resume it with --keep-emulated"], capsys)
    assert run(path, tmp_path, "--n-trials", "1", "--keep-emulated") == 0
    assert load(tmp_path).user_attrs[host_space.HOST_ATTR]["left_out"] == []
