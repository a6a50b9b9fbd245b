"""``nnx.BROADCAST``: ``split_rngs(splits=nnx.BROADCAST)`` marks a broadcast on purpose.

While the call runs, the selected key Variables carry ``broadcast_rngs=True`` metadata
and the transforms do not warn. See the package README, "Broadcast on purpose".

>>> import flaxgraph as nnx
>>> rngs = nnx.Rngs(dropout=0)
>>> with nnx.split_rngs(rngs, splits=nnx.BROADCAST):
...   rngs.dropout.key.get_metadata('broadcast_rngs')
True
>>> rngs.dropout.key.get_metadata('broadcast_rngs', False)
False

Source: flax#4195; Flax NNX 0.12 ``nnx.split_rngs`` (whose ``splits`` this extends).
"""

from __future__ import annotations

from typing import Any

from flaxgraph.variablelib.variable import metadata_of, write_metadata

BROADCAST_MARK = "broadcast_rngs"
"""Metadata key on a stream's key Variable: the stream is broadcast on purpose."""


class _Broadcast:
    __slots__ = ()

    def __repr__(self) -> str:
        return "nnx.BROADCAST"


BROADCAST: Any = _Broadcast()
"""The ``splits`` of ``nnx.split_rngs`` that keeps the keys and marks the selected
streams as broadcast on purpose inside ``vmap``/``scan``."""


class MarkBackups:
    """The key Variables ``split_rngs(splits=BROADCAST)`` marked, to unmark with ``restore()`` or ``with``."""

    __slots__ = ("entries",)

    def __init__(self, entries: list[tuple[Any, dict[str, Any]]]):
        self.entries = entries

    def restore(self) -> None:
        """Puts back every marked key Variable's metadata."""
        for var, metadata in self.entries:
            write_metadata(var, metadata)

    def __enter__(self) -> MarkBackups:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.restore()


def mark(var: Any) -> tuple[Any, dict[str, Any]]:
    """Marks the key Variable ``var`` in place; returns its backup entry."""
    old = metadata_of(var)
    write_metadata(var, {**old, BROADCAST_MARK: True})
    return var, old
