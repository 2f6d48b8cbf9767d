"""Benchmarks: ``python -m bench`` (``make bench``) runs every suite and prints its table."""
