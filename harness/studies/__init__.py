"""Optuna studies: the study files' model (study_spec), the ask/tell engine (study_engine), and the
study report (study_report)."""
