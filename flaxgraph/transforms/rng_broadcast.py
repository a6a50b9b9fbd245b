"""A warning when a broadcast random stream is drawn inside ``vmap`` or ``scan``.

See the package README, "Broadcast random streams".
Source: flax#4195; Flax NNX's "Randomness" guide (``split_rngs``, ``StateAxes``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from flaxgraph.rnglib.broadcast_mark import BROADCAST_MARK
from flaxgraph.rnglib.rngs import RngCount, RngKey
from flaxgraph.transforms.caller_warnings import warn_at_caller
from flaxgraph.variablelib.variable import metadata_of


class RngBroadcastWarning(UserWarning):
    """A broadcast random stream was drawn in ``vmap``/``scan``: each instance got the same numbers.

    Issued once per call site through ``warnings`` (so ``simplefilter`` applies); no
    warning for a stream split with ``nnx.split_rngs``, mapped with ``StateAxes``, or
    carried in ``scan``, nor when marked intended with
    ``nnx.split_rngs(splits=nnx.BROADCAST)``.

    Example::

      >>> import warnings, jax.numpy as jnp, flaxgraph as nnx
      >>> model = nnx.Dropout(0.5, rngs=nnx.Rngs(dropout=0))
      >>> f = nnx.vmap(lambda m, x: m(x), in_axes=(None, 0))
      >>> with warnings.catch_warnings(record=True) as caught:
      ...   warnings.simplefilter('always')
      ...   _ = f(model, jnp.ones((4, 3)))
      >>> caught[0].category.__name__, 'args[0].rngs' in str(caught[0].message)
      ('RngBroadcastWarning', True)
    """


class RngWatch:
    """The random streams of one traced call whose key and count are both broadcast."""

    __slots__ = ("counts",)

    def __init__(
        self,
        paths: Sequence[tuple[Any, ...]],
        leaves: Sequence[Any],
        broadcast: Callable[[Any], bool],
        prefixes: Sequence[Any],
    ):
        keys: dict[tuple[Any, ...], Any] = {}
        counts = []
        for path, leaf, prefix in zip(paths, leaves, prefixes):
            if not broadcast(prefix):
                continue
            if type(leaf) is RngKey:
                keys[path[:-1]] = leaf
            elif type(leaf) is RngCount:
                counts.append((path[:-1], leaf, leaf.raw_value))
        self.counts = [
            (path, value, leaf)
            for path, leaf, value in counts
            if path in keys and not metadata_of(keys[path]).get(BROADCAST_MARK)
        ]

    def drawn(self) -> list[tuple[Any, ...]]:
        """The paths of the broadcast streams the function drew from."""
        return [path for path, value, leaf in self.counts if leaf.raw_value is not value]


def watch(
    paths: Sequence[tuple[Any, ...]],
    leaves: Sequence[Any],
    prefixes: Sequence[Any],
    broadcast: Callable[[Any], bool] = lambda p: p is None,
) -> RngWatch | None:
    """An ``RngWatch`` over the broadcast streams among ``leaves``, or ``None`` if none."""
    if not any(type(leaf) is RngCount for leaf in leaves):
        return None
    found = RngWatch(paths, leaves, broadcast, prefixes)
    return found if found.counts else None


def warn_drawn(
    found: RngWatch | None, where: Callable[[tuple[Any, ...]], str], name: str, axis_word: str
) -> None:
    """Warns (``RngBroadcastWarning``) if the function drew from a watched stream."""
    if found is None:
        return
    drawn = found.drawn()
    if not drawn:
        return
    streams = ", ".join(where(path) for path in drawn)
    what = "step" if name == "scan" else "instance"
    if name == "scan":
        fix = (
            "carry the RNG state so each step draws new keys (in_axes "
            "nnx.StateAxes({nnx.RngState: nnx.Carry, ...: None})), or split it per step "
            "(nnx.split_rngs(splits=length) over the scan, RNG state scanned on axis 0)"
        )
    else:
        fix = (
            "split the stream per instance: nnx.split_rngs(splits=n) over the vmap and "
            "the RNG state mapped on axis 0 (in_axes nnx.StateAxes({nnx.RngState: 0, "
            "...: None}) for a model)"
        )
    warn_at_caller(
        f"nnx.{name}: the broadcast ({axis_word} None) random stream at {streams} was drawn "
        f"inside the transform, so every {what} gets the same random numbers (e.g. the same "
        f"dropout mask; flax#4195).\nFix: {fix}; or, if the same numbers are intended, say "
        "so with nnx.split_rngs(splits=nnx.BROADCAST) on the transformed function (or "
        "filter nnx.RngBroadcastWarning).",
        RngBroadcastWarning,
    )
