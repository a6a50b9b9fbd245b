"""JAX's errors about mapped and scanned inputs, told with the user's paths.

``jax.vmap`` and ``jax.lax.scan`` see flaxgraph's groups of leaves, so their errors
name internal positions; on the error path only, ``mapped_input_error`` names
each input by its path with its size:

  >>> import jax.numpy as jnp, flaxgraph as nnx
  >>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
  >>> try:
  ...   nnx.vmap(lambda m, x: m(x), in_axes=(0, 0))(model, jnp.ones((8, 2)))
  ... except ValueError as e:
  ...   lines = str(e).splitlines()
  >>> print(lines[2]); print(lines[6])
    args[0].bias: axis 0 has size 3 (float32[3])
    args[1]: axis 0 has size 8 (float32[8,2])

Source: JAX's ``vmap``/``scan`` input checks ("vmap got inconsistent sizes for array
axes to be mapped", "scan got values with different leading axis sizes").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from flaxgraph.errors import MAX_LISTED
from flaxgraph.typing import PathParts


class MappedInput(NamedTuple):
    """One leaf of a mapped (or scanned) call: where it is and how it is mapped."""

    where: str  # its path from the arguments, e.g. ``args[0].hidden.kernel``
    root: str  # the argument it belongs to, e.g. ``args[0]``
    shape: tuple[int, ...]
    dtype: str
    axis: int


def _root(path: PathParts, where: Callable[[PathParts], str]) -> str:
    """The argument a leaf belongs to: ``args[i]`` / ``kwargs['k']``."""
    return where(path[:2]) if len(path) >= 2 else where(path)


def collect(
    paths: Sequence[PathParts],
    values: Sequence[Any],
    axes: Sequence[Any],
    where: Callable[[PathParts], str],
) -> list[MappedInput]:
    """The leaves mapped on an int axis, as ``MappedInput`` records (others skipped)."""
    found = []
    for path, value, axis in zip(paths, values, axes):
        if not isinstance(axis, int) or isinstance(axis, bool):
            continue
        shape = getattr(value, "shape", None)
        if shape is None:
            shape = np.shape(value)
        dtype = getattr(value, "dtype", None)
        found.append(
            MappedInput(
                where(path),
                _root(path, where),
                tuple(shape),
                str(dtype or type(value).__name__),
                axis,
            )
        )
    return found


def _describe(item: MappedInput) -> str:
    dims = ",".join(map(str, item.shape))
    size = item.shape[item.axis]
    return f"    {item.where}: axis {item.axis} has size {size} ({item.dtype}[{dims}])"


def _rank_error(items: list[MappedInput], name: str, axis_word: str) -> ValueError | None:
    """The first input whose axis does not fit its rank, as an error."""
    for item in items:
        rank = len(item.shape)
        if -rank <= item.axis < rank:
            continue
        need = item.axis + 1 if item.axis >= 0 else -item.axis
        return ValueError(
            f"nnx.{name} was requested to map {item.where} along {axis_word} {item.axis}, "
            f"which implies that its rank should be at least {need}, but is only {rank} "
            f"(its shape is {item.shape}).\nFix: give {item.root} an axis below its rank in "
            f"{axis_word}, or None to pass it unmapped (broadcast) to every "
            f"{'step' if name == 'scan' else 'instance'}."
        )
    return None


def _sizes_error(
    items: list[MappedInput], name: str, axis_word: str, given: int | None
) -> ValueError | None:
    """Inputs whose mapped axes disagree in size (with each other or ``given``), as an error."""
    by_size: dict[int, list[MappedInput]] = {}
    for item in items:
        by_size.setdefault(item.shape[item.axis], []).append(item)
    if len(by_size) < 2 and (given is None or not by_size or given in by_size):
        return None
    what = "steps" if name == "scan" else "instances"
    lines = [
        (
            f"nnx.{name} got values with different leading axis sizes ({axis_word})"
            if name == "scan"
            else f"nnx.{name} got inconsistent sizes for array axes to be mapped ({axis_word})"
        )
        + f": every mapped array must have the same size along its axis (the number of {what})"
        + (f", here {given} ({'length' if name == 'scan' else 'axis_size'})." if given else ".")
    ]
    for size, members in sorted(by_size.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"  size {size}:")
        lines.extend(_describe(m) for m in members[:MAX_LISTED])
        if len(members) > MAX_LISTED:
            lines.append(f"    ... and {len(members) - MAX_LISTED} more")
    roots: dict[str, set[int]] = {}
    for item in items:
        roots.setdefault(item.root, set()).add(item.shape[item.axis])
    mixed = [root for root, sizes in roots.items() if len(sizes) > 1]
    if mixed:
        lines.append(
            f"The arrays of {', '.join(mixed)} disagree among themselves: "
            f"{'it is' if len(mixed) == 1 else 'they are'} probably not stacked (one copy, "
            f"not one per {what[:-1]})."
        )
        lines.append(
            f"Fix: give {mixed[0]} {axis_word} None to share it across {what} (e.g. "
            f"in_axes=(None, 0)), or build it stacked (nnx.vmap over its constructor with "
            "nnx.split_rngs)."
        )
    else:
        lines.append(
            f"Fix: make the sizes agree, or give the inputs that should be shared {axis_word} None."
        )
    return ValueError("\n".join(lines))


def mapped_input_error(
    paths: Sequence[PathParts],
    values: Sequence[Any],
    axes: Sequence[Any],
    where: Callable[[PathParts], str],
    name: str,
    given: int | None = None,
) -> ValueError | None:
    """A ``ValueError`` naming the inputs that make a mapped call fail, or ``None``.

    ``axes`` holds each leaf's axis (non-ints skipped); ``given`` is ``axis_size``/``length``
    if given. ``None`` means the inputs are consistent and JAX's error stands.
    """
    items = collect(paths, values, axes, where)
    axis_word = "in_axes"
    return _rank_error(items, name, axis_word) or _sizes_error(items, name, axis_word, given)
