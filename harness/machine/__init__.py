"""The machine a measurement runs on: what it has (hardware), what a device name means (device_names),
who it is (fingerprint), how fast its CPU is now (calibration), how busy it is (machine_load), and what
one process holds (process_state)."""
