"""Experiment-tracking research harness for PyTorch training-speed research."""
