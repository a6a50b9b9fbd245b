"""Automatic donation: which Variables' arrays ``nnx.jit`` may give to XLA.

A call of ``nnx.jit(f)(model, ...)`` replaces the array of every Variable it
updates. If nothing but the Variable holds the old array, no Python code can
reach it once the call returns, so XLA may reuse its buffer for the output
(``jax.jit``'s ``donate_argnums``): the train step then needs no second copy
of the parameters and optimizer state. An array anything else holds (the user's
``old = m.w[...]``, a ``State`` or pure dict they kept, a clone sharing arrays,
a closure, the same array in two Variables or also passed as an argument) is
donated as a copy, so that holder never sees a deleted array. One holder is out
of a reference count's sight: another ``jax.Array`` object on the same buffer
(``jax.device_put`` to the array's own sharding makes one), which is why this is
off unless asked for (``DONATE_VARIABLES``).

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
"""The default of ``nnx.jit(..., donate_variables=None)``: whether ``nnx.jit``
donates the arrays the function writes. ``False``: a reference count sees every
Python holder of an array object, but not another ``jax.Array`` object on the same
buffer (``jax.device_put(x, x.sharding)`` returns one; Tunix's weight sync between
its trainer and its rollout model makes them), whose array donation would delete.
``DONATE_VARIABLES.set_globally(True)`` or ``.scoped(True)`` turns it on where no
such alias exists (read when ``nnx.jit`` is created, as ``graph=None``)."""

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
    """One call's automatic donation (recorded by a fast-path plan, whose generated
    ``run`` copies the candidates held elsewhere on every call, as ``copy_held``).

    Attributes:
      positions: the leaves donated (``candidates`` the function writes).
      mask: for each, whether only its Variable holds its array (``unheld``); a held
        one is donated as a copy (``copy_held``).
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


def copy_held(values: list[Any], positions: Sequence[int], mask: Sequence[bool]) -> None:
    """Replaces, in ``values``, each donated array something else holds (``mask``
    False) by a copy: XLA gets the copy's buffer, the holder keeps its array, and
    which leaves are donated (the compiled program) does not change with who holds
    what."""
    for p, free in zip(positions, mask):
        if not free:
            values[p] = values[p].copy()


def has_repeats(values: list[Any], positions: Sequence[int]) -> bool:
    """Whether one array is at two of ``positions`` (two Variables sharing it, as
    after ``nnx.clone``): JAX refuses to donate a buffer twice."""
    return len(set(map(id, map(values.__getitem__, positions)))) != len(positions)


def copy_repeats(values: list[Any], positions: Sequence[int]) -> None:
    """Replaces, in ``values``, each later occurrence of an array already at an
    earlier one of ``positions`` by a copy (a concrete ``jax.Array`` only), so each
    donated buffer is donated once (flax#5461: explicit donation after
    ``target = nnx.clone(online)``)."""
    seen: set[int] = set()
    for p in positions:
        value = values[p]
        if id(value) in seen:
            if isinstance(value, jax.Array) and not isinstance(value, _Tracer):
                values[p] = value.copy()
        else:
            seen.add(id(value))


class JitExtra(NamedTuple):
    """What ``nnx.jit``'s compiled function of one input structure needs besides
    the GraphDef and the slots (``InStatic.extra``).

    Attributes:
      statics: the static arguments' values.
      n_args: how many positional arguments are dynamic.
      auto_donated: the leaves donated automatically (their positions).
      undonated: with ``auto_donated``, the ``InStatic`` of the same call without
        them: its traced program is the one compiled (``JitWrapped.replay``).
    """

    statics: tuple[Any, ...]
    n_args: int
    auto_donated: tuple[int, ...]
    undonated: InStatic[JitExtra] | None


class ReadOnlyDonated(Exception):
    """Raised inside a trace (before anything is compiled) when Variables donated
    automatically come back unchanged: ``positions`` are their leaf positions. An
    internal signal, caught by ``nnx.jit``, which keeps them from then on (XLA
    deletes a donated buffer, and an unchanged Variable keeps its array)."""

    def __init__(self, positions: frozenset[int]):
        super().__init__(positions)
        self.positions = positions


def kept_inputs(out_static: OutStatic) -> frozenset[int]:
    """The input leaves a trace left unchanged: the output leaves whose value is
    the input's (``LeafSource`` of origin ``IN``), never donated automatically."""
    return frozenset(s.at for s in out_static.sources if s.origin == IN)


def regroup(
    groups: Sequence[Sequence[Any]], slots: Slots, to: Slots, n_groups: int
) -> tuple[list[Any], ...]:
    """The leaves of ``groups`` (placed by ``slots``) placed by ``to`` instead: the
    same leaves, in another partition into groups (another donation)."""
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
