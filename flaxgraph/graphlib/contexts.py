"""Split, merge and update contexts: several graphs split (or merged) with one
reference index, and in-place updates across a transform boundary.

* ``split_context()``: successive ``ctx.split`` calls share one reference index,
  so a node seen in an earlier split is a reference in later GraphDefs;
  ``merge_context()`` resolves such references across ``ctx.merge`` calls.
* ``update_context(tag)``: the bookkeeping that lets a hand-written transform
  update its inputs in place, structure included. Inside it, four calls happen:
  (1) ``split_context(tag)`` outside the transform, (2) ``merge_context(tag,
  inner=True)`` inside, (3) ``split_context(tag)`` inside, (4)
  ``merge_context(tag, inner=False)`` outside. Step (3) numbers every node that
  came in through (2) with its index from (1), so step (4) updates the caller's
  objects in place (new attributes, deleted ones, new references, Variable
  values) instead of building new ones. The numbering travels in the GraphDef,
  so a cached ``jax.jit`` call (where (2) and (3) do not run) works too.

Source: Flax NNX 0.12 ``nnx.split_context``, ``nnx.merge_context``,
``nnx.update_context``, ``nnx.current_update_context``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Iterator
from typing import Any, TypeVar

from flaxgraph.config import Flag
from flaxgraph.filterlib import Filter
from flaxgraph.graphlib.build import build_graph
from flaxgraph.graphlib.graphdefs import GraphDef, renumber
from flaxgraph.graphlib.ref_outputs import mark_ref_outputs
from flaxgraph.graphlib.refmap import RefMap
from flaxgraph.graphlib.split_merge import (
    graphdef_and_states,
    ordered_leaves,
    states_from_leaves,
)
from flaxgraph.graphlib.walk import flatten_with_paths
from flaxgraph.modes import resolve_graph
from flaxgraph.statelib import FlatState, State
from flaxgraph.tracing import current_trace

F = TypeVar("F", bound=Callable[..., Any])

_UPDATE_CONTEXTS: Flag[tuple[tuple[Hashable, UpdateContext], ...]] = Flag("update_contexts", ())
"""The active update contexts of this thread, innermost last (a scoped flag)."""


class UpdateContext:
    """The bookkeeping of one ``update_context(tag)`` (see the module docstring).

    Attributes:
      tag: the tag it was opened with.
      trace: the JAX trace it was opened in ("outside" the transform).
      outer_index_ref: reference index -> the caller's object, from step (1).
      inner_ref_outer_index: inner object -> its outer index, from step (2).

    Example (the full protocol is in ``update_context``)::

      >>> import flaxgraph as nnx
      >>> with nnx.update_context('tag') as ctx:
      ...   print(ctx, ctx.outer_index_ref)
      UpdateContext(tag='tag') None

    Source: Flax NNX 0.12 ``nnx.UpdateContext``.
    """

    def __init__(self, tag: Hashable):
        self.tag = tag
        self.trace = current_trace()
        self.outer_index_ref: dict[int, Any] | None = None
        self.inner_ref_outer_index: RefMap[int] | None = None

    def is_inner(self, inner: bool | None) -> bool:
        """Whether a split/merge happens inside the transform: ``inner`` if given, else
        whether the current JAX trace differs from the one the context was opened in."""
        return current_trace() is not self.trace if inner is None else bool(inner)

    def __enter__(self) -> UpdateContext:
        _UPDATE_CONTEXTS.push((*_UPDATE_CONTEXTS.get(), (self.tag, self)))
        return self

    def __exit__(self, *exc: object) -> None:
        _UPDATE_CONTEXTS.pop()
        self.outer_index_ref = None
        self.inner_ref_outer_index = None

    def __repr__(self) -> str:
        return f"UpdateContext(tag={self.tag!r})"


class _UpdateContextManager(contextlib.ContextDecorator):
    def __init__(self, tag: Hashable):
        self.tag = tag
        self.contexts: list[UpdateContext] = []

    def __enter__(self) -> UpdateContext:
        ctx = UpdateContext(self.tag)
        self.contexts.append(ctx)
        return ctx.__enter__()

    def __exit__(self, *exc: object) -> None:
        self.contexts.pop().__exit__(*exc)


def update_context(tag: Hashable) -> object:
    """Opens an ``UpdateContext`` for ``tag``: a context manager, or a decorator that
    opens a fresh one for each call (see the module docstring).

    Args:
      tag: any hashable; ``split_context(tag)``/``merge_context(tag)`` and
        ``current_update_context(tag)`` find the context by it.

    Example::

      >>> import jax, flaxgraph as nnx
      >>> class Foo(nnx.Module): pass
      >>> m1 = Foo()
      >>> with nnx.update_context('example'):
      ...   with nnx.split_context('example') as ctx:
      ...     graphdef, state = ctx.split(m1)
      ...   @jax.jit
      ...   def f(graphdef, state):
      ...     with nnx.merge_context('example', inner=True) as ctx:
      ...       m2 = ctx.merge(graphdef, state)
      ...     m2.a = 1
      ...     m2.ref = m2                      # a new cycle
      ...     with nnx.split_context('example') as ctx:
      ...       return ctx.split(m2)
      ...   graphdef_out, state_out = f(graphdef, state)
      ...   with nnx.merge_context('example', inner=False) as ctx:
      ...     m3 = ctx.merge(graphdef_out, state_out)
      >>> m3 is m1, m1.a, m1.ref is m1
      (True, 1, True)

    Source: Flax NNX 0.12 ``nnx.update_context``.
    """
    return _UpdateContextManager(tag)


def _find(tag: Hashable | None) -> UpdateContext | None:
    if tag is None:
        return None
    for t, ctx in reversed(_UPDATE_CONTEXTS.get()):
        if t == tag:
            return ctx
    return None


def current_update_context(tag: Hashable) -> UpdateContext:
    """Returns the innermost active ``UpdateContext`` opened with ``tag``.

    Raises:
      ValueError: no ``update_context(tag)`` is active in this thread.

    Example::

      >>> import flaxgraph as nnx
      >>> with nnx.update_context('t') as ctx:
      ...   nnx.current_update_context('t') is ctx
      True

    Source: Flax NNX 0.12 ``nnx.current_update_context``.
    """
    ctx = _find(tag)
    if ctx is None:
        raise ValueError(
            f"No update context with tag {tag!r} is active.\nFix: call this inside "
            f"`with nnx.update_context({tag!r}):` (or a function decorated with it)."
        )
    return ctx


class SplitContext:
    """Splits several graphs with one reference index (see ``split_context``).

    Attributes:
      ctxtag: the update context's tag, or ``None``.
      ref_index: object -> reference index, shared by this context's splits.
      is_inner: whether this split runs inside the transform (step 3 of an update
        context) rather than outside (step 1).

    Example::

      >>> import flaxgraph as nnx
      >>> layer = nnx.Linear(1, 1, rngs=nnx.Rngs(0))
      >>> ctx = nnx.SplitContext()
      >>> (_, s1), (_, s2) = ctx.split(layer), ctx.split([layer])
      >>> len(s1), len(s2)          # the second split refers to the first
      (2, 0)

    Source: Flax NNX 0.12 ``nnx.SplitContext``.
    """

    def __init__(
        self,
        ctxtag: Hashable | None = None,
        ref_index: RefMap[int] | None = None,
        is_inner: bool | None = None,
    ):
        self.ctxtag = ctxtag
        self.ref_index: RefMap[int] = RefMap() if ref_index is None else ref_index
        self.is_inner = is_inner

    def split(self, node: object, *filters: Filter, graph: bool | None = None) -> Any:
        """Like ``nnx.split``, sharing this context's reference index with earlier calls.

        Inside a transform (step 3 of an update context) a Ref-backed Variable's
        entry holds ``graphlib.NoUpdate`` if it came from the caller (its Ref was
        written in place) and ``graphlib.ArrayRefOutput`` if it was created inside.
        """
        graphdef, leaves = self._flatten(node, graph)
        return (graphdef, *states_from_leaves(node, leaves, filters, strict=True))

    def flatten(self, node: object, *filters: Filter, graph: bool | None = None) -> Any:
        """Like ``split``, with flat States: ``(graphdef, flat_state, ...)``.

        Returns:
          The GraphDef, then one ``FlatState`` (``(path, leaf)`` pairs, a pytree)
          per filter, or one for everything without filters.

        Example::

          >>> import flaxgraph as nnx
          >>> graphdef, flat = nnx.SplitContext().flatten(nnx.Linear(1, 1, rngs=nnx.Rngs(0)))
          >>> sorted(p for p, _ in flat)
          [('bias',), ('kernel',)]

        Source: Flax NNX 0.12 ``SplitContext.flatten``.
        """
        graphdef, leaves = self._flatten(node, graph)
        states = states_from_leaves(node, leaves, filters, strict=True)
        return (graphdef, *(FlatState(_flat_pairs(s)) for s in states))

    def _flatten(self, node: object, graph: bool | None) -> Any:
        graphdef, leaves = flatten_with_paths(
            node, ref_index=self.ref_index, graph=resolve_graph(graph)
        )
        uctx = _find(self.ctxtag)
        if uctx is not None and self.is_inner and uctx.inner_ref_outer_index is not None:
            graphdef = self._renumbered(graphdef, uctx)
            leaves = mark_ref_outputs(leaves, uctx.inner_ref_outer_index)
        return graphdef, leaves

    def _renumbered(self, graphdef: GraphDef[Any], uctx: UpdateContext) -> GraphDef[Any]:
        # Nodes that came in through the inner merge get their outer index; new nodes
        # get indices past every outer one.
        inner = uctx.inner_ref_outer_index
        assert inner is not None
        return renumber(graphdef, self.ref_index, inner, 1 + max(uctx.outer_index_ref or (-1,)))


def _flat_pairs(state: object) -> list[tuple[Any, Any]]:
    """``(path, leaf)`` pairs of a split's State (or of a root leaf, its own state)."""
    if isinstance(state, State):
        return list(state.flat_state())
    return [((), state)]


