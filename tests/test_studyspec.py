"""Study files and the study command's mistakes: one sentence, exit 2, no password echoed."""

import pytest
from conftest import assert_one_sentence_exit_2

from harness.specs import study_spec
from harness.cli import main
from harness.errors import UserError

LR = 'lr = { type = "float", low = 1e-3, high = 1e-1, log = true }\n'


@pytest.mark.parametrize("name", study_spec.available())
def test_shipped_studies_load_and_every_range_end_is_a_valid_config(name):
    spec = study_spec.load(name)
    assert spec.space and spec.n_trials["smoke"] > 0
    for scale in ("smoke", "quick", "full"):
        spec.fixed(scale)


def test_shipped_studies_are_hidden_from_sweeps_and_named_either_way():
    from harness.specs import sweep_spec

    assert not any(n.startswith("study") for n in sweep_spec.available())
    assert study_spec.load("lr_batch").path == study_spec.load("study_lr_batch").path
    tradeoff = study_spec.load("sparsity_tradeoff")
    assert tradeoff.metrics == ["test_accuracy", "train_time_s"] and tradeoff.multi_objective


def test_space_kinds_and_study_names(study_file):
    spec = study_spec.load(str(study_file("kinds", space=LR + 'batch_size = { type = "int", low = 16, high = 64 }\n'
                                                       'optimizer = { choices = ["adam", "sgd"] }\n')))
    assert [p.type for p in spec.space.values()] == ["float", "int", "categorical"]
    assert spec.space["lr"].log
    assert spec.study_name("smoke") == "kinds-smoke"
    assert spec.study_name("smoke", {"epochs": "3"}) != spec.study_name("smoke", {"epochs": "4"})


@pytest.mark.parametrize("kwargs, words", [
    ({"space": 'lr = { type = "float", low = 0.1, high = 0.01 }\n'}, ["lr", "empty or inverted"]),
    ({"space": 'lr = { type = "float", low = 0.1, high = 0.1 }\n'}, ["lr", "empty or inverted"]),
    ({"space": 'lr = { type = "float", low = 0.0, high = 0.1, log = true }\n'}, ["log-scaled"]),
    ({"space": 'epochs = { type = "int", low = 5, high = 2 }\n'}, ["epochs", "empty or inverted"]),
    ({"space": 'optimizer = { type = "categorical", choices = [] }\n'}, ["non-empty list"]),
    ({"space": 'colour = { choices = ["red"] }\n'}, ["unknown config key 'colour'"]),
    ({"space": 'sparsity = { type = "float", low = 0.0, high = 1.5 }\n'}, ["sparsity=1.5", "[0, 1)"]),
    ({"space": LR, "metrics": ["test_acc"]}, ["unknown metric 'test_acc'", "test_accuracy"]),
    ({"space": LR, "metrics": ["test_accuracy"], "directions": ["minimize"]},
     ["minimize test_accuracy", "should be maximize"]),
    ({"space": LR, "metrics": ["test_accuracy", "train_time_s"], "directions": ["maximize"]},
     ["2 metric(s)", "1 direction(s)"]),
    ({"space": LR, "directions": ["upward"]}, ["'upward'", "'maximize' or 'minimize'"]),
    ({"space": LR, "metrics": ["test_accuracy", "train_time_s"], "directions": ["maximize", "minimize"],
      "extra": '[pruner]\nname = "median"\n'}, ["pruner", "single-objective"]),
    ({"space": LR, "extra": '[pruner]\nname = "median"\n'}, ["eval_every_epoch = true"]),
    ({"space": LR, "extra": '[sampler]\nname = "genetic"\n'}, ["unknown sampler 'genetic'"]),
    ({"space": LR, "extra": '[pruner]\nname = "prune_all"\n'}, ["unknown pruner 'prune_all'", "median"]),
    ({"space": LR, "extra": '[sampler]\nname = "tpe"\nn_startup = 3\n'}, ["[sampler] tpe: unknown key 'n_startup'", "n_startup_trials"]),
    ({"space": LR, "extra": '[sampler]\nname = "nsga2"\npopulation_size = 1\n'}, ["population_size", "greater than or equal to 2"]),
    ({"space": LR, "extra": '[pruner]\nname = "threshold"\n'}, ["[pruner] threshold: needs lower or upper"]),
    ({"space": LR, "extra": '[pruner]\nname = "percentile"\npercentile = 150.0\n'}, ["percentile", "less than or equal to 100"]),
    ({"space": LR, "base": {"dtype": "bf16"}}, ["study file", "experiment 'pruning' does not read 'dtype'"]),
    ({"space": LR + 'execution = { choices = ["eager", "script"] }\n'}, ["study file", "does not read 'execution'"]),
])
def test_bad_study_files_are_one_sentence(study_file, kwargs, words):
    path = study_file("bad", **kwargs)
    with pytest.raises(UserError) as err:
        study_spec.load(str(path))
    for word in words:
        assert word in str(err.value)


@pytest.fixture(scope="module")
def uri(tmp_path_factory):
    return f"sqlite:///{tmp_path_factory.mktemp('studycli') / 'mlflow.db'}"


