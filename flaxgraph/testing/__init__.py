"""Hypothesis strategies that generate object graphs, for property tests."""
