"""Split and merge contexts: several graphs split (or merged) with one reference index.

Source: Flax NNX ``nnx.split_context``, ``nnx.merge_context`` (0.12).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from flaxgraph.filters import Filter
from flaxgraph.graph.flatten import flatten
from flaxgraph.graph.graphdef import GraphDef
from flaxgraph.graph.refmap import RefMap
from flaxgraph.graph.split_merge import _ordered_leaves, _states_from_leaves
from flaxgraph.graph.unflatten import unflatten


class SplitContext:
    """Splits several graphs with one reference index (see ``split_context``)."""

    def __init__(self) -> None:
        self.ref_index: RefMap[int] = RefMap()

    def split(self, node: Any, *filters: Filter) -> Any:
        """Like ``nnx.split``, sharing this context's reference index with earlier calls."""
        graphdef, leaves = flatten(node, ref_index=self.ref_index)
        return (graphdef, *_states_from_leaves(node, leaves, filters, strict=True))


class MergeContext:
    """Merges several GraphDefs with one reference index (see ``merge_context``)."""

    def __init__(self) -> None:
        self.index_ref: dict[int, Any] = {}

    def merge(self, graphdef: GraphDef, state: Any = None, /, *states: Any) -> Any:
        """Like ``nnx.merge``, resolving references to nodes merged earlier in this context."""
        all_states = () if state is None else (state, *states)
        return unflatten(graphdef, _ordered_leaves(graphdef, all_states), index_ref=self.index_ref)


@contextlib.contextmanager
def split_context() -> Iterator[SplitContext]:
    """Context in which ``ctx.split`` calls share one reference index: a node seen in
    an earlier split becomes a reference in later GraphDefs.

    Example::

      with nnx.split_context() as ctx:
        g1, s1 = ctx.split(m1)
        g2, s2 = ctx.split(m2)      # nodes shared with m1 are references
      with nnx.merge_context() as ctx:
        m1, m2 = ctx.merge(g1, s1), ctx.merge(g2, s2)   # sharing restored

    Source: Flax NNX ``nnx.split_context``/``nnx.merge_context``.
    """
    yield SplitContext()


@contextlib.contextmanager
def merge_context() -> Iterator[MergeContext]:
    """Context in which ``ctx.merge`` calls share one reference index (see
    ``split_context``)."""
    yield MergeContext()
