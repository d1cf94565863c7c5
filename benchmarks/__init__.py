"""Benchmarks: never collected by pytest; see README.md for the figures and how to reproduce them."""