class MergeContext:
    """Merges several GraphDefs with one reference index (see ``merge_context``).

    Attributes:
      ctxtag: the update context's tag, or ``None``.
      index_ref: reference index -> object, shared by this context's merges.
      is_inner: whether this merge runs inside the transform (step 2 of an update
        context) rather than outside (step 4, which updates the caller's objects).

    Example::

      >>> import flaxgraph as nnx
      >>> layer = nnx.Linear(1, 1, rngs=nnx.Rngs(0))
      >>> split_ctx = nnx.SplitContext()
      >>> (g1, s1), (g2, s2) = split_ctx.split(layer), split_ctx.split([layer])
      >>> merge_ctx = nnx.MergeContext()
      >>> a, (b,) = merge_ctx.merge(g1, s1), merge_ctx.merge(g2, s2)
      >>> a is b
      True

    Source: Flax NNX 0.12 ``nnx.MergeContext``.
    """

    def __init__(
        self,
        ctxtag: Hashable | None = None,
        index_ref: dict[int, Any] | None = None,
        is_inner: bool | None = None,
    ):
        self.ctxtag = ctxtag
        self.index_ref: dict[int, Any] = {} if index_ref is None else index_ref
        self.is_inner = is_inner

    def merge(
        self,
        graphdef: object,
        /,
        *states: object,
        copy: bool = False,
        recreate_variables: bool = True,
    ) -> Any:
        """Like ``nnx.merge``, resolving references to nodes merged earlier in this
        context; at step (4) of an update context, updates the caller's objects."""
        graphdef, all_states = graphdef_and_states(graphdef, states)
        leaves = ordered_leaves(graphdef, all_states)
        uctx = _find(self.ctxtag)
        reuse = None
        if uctx is not None and not self.is_inner:
            reuse = uctx.outer_index_ref
        return build_graph(
            graphdef,
            leaves,
            index_ref=self.index_ref,
            reuse=reuse,
            copy_variables=copy,
            recreate_variables=recreate_variables,
        )


