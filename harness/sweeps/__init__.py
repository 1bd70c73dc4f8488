"""Grid sweeps: the engine that runs a sweep file's cells (sweep_engine); the files' model is in
harness/specs."""
