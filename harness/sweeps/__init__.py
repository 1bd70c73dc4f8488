"""Grid sweeps: the sweep files' model (sweep_spec) and the engine that runs their cells (sweep_engine)."""
