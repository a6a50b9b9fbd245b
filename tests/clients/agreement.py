"""Whether a scenario's run on flaxgraph agrees with its run on real Flax, and if not, how.

Compares two ``programs.py`` results of one scenario: both sides must have completed, report the
same keys (each key is a tree path with its dtype, see ``scenario_kit.arrays``) and, per key, the
same shape and values within ``rtol`` 1e-5, ``atol`` 1e-6.

Example::

    verdict = agree(flax_results["ptq"], flaxgraph_results["ptq"])
    verdict.agreed, verdict.detail   # (True, "49 arrays agree")
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

RTOL, ATOL = 1e-5, 1e-6


class Verdict(NamedTuple):
    """The comparison of one scenario: agreed or not, and what was compared or what differed."""

    agreed: bool
    detail: str


def agree(on_flax: dict[str, Any] | None, on_flaxgraph: dict[str, Any] | None) -> Verdict:
    """Compares one scenario's result on real Flax with its result on flaxgraph."""
    if on_flax is None or on_flaxgraph is None:
        missing = "real Flax" if on_flax is None else "flaxgraph"
        return Verdict(False, f"no result on {missing} (its process failed or timed out)")
    if "error" in on_flax:
        return Verdict(False, f"fails on real Flax too: {on_flax['error']} (at {on_flax['where']})")
    if "error" in on_flaxgraph:
        return Verdict(
            False, f"fails on flaxgraph: {on_flaxgraph['error']} (at {on_flaxgraph['where']})"
        )
    expected, actual = on_flax["values"], on_flaxgraph["values"]
    if not expected:
        return Verdict(False, "the scenario reported no numbers")
    if sorted(actual) != sorted(expected):
        only_flax = sorted(set(expected) - set(actual))[:3]
        only_graph = sorted(set(actual) - set(expected))[:3]
        return Verdict(
            False, f"different trees: only on Flax {only_flax}, only on flaxgraph {only_graph}"
        )
    for key in expected:
        want, got = np.asarray(expected[key]), np.asarray(actual[key])
        if want.shape != got.shape:
            return Verdict(False, f"{key}: shape {got.shape} on flaxgraph, {want.shape} on Flax")
        if not np.allclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True):
            worst = float(np.max(np.abs(got - want))) if want.size else 0.0
            return Verdict(False, f"{key}: differs (largest difference {worst:.3g})")
    return Verdict(True, f"{len(expected)} arrays agree")
