"""Runs a program on both libraries and compares, classifying differences by the
listed deviations of ``tests/conformance/oracle_deviations.txt``.

A *difference* is an operation whose outcomes disagree: Flax succeeds and flaxgraph
raises, or gives other data (State paths, values, static attributes, outputs); or
Flax raises and flaxgraph does not. Each difference is either explained by one
listed deviation (its predicate, in ``oracle_deviations.py``, recognises it) or
undocumented. Floats compare with a relative tolerance of 1e-6 (the libraries may
trace the same ops in another order).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
from oracle_deviations import DEVIATIONS, Deviation, listed
from oracle_library import LIBRARIES
from oracle_programs import Program
from oracle_run import OPERATIONS, Outcome, run


@dataclasses.dataclass(frozen=True)
class Difference:
    """One operation whose outcomes differ, and the listed deviation explaining it (if any)."""

    op: str
    flax: Outcome
    flaxgraph: Outcome
    deviation: str | None

    def report(self) -> str:
        def say(o: Outcome) -> str:
            return f"ok {o.value!r}"[:1500] if o.ok else f"raised {o.error}"

        why = f"listed deviation {self.deviation!r}" if self.deviation else "UNDOCUMENTED"
        return (
            f"{self.op}: {why}\n  flax:      {say(self.flax)}\n  flaxgraph: {say(self.flaxgraph)}"
        )


def same(a: Any, b: Any) -> bool:
    """Equal plain data, floats within a relative 1e-6."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-6)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def agree(flax: Outcome, flaxgraph: Outcome) -> bool:
    if flax.ok != flaxgraph.ok:
        return False
    return not flax.ok or same(flax.value, flaxgraph.value)


def compare(program: Program, ops: tuple[str, ...] = tuple(OPERATIONS)) -> list[Difference]:
    """Every operation of ``ops`` whose outcomes differ. Once construction differs, the
    other operations (which all construct) are not compared."""
    differences = []
    for op in ops:
        flax = run(LIBRARIES["flax"], program, op)
        ours = run(LIBRARIES["flaxgraph"], program, op)
        if not flax.ok and ours.ok:
            # Flax's jit can fail on a program because of what an earlier one left in
            # JAX's caches (2,000-example run: a static np.float64(1.0) raised "Exception
            # raised while checking equality of metadata fields", and passed in a fresh
            # process): a Flax error counts only if it survives empty caches.
            jax.clear_caches()
            flax = run(LIBRARIES["flax"], program, op)
        if agree(flax, ours):
            continue
        differences.append(Difference(op, flax, ours, classify(program, op, flax, ours)))
        if op == "construct":
            break
    return differences


def classify(program: Program, op: str, flax: Outcome, ours: Outcome) -> str | None:
    """The listed deviation that explains this difference, or ``None``."""
    names = listed()
    for deviation in DEVIATIONS:
        if deviation.name in names and deviation.explains(program, op, flax, ours):
            return deviation.name
    return None


__all__ = ["Deviation", "Difference", "agree", "classify", "compare", "same"]
