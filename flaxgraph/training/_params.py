"""Shared private helpers of ``Optimizer`` and ``EMA``: ``wrt`` sub-states, path checks, mirror Variables."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from flaxgraph.errors import MAX_LISTED, GraphStructureError, numbered_fixes
from flaxgraph.graphlib.paths import keys_str
from flaxgraph.graphlib.registry import is_node_module
from flaxgraph.graphlib.split_merge import state as graph_state
from flaxgraph.mesh_context import place_at_creation
from flaxgraph.statelib import State
from flaxgraph.typing import PathParts
from flaxgraph.variablelib.variable import Variable, is_variable

Pairs = Sequence[tuple[PathParts, Any]]


OPTIMIZER_SHARDING = "optimizer_sharding"
"""Parameter metadata naming the sharding of the optimizer state that mirrors it."""


def freeze_filter(wrt: Any) -> Any:
    """A hashable form of a filter (lists become tuples), so it can be static."""
    if isinstance(wrt, list):
        return tuple(freeze_filter(f) for f in wrt)
    return wrt


def filter_str(wrt: Any) -> str:
    """A filter as a user would write it: ``nnx.Param`` -> ``Param``."""
    if isinstance(wrt, type):
        return wrt.__name__
    if isinstance(wrt, tuple):
        return "(" + ", ".join(filter_str(f) for f in wrt) + ("," if len(wrt) == 1 else "") + ")"
    return repr(wrt)


def wrt_pairs(model: Any, wrt: Any, graph: bool | None = None) -> Pairs:
    """``(path, leaf)`` of ``model``'s ``wrt`` sub-state in walk order; ``TypeError`` for a lone Variable or array,
    ``SharedReferenceError`` for a Variable reachable twice in tree mode."""
    selected = graph_state(model, wrt, graph=graph)
    if not isinstance(selected, State):
        raise TypeError(
            f"Expected a model (an nnx.Module/Object or a container of them), got a "
            f"{type(model).__name__}."
        )
    return selected.flat_state()


def raw(leaf: Any) -> Any:
    """The value of a Variable, or the leaf itself."""
    return leaf.raw_value if is_variable(leaf) else leaf


def pure_state(paths: Sequence[PathParts], values: Sequence[Any]) -> State:
    """A State of raw values at ``paths``, in that order."""
    return State.from_flat_path(zip(paths, values))


def as_flat(tree: Any, what: str, wrt: Any = None) -> dict[PathParts, Any]:
    """``{path: leaf}`` of a State or mapping, or (given ``wrt``) of a model-shaped node's ``wrt``
    sub-state; ``TypeError`` for anything else."""
    if isinstance(tree, State):
        return dict(tree.flat_state())
    if isinstance(tree, Mapping):
        return dict(State(tree).flat_state())
    if wrt is not None and is_node_module(tree):
        return dict(wrt_pairs(tree, wrt))
    raise TypeError(
        f"{what} must be an nnx.State (as returned by nnx.grad), a nested mapping or, in "
        f"tree mode, a model-shaped object of gradients; got a {type(tree).__name__}."
    )


def values_at(
    paths: Sequence[PathParts],
    given: Mapping[PathParts, Any],
    *,
    header: str,
    fixes: Sequence[str],
) -> list[Any]:
    """The raw values of ``given`` at ``paths``, in order; ``GraphStructureError`` (``header``, both
    path sets, the numbered ``fixes``) if its paths differ."""
    if len(given) == len(paths):
        try:
            return [raw(given[p]) for p in paths]
        except KeyError:
            pass
    expected = set(paths)
    missing = [keys_str(p) for p in paths if p not in given]
    extra = [keys_str(p) for p in given if p not in expected]
    raise GraphStructureError(
        f"{header}\n"
        f"  missing ({len(missing)}): {_listing(missing)}\n"
        f"  extra ({len(extra)}): {_listing(extra)}\n" + numbered_fixes(fixes)
    )


def _listing(paths: list[str]) -> str:
    if not paths:
        return "none"
    shown = ", ".join(paths[:MAX_LISTED])
    return shown + (f" (and {len(paths) - MAX_LISTED} more)" if len(paths) > MAX_LISTED else "")


def unshare(tree: Any, others: Sequence[Any] = ()) -> Any:
    """``tree`` with each array leaf already seen (or in ``others``) copied: donation refuses shared buffers."""
    seen = {id(x) for x in others}

    def copy(x: Any) -> Any:
        if isinstance(x, jax.Array) and id(x) in seen:
            return jnp.array(x, copy=True)
        seen.add(id(x))
        return x

    return jax.tree.map(copy, tree)


def mirror(kind: type[Variable[Any]], value: Any, source: Any) -> Variable[Any]:
    """A ``kind`` Variable of ``value`` with ``source``'s metadata plus ``source_type``; ``optimizer_sharding``
    becomes ``out_sharding``, and sharding names are copied only for equal shapes."""
    if not is_variable(source):
        return kind(value)
    metadata = source._stored_metadata()
    own_names = metadata.pop(OPTIMIZER_SHARDING, None)
    if getattr(value, "shape", None) != getattr(source.raw_value, "shape", None):
        metadata.pop("out_sharding", None)
    elif own_names is not None:
        metadata["out_sharding"] = own_names
    metadata.pop("mutable", None)  # the mirror is written even if the parameter is read-only
    metadata["source_type"] = type(source)
    return kind._from_parts(place_at_creation(value, metadata, kind.__name__), metadata)


def wrap_mirroring(
    tree: Any,
    params: State,
    sources: Sequence[Any],
    kind: type[Variable[Any]],
    other: type[Variable[Any]],
) -> Any:
    """Wraps each leaf of ``tree``: sub-trees shaped like ``params`` by ``mirror``, others by ``other``."""
    treedef: Any = jax.tree.structure(params)  # a PyTreeDef (jaxlib ships no stub for it)

    def like_params(x: Any) -> bool:
        return type(x) is State and jax.tree.structure(x) == treedef

    def wrap(x: Any) -> Any:
        if like_params(x):
            leaves = treedef.flatten_up_to(x)
            return treedef.unflatten(
                [mirror(kind, leaf, src) for leaf, src in zip(leaves, sources)]
            )
        return other(x)

    return jax.tree.map(wrap, tree, is_leaf=like_params)


def unbox(tree: Any) -> Any:
    """``tree`` with every Variable replaced by its value (same structure otherwise)."""
    return jax.tree.map(raw, tree, is_leaf=is_variable)


def write_leaves(tree: Any, new: Any, what: str) -> None:
    """Sets ``tree``'s Variables to the leaves of ``new``, in place; ``ValueError`` showing both structures if they differ."""
    treedef: Any  # a PyTreeDef (jaxlib ships no stub for it)
    variables, treedef = jax.tree.flatten(tree, is_leaf=is_variable)
    try:
        values = treedef.flatten_up_to(new)
    except (ValueError, TypeError) as e:
        raise ValueError(
            f"The new {what} does not have the structure of the stored one.\n"
            f"  stored: {treedef}\n  new: {jax.tree.structure(new)}"
        ) from e
    for var, value in zip(variables, values):
        var.value = value
