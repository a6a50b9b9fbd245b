"""Automatic donation: which Variables' arrays ``nnx.jit`` may give to XLA.

A call of ``nnx.jit(f)(model, ...)`` replaces the array of every Variable it
updates. If nothing but the Variable holds the old array, no Python code can
reach it once the call returns, so XLA may reuse its buffer for the output
(``jax.jit``'s ``donate_argnums``): the train step then needs no second copy
of the parameters and optimizer state. A buffer anything else holds (the user's
``old = m.w[...]``, a ``State`` or pure dict they kept, a clone sharing arrays,
a closure, the same array in two Variables or also passed as an argument) is
kept, so no user ever sees a deleted array.

"Nothing else holds it" is CPython's reference count: a Variable's array read
into the call's list of leaf values (``Call.values``, or the fast path's
``values``) has exactly ``BASELINE`` references when the Variable's slot and that
list are its only holders. ``BASELINE`` is measured once, with the same function
the call path uses (``holder_counts``), on a probe held the same way; any other
holder adds at least one.

Only concrete arrays of plain Variables at the top level are candidates: not a
Tracer (an ``nnx.jit`` inside a trace never donates), not a Ref- or box-backed
Variable (its storage is the array), not a NumPy array or Python number.

Source: ``jax.jit`` (``donate_argnums``, buffer donation); ``docs/design.md``,
"Donation by default".
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax

from flaxgraph.config import Flag
from flaxgraph.transforms.lift import Slots
from flaxgraph.variablelib.variable import is_variable

DONATE_VARIABLES: Flag[bool] = Flag("donate_variables", False)
"""The default of ``nnx.jit(..., donate_variables=None)``: whether ``nnx.jit``
donates the arrays only their Variables hold. ``False`` for now (the first call
of a structure with read-only Variables traces twice, which user code counting
traces can see); ``DONATE_VARIABLES.set_globally(True)`` or ``.scoped(True)`` turns
it on (read when ``nnx.jit`` is created, as ``graph=None``)."""

_getrefcount = sys.getrefcount
_Tracer = jax.core.Tracer


def holder_counts(values: list[Any], positions: Sequence[int]) -> list[int]:
    """The reference counts of ``values[p]`` for each ``p`` in ``positions``, as this
    very expression sees them (the list's reference and the one ``map`` passes on
    included). Compare with ``BASELINE``."""
    return list(map(_getrefcount, map(values.__getitem__, positions)))


def _measure_baseline() -> int:
    """The count ``holder_counts`` reports for a value held by one slot (a
    Variable's ``raw_value``; here a one-item list) and by the values list."""
    owner = [object()]
    values = [owner[0]]
    return holder_counts(values, (0,))[0]


BASELINE: int = _measure_baseline()
"""What ``holder_counts`` reports for an array held only by its Variable and the
call's list of leaf values (a constant of the interpreter, measured at import)."""

_IS_BASELINE = BASELINE.__eq__


def unheld(values: list[Any], positions: Sequence[int]) -> list[bool]:
    """For each position, whether ``values[p]`` has no holder but its Variable and
    ``values`` (see the module docstring): the donation mask of the candidates."""
    return list(map(_IS_BASELINE, holder_counts(values, positions)))


def candidates(
    leaves: Sequence[Any], values: Sequence[Any], excluded: Sequence[bool]
) -> tuple[int, ...]:
    """The positions of the leaves whose array may be donated automatically: a
    plain Variable (not Ref- or box-backed) holding a concrete ``jax.Array``, and
    not ``excluded`` (already donated explicitly)."""
    out = []
    for i, (leaf, value) in enumerate(zip(leaves, values)):
        if (
            not excluded[i]
            and is_variable(leaf)
            and leaf._var_ref is None
            and isinstance(value, jax.Array)
            and not isinstance(value, _Tracer)
        ):
            out.append(i)
    return tuple(out)


class AutoDonation(NamedTuple):
    """One call's automatic donation (recorded by a fast-path plan, which re-checks
    it on every call: a different mask takes the general path).

    Attributes:
      positions: the candidate leaves (``candidates``).
      mask: for each candidate, whether it is donated (``unheld``).
    """

    positions: tuple[int, ...]
    mask: list[bool]


def auto_donation(
    leaves: Sequence[Any], values: list[Any], excluded: Sequence[bool]
) -> AutoDonation | None:
    """The automatic donation of one call's leaves, ``None`` without candidates.
    ``values`` must be the call's own list of leaf values (``Call.values``), with
    no other temporary holder of its items (see ``BASELINE``)."""
    positions = candidates(leaves, values, excluded)
    if not positions:
        return None
    return AutoDonation(positions, unheld(values, positions))


class ReadOnlyDonated(Exception):
    """Raised inside a trace (before anything is compiled) when Variables donated
    automatically came back unchanged: ``positions`` are their leaf positions. An
    internal signal, caught by ``nnx.jit``, which keeps them from then on (a donated
    read-only Variable would cost a pass-through output of its whole buffer)."""

    def __init__(self, positions: frozenset[int]):
        super().__init__(positions)
        self.positions = positions


def check_written(
    slots: Slots,
    groups: Sequence[Sequence[Any]],
    out_groups: Sequence[Sequence[Any]],
    donated: Sequence[int],
) -> None:
    """In a trace: raises ``ReadOnlyDonated`` if an input leaf at a position in
    ``donated`` is among the outputs unchanged (the very input value).

    Raises:
      ReadOnlyDonated: such leaves exist (their positions).
    """
    out_ids = {id(v) for group in out_groups for v in group}
    same = frozenset(
        i for i in donated if id(groups[slots.groups[i]][slots.positions[i]]) in out_ids
    )
    if same:
        raise ReadOnlyDonated(same)


__all__ = [
    "ReadOnlyDonated",
    "check_written",
    "BASELINE",
    "DONATE_VARIABLES",
    "AutoDonation",
    "auto_donation",
    "holder_counts",
    "unheld",
]
