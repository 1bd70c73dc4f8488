"""The training half: a cell's config and its field groups, data, models, the training loop and its
clocks, precision, pruning, FLOPs and the peak they are measured against, warm-up, time to accuracy.
Nothing here knows of sweeps, studies or the store. Importing this package imports no torch: the
modules that need it import it themselves."""
