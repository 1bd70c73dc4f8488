"""The names a study writes on its MLflow runs (tags) and on its Optuna trials (user attributes), so
that the engine, the requeueing of a dead worker's trials, the report and `--verify` read the same
ones. Which worker owns a running trial, and in which slot: harness/studies/liveness.py."""

from harness.machine.machine_load import CONTENDED, OTHER_CORES

STUDY, TRIAL = "harness.study", "harness.trial"   # tags (and trial_status.RETRY_OF, a tag and an attribute)
RETRIES_ATTR = "harness.retries"    # how many times these parameters were queued again
RUN_ATTR = "mlflow_run_id"          # the MLflow run of the trial's cell
WARM_START_ATTR = "harness.warm_start"   # the name of the [[warm_start]] the trial runs (studies/warm_starts.py)
# The [report] metrics of a complete trial, for the study's report, with the load around it: a trial
# timed while other work held its cores is marked there, as a sweep's cell is.
METRICS_ATTR = "harness.metrics"
LOAD_METRICS = (CONTENDED, OTHER_CORES)
