"""The training half: data, models, the training loop and its clocks, precision, pruning, FLOPs and
the peak they are measured against, warm-up, time to accuracy. It stands on harness/fields (a cell's
config, its field groups and the names of what is offered here, all read without torch). Nothing here
knows of sweeps, studies or the store. Importing this package imports no torch: the modules that need
it import it themselves."""
