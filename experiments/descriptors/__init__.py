"""Each experiment as the harness reads it before anything runs: its config class and its
`EXPERIMENT` descriptor, one module per experiment, importing neither torch nor its run module."""
