"""Optuna studies: the study files' model (spec), the ask/tell engine, and the study report."""
