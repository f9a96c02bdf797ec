"""Benchmarks (never tests): medians measured side by side in one run, written as JSON and markdown."""
