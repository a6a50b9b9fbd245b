"""Split, merge and update contexts: several splits or merges sharing one reference index.

The four steps of an update context: the package README, "Update contexts".
Source: Flax NNX 0.12 ``nnx.split_context``, ``merge_context``, ``update_context``,
``current_update_context`` and their context classes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Iterator
from typing import Any, TypeVar

from flaxgraph.config import Flag
from flaxgraph.filterlib import Filter
from flaxgraph.graphlib.build import build_graph
from flaxgraph.graphlib.graphdefs import renumber
from flaxgraph.graphlib.ref_outputs import mark_ref_outputs
from flaxgraph.graphlib.refmap import RefMap
from flaxgraph.graphlib.split_merge import graphdef_and_states, ordered_leaves, states_from_leaves
from flaxgraph.graphlib.walk import flatten_with_paths
from flaxgraph.modes import resolve_graph
from flaxgraph.statelib import FlatState, State
from flaxgraph.tracing import current_trace

F = TypeVar("F", bound=Callable[..., Any])

_UPDATE_CONTEXTS: Flag[tuple[tuple[Hashable, UpdateContext], ...]] = Flag("update_contexts", ())
"""The active update contexts of this thread, innermost last (a scoped flag)."""


class UpdateContext:
    """The bookkeeping of one ``update_context(tag)``.

    Attributes:
      tag: the tag it was opened with.
      trace: the JAX trace it was opened in ("outside" the transform).
      outer_index_ref: reference index -> the caller's object, from step (1).
      inner_ref_outer_index: inner object -> its outer index, from step (2).

    >>> import flaxgraph as nnx
    >>> with nnx.update_context('tag') as ctx:
    ...   print(ctx, ctx.outer_index_ref)
    UpdateContext(tag='tag') None
    """

    def __init__(self, tag: Hashable):
        self.tag = tag
        self.trace = current_trace()
        self.outer_index_ref: dict[int, Any] | None = None
        self.inner_ref_outer_index: RefMap[int] | None = None

    def is_inner(self, inner: bool | None) -> bool:
        """``inner`` if given, else whether the current JAX trace differs from the opening one."""
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
    """Opens an ``UpdateContext`` for ``tag``: a context manager, or a decorator (one per call).

    Args:
      tag: any hashable; ``split_context(tag)``, ``merge_context(tag)`` and
        ``current_update_context(tag)`` find the context by it.

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
    """
    return _UpdateContextManager(tag)


def _find(tag: Hashable | None) -> UpdateContext | None:
    if tag is None:
        return None
    return next((ctx for t, ctx in reversed(_UPDATE_CONTEXTS.get()) if t == tag), None)


def current_update_context(tag: Hashable) -> UpdateContext:
    """The innermost active ``UpdateContext`` opened with ``tag``.

    Raises:
      ValueError: no ``update_context(tag)`` is active in this thread.

    >>> import flaxgraph as nnx
    >>> with nnx.update_context('t') as ctx:
    ...   nnx.current_update_context('t') is ctx
    True
    """
    ctx = _find(tag)
    if ctx is None:
        raise ValueError(
            f"No update context with tag {tag!r} is active.\nFix: call this inside "
            f"`with nnx.update_context({tag!r}):` (or a function decorated with it)."
        )
    return ctx


class SplitContext:
    """Splits several graphs with one reference index (example: ``split_context``).

    Attributes:
      ctxtag: the update context's tag, or ``None``.
      ref_index: object -> reference index, shared by this context's splits.
      is_inner: whether it runs inside the transform (step 3) rather than outside (step 1).
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

        At step (3) a Ref-backed Variable's entry is ``graphlib.NoUpdate`` if it came from the
        caller and ``graphlib.ArrayRefOutput`` if it was created inside.
        """
        graphdef, leaves = self._flatten(node, graph)
        return (graphdef, *states_from_leaves(node, leaves, filters, strict=True))

    def flatten(self, node: object, *filters: Filter, graph: bool | None = None) -> Any:
        """Like ``split``, returning the GraphDef then one ``FlatState`` per filter (one without).

        >>> import flaxgraph as nnx
        >>> graphdef, flat = nnx.SplitContext().flatten(nnx.Linear(1, 1, rngs=nnx.Rngs(0)))
        >>> sorted(p for p, _ in flat)
        [('bias',), ('kernel',)]
        """
        graphdef, leaves = self._flatten(node, graph)
        states = states_from_leaves(node, leaves, filters, strict=True)
        return (graphdef, *(FlatState(_flat_pairs(s)) for s in states))

    def _flatten(self, node: object, graph: bool | None) -> Any:
        graphdef, leaves = flatten_with_paths(
            node, ref_index=self.ref_index, graph=resolve_graph(graph)
        )
        uctx = _find(self.ctxtag)
        if uctx is not None and self.is_inner and (inner := uctx.inner_ref_outer_index) is not None:
            # Step (3): nodes from the inner merge get their outer index, new ones past them.
            offset = 1 + max(uctx.outer_index_ref or (-1,))
            graphdef = renumber(graphdef, self.ref_index, inner, offset)
            leaves = mark_ref_outputs(leaves, inner)
        return graphdef, leaves


def _flat_pairs(state: object) -> list[tuple[Any, Any]]:
    """``(path, leaf)`` pairs of a split's State (a root leaf is its own state)."""
    return list(state.flat_state()) if isinstance(state, State) else [((), state)]


class MergeContext:
    """Merges several GraphDefs with one reference index (example: ``split_context``).

    Attributes:
      ctxtag: the update context's tag, or ``None``.
      index_ref: reference index -> object, shared by this context's merges.
      is_inner: whether it runs inside the transform (step 2) rather than outside (step 4).
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
        """Like ``nnx.merge``, sharing this context's index; at step (4) it updates the caller."""
        graphdef, all_states = graphdef_and_states(graphdef, states)
        leaves = ordered_leaves(graphdef, all_states)
        uctx = _find(self.ctxtag)
        reuse = uctx.outer_index_ref if uctx is not None and not self.is_inner else None
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
    """A context whose ``ctx.split`` calls share one reference index (``SplitContext``).

    Args:
      ctxtag: the tag of an active ``update_context`` (step 3 if its inner merge has
        run, else step 1), or ``None``.

    On exit the context's ``ref_index`` and ``ctxtag`` are deleted (as in Flax).

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
    """A context whose ``ctx.merge`` calls share one reference index (``MergeContext``).

    Args:
      ctxtag: the tag of an active ``update_context``, or ``None``.
      inner: inside the transform (step 2) or outside (step 4); ``None``: inside when the
        current JAX trace differs from the update context's.

    On exit the context's ``index_ref`` and ``ctxtag`` are deleted. Example: ``split_context``.
    """
    uctx = _find(ctxtag)
    ctx = MergeContext(ctxtag, is_inner=None if uctx is None else uctx.is_inner(inner))
    try:
        yield ctx
        if uctx is not None and ctx.is_inner:
            uctx.inner_ref_outer_index = RefMap.from_indexmap(ctx.index_ref)
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
