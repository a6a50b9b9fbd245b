"""Benchmarks comparing flaxgraph with Flax NNX (and plain JAX as the floor).

Run a benchmark as a module from the repository root, e.g.
``python -m benchmarks.graph [--quick] [--json PATH]``. Comparators (Flax NNX,
Equinox) come from the ``bench`` extra (``pip install -e ".[bench]"``); with
``--quick`` a missing comparator is skipped instead of being an error.
"""
