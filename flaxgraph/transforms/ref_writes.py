"""Ref-backed Variables on the fast path: reading and writing their Refs without eager
JAX operations (see the package README, "Ref-backed Variables on the fast path").

Source: ``docs/design.md``, "The fast path"; JAX mutable array references (``jax.Ref``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from flaxgraph.graphlib.writes import Writes
from flaxgraph.transforms.lift import LeafSource
from flaxgraph.variablelib import refs
from flaxgraph.variablelib.variable import Variable, storage_of


def read_ref(ref: object) -> object:
    """The plan's reader of a Ref-backed Variable's value (its Ref is the target)."""
    return refs.peek(ref)


class RefWrite(NamedTuple):
    """A Ref-backed Variable receiving ``out_groups[group][position]`` of the recorded shape and dtype."""

    variable: Variable[Any]
    group: int
    position: int
    shape: tuple[int, ...]
    dtype: object


class RefInstall:
    """Installs the new values of a plan's Ref-backed Variables, ``(out_groups) -> None``,
    through ``graphlib.writes.Writes`` (all checked before the first write)."""

    __slots__ = ("writes",)

    def __init__(self, variables: Sequence[Variable[Any]], sources: Sequence[LeafSource]):
        """``variables[k]`` receives the value ``sources[k]`` (origin ``OUT``) names."""
        self.writes = [
            RefWrite(v, s.at, s.position, tuple(ref.shape), ref.dtype)
            for v, s in zip(variables, sources)
            for ref in (storage_of(v),)
        ]

    def __call__(self, out_groups: Sequence[Sequence[Any]]) -> None:
        """Raises ``ValueError`` (nothing written) if a value does not fit its Ref."""
        writes = Writes()
        for w in self.writes:
            writes.install(w.variable, out_groups[w.group][w.position], w.shape, w.dtype)
        writes.apply(None)  # (no Variable write: the trace is not asked)


def copies_of_ref_values(in_values: list[Any], positions: frozenset[int], leaves: Any) -> list[Any]:
    """``in_values`` with the Refs' own arrays replaced by copies (for the general write-back)."""
    out = list(in_values)
    for pos in positions:
        out[pos] = storage_of(leaves[pos])[...]
    return out
