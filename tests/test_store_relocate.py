"""A SQLite store opened from another folder than the one it was made in (a clone at another path, a
results folder copied elsewhere) reads and writes its artifacts in its own folder: MLflow keeps them as
absolute URIs, which the store follows when its folder has moved."""

import json
import shutil

from mlflow.tracking import MlflowClient

from harness.store import Outcome, Store


def _store_with_one_run(folder):
    store = Store(f"sqlite:///{folder / 'mlflow.db'}")
    experiment_id = store.experiment_id("moved")
    run_id = store.start_run(experiment_id, "cell", {})
    store.log_dict(run_id, {"lr": 0.1}, "config.json")
    store.end_run(run_id, Outcome.OK, metrics={"train_time_s": 1.0})
    return experiment_id, run_id


def test_a_store_moved_to_another_folder_reads_and_writes_its_artifacts_there(tmp_path):
    experiment_id, run_id = _store_with_one_run(tmp_path / "made")
    shutil.move(tmp_path / "made", tmp_path / "clone")

    store = Store(f"sqlite:///{tmp_path / 'clone' / 'mlflow.db'}")
    client = MlflowClient(tracking_uri=store.uri)
    here = (tmp_path / "clone" / "artifacts").resolve().as_uri()
    assert client.get_experiment(experiment_id).artifact_location == f"{here}/moved"
    assert client.get_run(run_id).info.artifact_uri.startswith(f"{here}/moved/{run_id}")
    copied = client.download_artifacts(run_id, "config.json", str(tmp_path))
    assert json.loads(open(copied).read()) == {"lr": 0.1}
    assert store.experiment_id("moved") == experiment_id   # the location it checks is the new one

    later = store.start_run(experiment_id, "next cell", {})
    store.log_dict(later, {"lr": 0.2}, "config.json")
    assert (tmp_path / "clone" / "artifacts" / "moved" / later / "artifacts" / "config.json").is_file()
    assert not (tmp_path / "made").exists()


def test_a_location_chosen_elsewhere_that_is_still_there_is_kept(tmp_path):
    elsewhere = tmp_path / "shared" / "artifacts" / "kept"
    elsewhere.mkdir(parents=True)
    store = Store(f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}")
    client = MlflowClient(tracking_uri=store.uri)
    experiment_id = client.create_experiment("kept", artifact_location=elsewhere.resolve().as_uri())

    Store(store.uri)   # opened again: nothing says this store moved
    assert client.get_experiment(experiment_id).artifact_location == elsewhere.resolve().as_uri()
