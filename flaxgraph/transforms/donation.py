"""Automatic donation: which Variables' arrays ``nnx.jit`` may give to XLA (the rules,
the reference count and why it is off by default: ``docs/design.md``, "Automatic donation").

Source: ``jax.jit`` (``donate_argnums``, buffer donation); ``docs/design.md``,
"Automatic donation".
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax

from flaxgraph.config import Flag
from flaxgraph.transforms.lift import IN, InStatic, OutStatic, Slots
from flaxgraph.variablelib.variable import is_variable

DONATE_VARIABLES: Flag[bool] = Flag("donate_variables", False)
"""The default of ``nnx.jit(..., donate_variables=None)`` (off: see ``docs/design.md``,
"Automatic donation"); ``.set_globally(True)`` or ``.scoped(True)`` turns it on."""

_getrefcount = sys.getrefcount
_Tracer = jax.core.Tracer


def holder_counts(values: list[Any], positions: Sequence[int]) -> list[int]:
    """The reference counts of ``values[p]`` for ``p`` in ``positions`` (compare with ``BASELINE``)."""
    return list(map(_getrefcount, map(values.__getitem__, positions)))


def _measure_baseline() -> int:
    """The count ``holder_counts`` reports for a value held by one slot and the values list."""
    owner = [object()]
    values = [owner[0]]
    return holder_counts(values, (0,))[0]


BASELINE: int = _measure_baseline()
"""What ``holder_counts`` reports for an array held only by its Variable and the values list."""

_IS_BASELINE = BASELINE.__eq__


def unheld(values: list[Any], positions: Sequence[int]) -> list[bool]:
    """The donation mask: whether ``values[p]`` has no holder but its Variable and ``values``."""
    return list(map(_IS_BASELINE, holder_counts(values, positions)))


def candidates(
    leaves: Sequence[Any], values: Sequence[Any], excluded: Sequence[bool]
) -> tuple[int, ...]:
    """The leaves that may be donated automatically: plain Variables holding a concrete
    ``jax.Array``, not ``excluded``."""
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
    """One call's automatic donation: the leaves donated and their ``unheld`` mask."""

    positions: tuple[int, ...]
    mask: list[bool]


def auto_donation(
    leaves: Sequence[Any], values: list[Any], excluded: Sequence[bool]
) -> AutoDonation | None:
    """The automatic donation of one call's leaves (``values``: ``Call.values`` itself)."""
    positions = candidates(leaves, values, excluded)
    if not positions:
        return None
    return AutoDonation(positions, unheld(values, positions))


def copy_held(values: list[Any], positions: Sequence[int], mask: Sequence[bool]) -> None:
    """Replaces, in ``values``, each donated array something else holds by a copy."""
    for p, free in zip(positions, mask):
        if not free:
            values[p] = values[p].copy()


def has_repeats(values: list[Any], positions: Sequence[int]) -> bool:
    """Whether one array is at two of ``positions`` (JAX refuses to donate a buffer twice)."""
    return len(set(map(id, map(values.__getitem__, positions)))) != len(positions)


def copy_repeats(values: list[Any], positions: Sequence[int]) -> None:
    """Replaces each repeated concrete array among ``positions`` by a copy (flax#5461)."""
    seen: set[int] = set()
    for p in positions:
        value = values[p]
        if id(value) in seen:
            if isinstance(value, jax.Array) and not isinstance(value, _Tracer):
                values[p] = value.copy()
        else:
            seen.add(id(value))


class JitExtra(NamedTuple):
    """``nnx.jit``'s ``InStatic.extra``: statics, dynamic positional count, automatically
    donated leaves and the ``InStatic`` of the same call without them (``JitWrapped.replay``)."""

    statics: tuple[Any, ...]
    n_args: int
    auto_donated: tuple[int, ...]
    undonated: InStatic[JitExtra] | None


class ReadOnlyDonated(Exception):
    """Internal signal, caught by ``nnx.jit``: automatically donated leaves (``positions``)
    came back unchanged in a trace."""

    def __init__(self, positions: frozenset[int]):
        super().__init__(positions)
        self.positions = positions


def kept_inputs(out_static: OutStatic) -> frozenset[int]:
    """The input leaves a trace left unchanged (origin ``IN``), never donated automatically."""
    return frozenset(s.at for s in out_static.sources if s.origin == IN)


def regroup(
    groups: Sequence[Sequence[Any]], slots: Slots, to: Slots, n_groups: int
) -> tuple[list[Any], ...]:
    """The leaves of ``groups`` (placed by ``slots``) placed by ``to`` instead."""
    out: tuple[list[Any], ...] = tuple([] for _ in range(n_groups))
    for g, p, h in zip(slots.groups, slots.positions, to.groups):
        out[h].append(groups[g][p])
    return out


__all__ = [
    "JitExtra",
    "ReadOnlyDonated",
    "kept_inputs",
    "regroup",
    "BASELINE",
    "DONATE_VARIABLES",
    "AutoDonation",
    "auto_donation",
    "copy_held",
    "copy_repeats",
    "has_repeats",
    "holder_counts",
    "unheld",
]
