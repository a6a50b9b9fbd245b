"""The one write-back: writes into existing objects, all checked before the first is made.

``update`` (``inplace.py``), ``build_graph(reuse=...)`` (``build.py``) and the transforms'
fast path (``transforms/ref_writes.py``) write through a ``Writes``, so an error leaves every
object as it was. Source: ``docs/design.md``, "The recorded plan" (One write-back).
"""

from __future__ import annotations

import operator
from collections import deque
from collections.abc import Callable
from itertools import repeat
from typing import Any, NamedTuple

import jax

from flaxgraph.variablelib import refs
from flaxgraph.variablelib.variable import (
    Variable,
    mark_fresh,
    storage_of,
    trace_of,
    write_metadata,
    write_slot,
    write_value,
)


class Install(NamedTuple):
    """A compiled call's new array ``value`` for the Ref-backed ``target``, whose Ref
    has the recorded ``shape`` and ``dtype``."""

    target: Variable[Any]
    value: jax.Array
    shape: tuple[int, ...]
    dtype: object


class Writes:
    """A batch of writes into existing objects, checked and made by ``apply``.

    Attributes:
      targets, values, metadata: Variables with their new values and metadata dicts
        (``variable``; appending to the three lists directly is the same).
      installs: ``Install`` records: a compiled call's new array that nothing else
        holds, to become a Ref-backed Variable's content (``install``).
      others: callables run last (node children, raw array attributes, new
        attributes), checked by whoever added them.
    """

    __slots__ = ("targets", "values", "metadata", "installs", "others")

    def __init__(self) -> None:
        self.targets: list[Variable[Any]] = []
        self.values: list[object] = []
        self.metadata: list[dict[str, Any]] = []
        self.installs: list[Install] = []
        self.others: list[Callable[[], None]] = []

    def variable(self, target: Variable[Any], value: object, metadata: dict[str, Any]) -> None:
        """Adds writing ``value`` and ``metadata`` into the existing Variable ``target``
        (into its Ref or box if it is Ref-backed)."""
        self.targets.append(target)
        self.values.append(value)
        self.metadata.append(metadata)

    def install(
        self, target: Variable[Any], value: jax.Array, shape: tuple[int, ...], dtype: object
    ) -> None:
        """Adds making ``value`` (a new array a compiled call made for ``target`` alone)
        the content of the Ref-backed ``target``'s Ref, whose ``shape`` and ``dtype``
        the caller recorded; metadata is unchanged."""
        self.installs.append(Install(target, value, shape, dtype))

    def other(self, write: Callable[[], None]) -> None:
        """Adds ``write`` (checked by the caller), run after the Variables' writes."""
        self.others.append(write)

    def apply(self, trace: object) -> None:
        """Checks every write, then makes them all (``trace``: the current JAX trace).

        Raises:
          TraceContextError (a ``ValueError``): a plain target Variable belongs to
            another trace.
          ValueError: a value does not have its Ref-backed target's shape and dtype.
        In both cases nothing is written.
        """
        targets, values = self.targets, self.values
        stored = list(map(storage_of, targets))
        if all(map(operator.is_, stored, repeat(None))) and all(
            map(operator.is_, map(trace_of, targets), repeat(trace))
        ):  # all plain and of this trace (the common case): checked in two C-level passes
            ref_writes: list[tuple[Variable[Any], object]] = []
        else:
            targets, values, ref_writes = self._sorted(stored, trace)
        for w in self.installs:
            if w.value.shape != w.shape or w.value.dtype != w.dtype:
                w.target._check_fits(w.value)  # raises, naming the Variable
        for w in self.installs:
            refs.install(storage_of(w.target), w.value)
        for target, value in ref_writes:
            write_value(target, value)
        deque(map(write_slot, targets, values), maxlen=0)
        deque(map(mark_fresh, targets, repeat(None)), maxlen=0)  # a new array (donation.py)
        deque(map(write_metadata, self.targets, self.metadata), maxlen=0)
        for write in self.others:
            write()

    def _sorted(
        self, stored: list[object], trace: object
    ) -> tuple[list[Any], list[object], list[Any]]:
        """Checks the Variable writes one by one: ``(plain targets, their values,
        (Ref-backed target, value) pairs)``, the latter written into their storage."""
        plain_targets, plain_values, ref_writes = [], [], []
        for target, value, storage in zip(self.targets, self.values, stored):
            if storage is None:
                if trace_of(target) is not trace:
                    target._check_update()
                plain_targets.append(target)
                plain_values.append(value)
            else:
                target._check_fits(value)  # a Ref keeps its shape and dtype
                ref_writes.append((target, value))
        return plain_targets, plain_values, ref_writes
