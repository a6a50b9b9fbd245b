"""Ref-backed Variables on the fast path: reading and writing their Refs without
eager JAX operations.

A Variable made with ``ref=True`` or ``hijax=True`` keeps its value in a ``jax.Ref``.
Reading it with ``ref[...]`` or writing it with ``ref[...] = x`` outside a trace is
an eagerly dispatched JAX operation each (hundreds of microseconds), which would
make every call of a transform on such a model cost far more than the compiled
call. A fast-path plan (``fastpath.py``) instead

* reads the Ref's current array without a copy (``refs.peek``) and hands it straight
  to the compiled call, which does not keep it;
* after the call, installs each new array as its Ref's content through the engine's
  one write-back (``graphlib.writes.Writes.install``: every shape and dtype checked
  before anything is written, so a mismatch leaves the model as it was): the
  compiled call made that array for this Variable alone.

Where an array would end up in two places (the same output also returned to the
caller or written into another Variable), the plan writes a copy with the public
``ref[...] = x`` instead; where an output would hand out a Ref's own array (an
input value returned unchanged), the call takes the general write-back, which
reads Refs with copies. Donated arguments keep Ref-backed graphs on the general
path (donating a Ref's own array would delete the Ref's content).

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
    """A Ref-backed Variable that receives ``out_groups[group][position]``, which must
    have the Ref's ``shape`` and ``dtype`` (recorded when the plan was made)."""

    variable: Variable[Any]
    group: int
    position: int
    shape: tuple[int, ...]
    dtype: object


class RefInstall:
    """Installs the new values of a plan's Ref-backed Variables: ``(out_groups) ->
    None``, through the engine's one write-back (``graphlib.writes.Writes``: every
    shape and dtype is checked before the first write).

    Attributes:
      writes: a ``RefWrite`` per Variable.
    """

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
    """``in_values`` with the Refs' own arrays (read by ``read_ref``) replaced by
    copies, for a write-back that may hand them out."""
    out = list(in_values)
    for pos in positions:
        out[pos] = storage_of(leaves[pos])[...]
    return out
