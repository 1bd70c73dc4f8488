"""The torch-free half: what a cell's config holds and what its values may name. config (RunConfig:
the execution fields every experiment has, a cell's identity, one sentence per mistake), field_groups
(the small groups experiments compose their configs from), catalogue (the models, datasets, clocks,
metric names and speed methods the training half offers, by name) and data_folders (a dataset's
folders and files, checked without decoding them).

The command line, the sweep and study file models (harness/specs), the report and every experiment's
descriptor stand on this folder, and answer a mistake in a user's values from it before torch is
imported, which takes seconds (tests/test_fast_mistakes.py: no mistake imports it). So nothing here
imports torch, numpy, MLflow or Optuna, at any depth, and neither does any module of the harness it
imports: tests/test_architecture.py checks both on the source. The code behind the names (builders,
loaders, clocks) is the training half's, harness/training, which stands on this folder."""
