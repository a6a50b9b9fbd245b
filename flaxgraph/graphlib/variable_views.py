"""Graph-wide Variable settings: ``with_vars`` (old name ``vars_as``) and ``set_metadata``.

Source: Flax NNX 0.12 ``nnx.with_vars``, ``nnx.vars_as``, ``nnx.set_metadata``.
"""

from __future__ import annotations

import warnings
from typing import Any, TypeVar

from flaxgraph.filterlib import Filter, to_predicate
from flaxgraph.graphlib.build import build_graph
from flaxgraph.graphlib.descendants import iter_graph
from flaxgraph.graphlib.paths import path_str
from flaxgraph.graphlib.refmap import RefMap
from flaxgraph.graphlib.registry import REGISTRY, VARIABLE
from flaxgraph.graphlib.walk import Walk
from flaxgraph.typing import PathParts
from flaxgraph.variablelib.defaults import check_flag
from flaxgraph.variablelib.variable import FLAG_KEYS, Variable

A = TypeVar("A")


class _AliasWalk(Walk):
    """A plain flatten that also records every further path of a shared Variable."""

    def __init__(self) -> None:
        super().__init__(RefMap())
        self.aliases: RefMap[list[PathParts]] = RefMap()

    def on_alias(self, x: object, path: PathParts, prefix: object) -> None:
        if REGISTRY.kind_of(x) is VARIABLE:
            self.aliases.setdefault(x, []).append(path)


def with_vars(
    node: A,
    /,
    *,
    hijax: bool | None = None,
    ref: bool | None = None,
    mutable: bool | None = None,
    only: Filter = ...,
    allow_duplicates: bool = False,
) -> A:
    """A copy of ``node`` whose selected Variables have the given flags; ``node`` is unchanged.

    Graph nodes are new objects; a selected Variable whose flags change becomes a new
    Variable of the same kind, value and metadata (a new ``jax.Ref`` for ``ref``/``hijax``
    holding the current value); every other Variable is the same object as in ``node``.

    Args:
      node: a graph (Module, Variable, list/dict of them…).
      hijax, ref, mutable: the new flags (see ``nnx.Variable``); ``None`` keeps each one's.
      only: a filter selecting the Variables (default: all).
      allow_duplicates: allow a selected Variable reachable along several paths (its one
        new copy is shared at all of them).

    Returns:
      The new graph (same structure as ``node``).

    Raises:
      ValueError: a selected Variable is shared and ``allow_duplicates`` is False; the
        message lists the paths.
      TypeError: a flag is not a ``bool``/``None``; ``ref`` for a value that is no array
        or number, or ``hijax`` for one that is no array, number or pytree of arrays.

    >>> import jax, jax.numpy as jnp, flaxgraph as nnx
    >>> layer = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> frozen = nnx.with_vars(layer, mutable=False, only=nnx.Param)
    >>> grads = jax.grad(lambda m: m(jnp.ones((1, 2))).sum())(frozen)
    >>> grads.kernel.shape
    (2, 3)
    >>> r = nnx.with_vars(layer, ref=True, only=nnx.Param)
    >>> r.kernel.ref, layer.kernel.ref
    (True, False)
    """
    for name, value in (("hijax", hijax), ("ref", ref), ("mutable", mutable)):
        check_flag("with_vars", name, value)
    predicate = to_predicate(only)
    walk = _AliasWalk()
    graphdef, leaves = walk.run(node)
    if REGISTRY.kind_of(node) is VARIABLE and not leaves:
        leaves = [((), node)]
    changes: list[tuple[PathParts, Variable[Any], tuple[bool, bool, bool]]] = []
    for path, leaf in leaves:
        if REGISTRY.kind_of(leaf) is not VARIABLE or not predicate(path, leaf):
            continue
        flags = (
            leaf.ref if ref is None else ref,
            leaf.hijax if hijax is None else hijax,
            leaf.mutable if mutable is None else mutable,
        )
        if flags != (leaf.ref, leaf.hijax, leaf.mutable):
            changes.append((path, leaf, flags))
    if not allow_duplicates:
        for path, leaf, _ in changes:
            others = walk.aliases.get(leaf)
            if others:
                listed = "\n".join(f"  {path_str('node', node, p)}" for p in [path, *others])
                raise ValueError(
                    f"with_vars would replace the {type(leaf).__name__} reachable at several "
                    f"paths (Found duplicate at paths):\n{listed}\nFix: pass allow_duplicates=True to give every path "
                    "the same new Variable, or narrow `only` to leave it unchanged."
                )
    replaced = RefMap[Any]()
    for _, leaf, flags in changes:
        replaced[leaf] = leaf._with_flags(*flags)
    if REGISTRY.kind_of(node) is VARIABLE:
        typed: A = replaced.get(node, node)
        return typed
    new_leaves = [
        replaced.get(leaf, leaf) if REGISTRY.kind_of(leaf) is VARIABLE else leaf
        for _, leaf in leaves
    ]
    # Every Variable (kept or new) is put in place as the object itself.
    reuse = {
        walk.ref_index[leaf]: new
        for (_, leaf), new in zip(leaves, new_leaves)
        if REGISTRY.kind_of(leaf) is VARIABLE
    }
    typed = build_graph(graphdef, new_leaves, reuse=reuse)
    return typed


def vars_as(
    node: A,
    /,
    *,
    hijax: bool | None = None,
    ref: bool | None = None,
    mutable: bool | None = None,
    only: Filter = ...,
    allow_duplicates: bool = False,
) -> A:
    """Deprecated name of ``with_vars`` (same arguments, result and errors).

    Warns:
      DeprecationWarning: always; call ``nnx.with_vars`` instead.
    """
    warnings.warn(
        "nnx.vars_as is deprecated; use nnx.with_vars (same arguments).",
        DeprecationWarning,
        stacklevel=2,
    )
    return with_vars(
        node, hijax=hijax, ref=ref, mutable=mutable, only=only, allow_duplicates=allow_duplicates
    )


def set_metadata(node: object, /, *, only: Filter = Variable, **metadata: object) -> None:
    """Sets ``metadata`` on every Variable of ``node`` that ``only`` selects, in place.

    Args:
      node: a graph (Module, Variable, list/dict of them…).
      only: a filter selecting the Variables (default: all Variables).
      **metadata: the entries to add or replace.

    Raises:
      ValueError: an entry is a flag (``ref``, ``hijax``, ``mutable``; use
        ``nnx.with_vars``). Nothing is changed then.
      TraceContextError (a ``ValueError``): a selected Variable belongs to another JAX
        trace; nothing is changed then.

    >>> import flaxgraph as nnx
    >>> class Foo(nnx.Module):
    ...   def __init__(self):
    ...     self.param = nnx.Param(0.0); self.variable = nnx.Variable(0.0)
    >>> node = Foo()
    >>> nnx.set_metadata(node, differentiable=False, only=nnx.Param)
    >>> node.param.get_metadata('differentiable'), node.variable.has_metadata('differentiable')
    (False, False)
    """
    flags = [k for k in FLAG_KEYS if k in metadata]
    if flags:
        raise ValueError(
            f"set_metadata cannot change the {flags[0]!r} flag.\nFix: make a copy with "
            f"`nnx.with_vars(node, {flags[0]}=...)`."
        )
    predicate = to_predicate(only)
    targets = [
        v for p, v in iter_graph(node) if REGISTRY.kind_of(v) is VARIABLE and predicate(p, v)
    ]
    for v in targets:  # check every target before writing any
        v._check_trace("set metadata")
    for v in targets:
        v.set_metadata(**metadata)
