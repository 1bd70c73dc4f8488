"""Optuna studies, in two rooms. This folder runs trials: the ask/tell engine (study_engine) and its
loop (trial_loop), the study's storage, parent run and report, the target its trials are timed to
(trial_target), the budget and the pruning. deciding/ names a winner: the calibration, the race,
its verification and the method cards; it imports this room, never the other way round. The study
files' model is in harness/specs."""