@contextlib.contextmanager
def split_context(ctxtag: Hashable | None = None) -> Iterator[SplitContext]:
    """Context in which ``ctx.split`` calls share one reference index: a node seen in
    an earlier split becomes a reference in later GraphDefs.

    Args:
      ctxtag: the tag of an active ``update_context`` this split takes part in
        (step 3, inside the transform, if the inner merge of step 2 has run in that
        context; else step 1, outside), or ``None``.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> shared = nnx.Param(jnp.ones(2))
      >>> a, b = nnx.Dict(w=shared), nnx.Dict(w=shared)
      >>> with nnx.split_context() as ctx:
      ...   ga, sa = ctx.split(a)
      ...   gb, sb = ctx.split(b)             # w is a reference to a's
      >>> len(sb)
      0
      >>> with nnx.merge_context() as ctx:
      ...   a2, b2 = ctx.merge(ga, sa), ctx.merge(gb, sb)
      >>> a2['w'] is b2['w']
      True

    On exit the context's ``ref_index`` and ``ctxtag`` are deleted (as in Flax), so
    the context no longer keeps the split objects alive.

    Source: Flax NNX 0.12 ``nnx.split_context``.
    """
    uctx = _find(ctxtag)
    # Inside the transform (step 3) exactly when the inner merge (step 2) has run.
    ctx = SplitContext(
        ctxtag, is_inner=None if uctx is None else uctx.inner_ref_outer_index is not None
    )
    try:
        yield ctx
        if uctx is not None and not ctx.is_inner:
            uctx.outer_index_ref = {i: x for x, i in ctx.ref_index.items()}
    finally:
        # The context is spent: drop its index (it keeps every split object alive).
        del ctx.ref_index, ctx.ctxtag


@contextlib.contextmanager
def merge_context(
    ctxtag: Hashable | None = None, inner: bool | None = None
) -> Iterator[MergeContext]:
    """Context in which ``ctx.merge`` calls share one reference index (see
    ``split_context``).

    Args:
      ctxtag: the tag of an active ``update_context``, or ``None``.
      inner: whether this merge runs inside the transform (step 2) or outside
        (step 4); ``None``: inside when the current JAX trace differs from the one
        the update context was opened in.

    Example: see ``split_context``.

    On exit the context's ``index_ref`` and ``ctxtag`` are deleted (as in Flax).

    Source: Flax NNX 0.12 ``nnx.merge_context``.
    """
    uctx = _find(ctxtag)
    ctx = MergeContext(ctxtag, is_inner=None if uctx is None else uctx.is_inner(inner))
    try:
        yield ctx
        if uctx is not None and ctx.is_inner:
            inner_map = RefMap[int]()
            for i, x in ctx.index_ref.items():
                inner_map[x] = i
            uctx.inner_ref_outer_index = inner_map
        elif uctx is not None:
            uctx.outer_index_ref = None
            uctx.inner_ref_outer_index = None
    finally:
        del ctx.index_ref, ctx.ctxtag


__all__ = [
    "SplitContext",
    "MergeContext",
    "UpdateContext",
    "split_context",
    "merge_context",
    "update_context",
    "current_update_context",
]
