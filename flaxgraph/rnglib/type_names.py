"""The type names and the ``NotKey`` filter (the streams' counts) that Flax NNX's ``rnglib`` defines.

>>> import flaxgraph as nnx
>>> from flaxgraph.rnglib import NotKey
>>> [path for path, _ in nnx.state(nnx.Rngs(0), NotKey).flat_state()]
[('default', 'count')]

Source: Flax NNX 0.12 ``flax.nnx.rnglib`` (module-level names).
"""

from __future__ import annotations

from typing import TypeAlias

import jax

from flaxgraph.filterlib import All, Not
from flaxgraph.rnglib.rngs import RngKey, RngState, RngStream
from flaxgraph.rnglib.samplers import KeylessInitializer as KeylessInitializer

Counts = list[int]
AxesValue = int | None  # one axis of a split pattern, or None for no axis
SplitPattern = AxesValue | tuple[AxesValue, ...]
OutShardingType: TypeAlias = jax.sharding.NamedSharding | jax.sharding.PartitionSpec | None
RngValue = int | jax.Array  # what makes a stream: an int, a typed key or raw key data
StreamBackup = tuple[RngStream, jax.Array, jax.Array] | tuple[RngStream, jax.Array]

NotKey = All(RngState, Not(RngKey))
"""The filter of the RNG state that is not a key (the streams' ``RngCount``\\ s)."""


__all__ = [
    "AxesValue",
    "Counts",
    "KeylessInitializer",
    "NotKey",
    "OutShardingType",
    "RngValue",
    "SplitPattern",
    "StreamBackup",
]
