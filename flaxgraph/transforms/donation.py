"""Automatic donation: which Variables' arrays ``nnx.jit`` may give to XLA (the rules,
the reference count and the fresh arrays: ``docs/design.md``, "Automatic donation").

Source: ``jax.jit`` (``donate_argnums``, buffer donation); ``docs/design.md``,
"Automatic donation".
"""

from __future__ import annotations

import operator
import sys
from collections import Counter, defaultdict, deque
from collections.abc import Sequence
from itertools import chain, repeat
from typing import Any, NamedTuple

import jax
import numpy as np

from flaxgraph.config import Flag
from flaxgraph.transforms.lift import IN, InStatic, OutStatic, Slots
from flaxgraph.variablelib.variable import Variable, is_variable, mark_fresh, read_slot

DONATE_VARIABLES: Flag[bool] = Flag("donate_variables", True)
"""The default of ``nnx.jit(..., donate_variables=None)`` (on: ``docs/design.md``,
"Automatic donation"); ``.set_globally(False)`` or ``.scoped(False)`` turns it off."""

_getrefcount = sys.getrefcount
_Tracer = jax.core.Tracer


def holder_counts(values: list[Any], positions: Sequence[int]) -> list[int]:
    """The reference counts of ``values[p]`` for ``p`` in ``positions`` (compare with ``BASELINE``)."""
    return list(map(_getrefcount, map(values.__getitem__, positions)))


def _measure_baseline() -> int:
    """The count ``holder_counts`` reports for a value held by two slots (a Variable's
    value and fresh array) and the values list."""
    probe = object()
    owner = [probe, probe]
    values = [owner[0]]
    del probe
    return holder_counts(values, (0,))[0]


BASELINE: int = _measure_baseline()
"""What ``holder_counts`` reports for a fresh array held only by its Variable (its value
and its fresh array: ``Variable._var_fresh``) and the values list."""

_IS_BASELINE = BASELINE.__eq__
_FRESH = "_var_fresh"


def fresh_of(variables: Sequence[Variable[Any]]) -> list[Any]:
    """Each Variable's fresh array (``None``: none, or none noted since its creation)."""
    return list(map(getattr, variables, repeat(_FRESH), repeat(None)))


def unheld(
    values: list[Any], positions: Sequence[int], variables: Sequence[Variable[Any]]
) -> list[bool]:
    """The donation mask: whether ``values[p]`` is the fresh array of ``variables[k]``
    (``nnx.jit`` installed it and nothing read it since) with no holder but that Variable
    and ``values``."""
    counts = holder_counts(values, positions)
    fresh = map(operator.is_, fresh_of(variables), map(values.__getitem__, positions))
    return list(map(operator.and_, fresh, map(_IS_BASELINE, counts)))


def mark_installed(
    leaves: Sequence[Any], positions: Sequence[int], out_groups: Sequence[Sequence[Any]]
) -> None:
    """After a general call's write-back: notes as fresh each ``leaves[p]``'s new array
    that is one of the compiled function's outputs (``out_groups``)."""
    outputs = set(map(id, chain.from_iterable(out_groups)))
    for p in positions:
        v = leaves[p]
        value = read_slot(v)
        if id(value) in outputs:
            mark_fresh(v, value)


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
    return AutoDonation(positions, unheld(values, positions, [leaves[p] for p in positions]))


def _copy_at(values: list[Any], positions: list[int]) -> None:
    """Replaces ``values[p]`` for ``p`` in ``positions`` by copies on the same placement:
    one ``jax.device_put(..., may_alias=False)`` (a buffer copy each, no program compiled
    per shape as ``x.copy()`` would). An array of several processes is put on its own
    sharding (JAX needs one); any other stays as committed to its devices as it was."""
    if positions:
        arrays = [values[p] for p in positions]
        places = [None if a.is_fully_addressable else a.sharding for a in arrays]
        copies = jax.device_put(arrays, places, may_alias=False)
        for p, c in zip(positions, copies):
            values[p] = c


