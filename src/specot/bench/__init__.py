"""Benchmarks: scripts with JSON output (``python -m specot.bench.<name>``) and ``specot bench``."""
