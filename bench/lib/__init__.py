"""The benchmark runner's modules (bench/run.py is the command)."""