def copy_held(values: list[Any], positions: Sequence[int], mask: Sequence[bool]) -> None:
    """Replaces, in ``values``, each donated array that is not fresh and unheld by a copy."""
    _copy_at(values, [p for p, free in zip(positions, mask) if not free])


def has_repeats(values: list[Any], positions: Sequence[int]) -> bool:
    """Whether one array is at two of ``positions`` (JAX refuses to donate a buffer twice)."""
    return len(set(map(id, map(values.__getitem__, positions)))) != len(positions)


def copy_repeats(values: list[Any], positions: Sequence[int]) -> None:
    """Replaces each repeated concrete array among ``positions`` by a copy (flax#5461)."""
    seen: set[int] = set()
    repeats = []
    for p in positions:
        value = values[p]
        if id(value) in seen:
            if isinstance(value, jax.Array) and not isinstance(value, _Tracer):
                repeats.append(p)
        else:
            seen.add(id(value))
    _copy_at(values, repeats)


class JitExtra(NamedTuple):
    """``nnx.jit``'s ``InStatic.extra``: statics, dynamic positional count, automatically
    donated leaves and the ``InStatic`` of the same call without them (``JitWrapped.replay``)."""

    statics: tuple[Any, ...]
    n_args: int
    auto_donated: tuple[int, ...]
    undonated: InStatic[JitExtra] | None


class ReadOnlyDonated(Exception):
    """Internal signal, caught by ``nnx.jit``: automatically donated leaves (``positions``)
    came back unchanged in a trace, or no output can take their buffer
    (``unusable_donations``)."""

    def __init__(self, positions: frozenset[int]):
        super().__init__(positions)
        self.positions = positions


def kept_inputs(out_static: OutStatic) -> frozenset[int]:
    """The input leaves a trace left unchanged (origin ``IN``), never donated automatically."""
    return frozenset(s.at for s in out_static.sources if s.origin == IN)


def _buffer_key(x: jax.Array) -> tuple[tuple[int, ...], np.dtype[Any]]:
    """What ``jax.jit`` pairs a donated input with an output by first: shape and dtype."""
    return tuple(x.shape), x.dtype


def unusable_donations(
    groups: Sequence[Sequence[Any]],
    donated_groups: Sequence[bool],
    slots: Slots,
    out_groups: Sequence[Sequence[Any]],
    auto: Sequence[int],
) -> frozenset[int]:
    """The automatically donated leaves (``auto``: input leaf indices, placed in ``groups``
    by ``slots``) whose buffer no output of the trace can take.

    ``jax.jit`` gives each output, in order, the first donated input left of the same shape
    and dtype; then each donated input left, in order, the first output left with as many
    elements. A donated input left over after both is not used, and JAX warns "Some donated
    buffers were not usable" (a Variable whose new value is larger, such as a growing
    cache). The inputs of the groups ``donated_groups`` marks are donated (the explicit
    donations too, which compete for the same outputs), in the order JAX flattens them;
    ``out_groups`` are the outputs in order.
    """
    free: dict[tuple[tuple[int, ...], np.dtype[Any]], deque[tuple[int, int, int]]]
    free = defaultdict(deque)
    for g, (group, donated) in enumerate(zip(groups, donated_groups)):
        if donated:
            for p, x in enumerate(group):
                free[_buffer_key(x)].append((g, p, x.size))
    sizes_left: Counter[int] = Counter()
    for x in chain.from_iterable(out_groups):
        waiting = free.get(_buffer_key(x))
        if waiting:
            waiting.popleft()
        else:
            sizes_left[x.size] += 1
    left = set()
    for g, p, size in sorted(chain.from_iterable(free.values())):
        if sizes_left[size]:
            sizes_left[size] -= 1
        else:
            left.add((g, p))
    return frozenset(i for i in auto if (slots.groups[i], slots.positions[i]) in left)


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
    "unusable_donations",
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
