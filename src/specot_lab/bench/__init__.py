"""Benchmarks: scripts with JSON output (``python -m specot_lab.bench.<name>``) and ``specot bench``."""
