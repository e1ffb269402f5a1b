"""Benchmarks measured in Verilator from the RTL: ``python -m bench <name>``."""
