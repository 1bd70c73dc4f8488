"""Optuna studies: the ask/tell engine (study_engine), the study report (study_report) and the
verification of a best recipe (verify); the study files' model is in harness/specs."""