@pytest.mark.parametrize("args, words", [
    (["study", "nope"], ["unknown study 'nope'", "lr_batch"]),
    (["study", "lr_batch", "--scale", "enormous"], ["unknown scale 'enormous'"]),
    (["study", "lr_batch", "--set", "lr=0.1"], ["'lr' is searched"]),
    (["study", "lr_batch", "--set", "epochs=0"], ["epochs", "positive"]),
    (["study", "lr_batch", "--set", "backend=gloo"], ["experiment 'pruning' does not read 'backend'", "momentum"]),
    (["study", "lr_batch", "--n-trials", "0"], ["--n-trials"]),
    (["study", "lr_batch", "--workers", "0"], ["--workers"]),
    (["study", "lr_batch", "--scale", "smoke", "--status"], ["has not been run"]),
    (["study", "lr_batch", "--storage", "redis://x"], ["not a database URL"]),
    (["sweep", "sparsity", "--workers", "0"], ["--workers"]),
])
def test_study_command_mistakes_exit_2(args, words, uri, capsys):
    assert_one_sentence_exit_2([*args, "--tracking-uri", uri], words, capsys)


@pytest.mark.parametrize("command", ["study lr_batch", "sweep sparsity --workers 2"])
def test_unreachable_storage_is_named_without_its_password(command, uri, capsys):
    url = "postgresql://alice:s3cret@127.0.0.1:9/studies"
    assert main([*command.split(), "--scale", "smoke", "--storage", url, "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err
    assert "postgresql://alice:***@127.0.0.1:9/studies" in err and "s3cret" not in err
    assert err.count("\n") == 1


def test_a_direction_changed_after_the_study_exists_is_refused(study_file, uri, capsys):
    path = study_file("flip", space=LR, n_trials=1, base={"epochs": 1})
    assert main(["study", str(path), "--tracking-uri", uri, "--no-progress"]) == 0
    path.write_text(path.read_text().replace('metrics = ["test_accuracy"]', 'metrics = ["train_time_s"]')
                    .replace('directions = ["maximize"]', 'directions = ["minimize"]'))
    capsys.readouterr()
    assert main(["study", str(path), "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err
    assert "was created to ['maximize']" in err and "['minimize']" in err


@pytest.mark.parametrize("name", study_spec.available())
def test_a_shipped_pruner_can_stop_a_smoke_trial_before_its_last_epoch(name):
    """A pruner allowed to act only after the last epoch saves nothing: its "pruned" trial trained
    fully and lost its result."""
    from experiments import make_config

    spec = study_spec.load(name)
    if spec.pruner.name not in ("median", "percentile"):
        pytest.skip(f"study {name} has no median/percentile pruner")
    epochs = make_config(spec.fixed("smoke", {})).epochs
    first_prunable_step = spec.pruner.n_warmup_steps  # steps are 0-based epochs
    assert first_prunable_step < epochs - 1, f"{name} at smoke: {epochs} epochs, warm-up {first_prunable_step} steps"
    assert spec.pruner.n_startup_trials < spec.trials_at("smoke")


def test_sampler_and_pruner_defaults_are_one_model_each_and_logged_as_before(study_file):
    """No [sampler] is TPE, no [pruner] is none; the parent run's params read as they always did."""
    from harness.specs import search

    plain = study_spec.load(str(study_file("plain", space=LR)))
    assert plain.sampler == search.TPE() and plain.sampler.n_startup_trials == 5 and not plain.pruner.active
    assert (plain.sampler.as_logged(), plain.pruner.as_logged()) == ({"name": "tpe"}, {"name": "none"})
    shipped = study_spec.load("lr_batch")
    assert str(shipped.sampler.as_logged()) == "{'name': 'tpe', 'seed': 0, 'n_startup_trials': 5}"
    assert str(shipped.pruner.as_logged()) == ("{'name': 'median', 'metric': 'epoch_test_accuracy', "
                                               "'n_startup_trials': 3, 'n_warmup_steps': 1}")
    unnamed = study_spec.load(str(study_file("unnamed", space=LR, extra="[sampler]\nseed = 7\n")))
    assert isinstance(unnamed.sampler, search.TPE) and unnamed.sampler.seed == 7


def test_every_sampler_and_pruner_makes_its_optuna_object():
    import optuna

    from harness.specs import search

    for name, model in search.SAMPLERS.items():
        assert isinstance(model().to_optuna(3), optuna.samplers.BaseSampler), name
    for name, model in search.PRUNERS.items():
        made = (model(upper=1.0) if model is search.Threshold else model()).to_optuna()
        assert isinstance(made, optuna.pruners.BasePruner), name
    assert type(search.Median().to_optuna()).__name__ == "MedianPruner"


# Which way is better, as the harness held it in one table before each experiment said it for its own.
FORMER_SENSE = {
    "test_accuracy": "maximize", "epoch_test_accuracy": "maximize", "samples_per_s": "maximize",
    "train_time_s": "minimize", "epoch_time_median_s": "minimize", "epoch_time_iqr_s": "minimize",
    "param_count": "minimize", "peak_rss_mb": "minimize", "train_loss": "minimize",
    "time_to_accuracy_s": "minimize", "mfu": "maximize", "achieved_tflops": "maximize",
}
PER_EPOCH = {"epoch_test_accuracy", "train_loss"}  # reported each epoch by the experiments that train


def test_every_experiment_says_which_way_is_better_for_the_metrics_it_reports():
    import experiments

    for name in experiments.names():
        experiment = experiments.get(name)
        reported = {m for m in FORMER_SENSE if experiment.has_metric(m) or m in study_spec.HARNESS_METRICS
                    or (m in PER_EPOCH and experiment.needs_dataset)}
        assert {m: study_spec.sense_of(experiment, m) for m in reported} == {m: FORMER_SENSE[m] for m in reported}, name


def test_a_study_asking_the_worse_way_is_refused(study_file):
    path = study_file("worse_way", space=LR, metrics=("train_time_s",), directions=("maximize",))
    with pytest.raises(UserError, match="train_time_s, which is better when lower; the direction should be minimize"):
        study_spec.load(str(path))
