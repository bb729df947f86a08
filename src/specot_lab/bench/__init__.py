"""Benchmarks with JSON output, run as ``specot bench <name>`` (:mod:`specot_lab.cli_bench`)."""
