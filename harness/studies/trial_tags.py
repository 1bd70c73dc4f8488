"""The names a study writes on its MLflow runs (tags) and on its Optuna trials (user attributes), so
that the engine, the requeueing of a dead worker's trials, the report and `--verify` read the same
ones. Which worker owns a running trial, and in which slot: harness/studies/liveness.py."""

STUDY, TRIAL = "harness.study", "harness.trial"   # tags (and trial_status.RETRY_OF, a tag and an attribute)
RETRIES_ATTR = "harness.retries"    # how many times these parameters were queued again
RUN_ATTR = "mlflow_run_id"          # the MLflow run of the trial's cell
METRICS_ATTR = "harness.metrics"    # the [report] metrics of a complete trial, for the study's report
