"""Grid sweeps: the sweep files' model (spec) and the engine that runs their cells."""
