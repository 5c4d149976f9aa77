"""Micro-benchmarks of pure domain code (no server): ``python -m loadtest.benches.<name>``."""
