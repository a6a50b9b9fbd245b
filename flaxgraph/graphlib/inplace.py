"""In-place graph edits: ``update`` writes a State into existing objects, ``pop`` removes leaves.

Source: Flax NNX ``nnx.update``, ``nnx.pop`` (0.12).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from flaxgraph.errors import GraphStructureError
from flaxgraph.filterlib import Filter, filters_to_predicates
from flaxgraph.graphlib.paths import keys_str, path_str
from flaxgraph.graphlib.registry import (
    ARRAY,
    DICT,
    NODE,
    PYTREE,
    REGISTRY,
    SEQUENCE,
    VARIABLE,
    DataLeaf,
    Kind,
    NodeTypeImpl,
    flatten_pytree,
    is_array_leaf,
    node_impl,
)
from flaxgraph.graphlib.walk import flatten_with_paths
from flaxgraph.graphlib.writes import Writes
from flaxgraph.statelib import State, partition
from flaxgraph.tracing import current_trace
from flaxgraph.typing import MISSING, PathParts
from flaxgraph.variablelib.variable import Variable, is_variable, mark_fresh, metadata_of


def _get_child(node: Any, key: Hashable) -> object:
    kind = REGISTRY.kind_of(node)
    if kind is NODE:
        return node_impl(node).get_child(node, key)
    if kind is DICT:
        return node.get(key, MISSING)
    if kind is SEQUENCE:
        return node[key] if isinstance(key, int) and -len(node) <= key < len(node) else MISSING
    if kind is PYTREE:
        return dict(flatten_pytree(node)[0]).get(key, MISSING)
    return MISSING


def _check_node_trace(node: object, what: str) -> None:
    # Checked while planning, so a node from another trace fails before any write.
    check = getattr(node, "_check_trace", None)
    if check is not None:
        check(what)


def _setter(node: Any, key: Hashable, where: Callable[[], str]) -> Callable[[Any], None]:
    if REGISTRY.kind_of(node) is NODE:
        impl = node_impl(node)
        _check_node_trace(node, "update")
        return lambda value: impl.set_child(node, key, value)
    if type(node) in (dict, list):
        return lambda value: node.__setitem__(key, value)
    raise GraphStructureError(
        f"Cannot write the raw leaf at {where()}: it sits in an immutable "
        f"{type(node).__name__}.\nFix: hold the array in a Variable (nnx.Variable(x)), or "
        "use a list or dict instead."
    )


def update(node: object, state: object, /, *states: object) -> None:
    """Writes the values of State(s) into ``node`` in place.

    For every leaf of the States, the Variable at the same path in ``node`` gets the
    leaf's value (and metadata, if the leaf is a Variable); a raw array attribute is
    replaced; a path ``node`` does not have yet is added as a new attribute. Leaves
    of ``node`` absent from the States are left as they are.

    Args:
      node: the graph to update.
      state, *states: States (or nested mappings) whose paths are relative to ``node``.

    Raises:
      GraphStructureError (a ``ValueError``): the States' tree does not fit ``node``:
        a sub-state where ``node`` has a leaf, a leaf where it has a sub-graph, or a
        path through a missing node. Nothing is written in that case: either every
        leaf is updated or none is.
      TraceContextError (a ``ValueError``): ``node`` was created outside the current
        JAX transform.

    >>> import jax, jax.numpy as jnp, flaxgraph as nnx
    >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> kernel = m.kernel
    >>> nnx.update(m, jax.tree.map(jnp.zeros_like, nnx.state(m)))
    >>> m.kernel is kernel, float(m.kernel.value.sum())
    (True, 0.0)
    """
    trace = current_trace()
    writes = Writes()
    for s in (state, *states):
        if not isinstance(s, State):
            s = State(s) if isinstance(s, Mapping) else s
        if is_variable(s):
            if not is_variable(node):
                raise GraphStructureError(
                    f"update got a {type(s).__name__} for a {type(node).__name__}; pass a State."
                )
            _write_leaf(writes, node, s)
            continue
        if not isinstance(s, State):
            raise TypeError(
                f"update expects States (or nested dicts) after the node, got a {type(s).__name__}."
            )
        _plan_update(node, s, (), node, writes, trace)
    writes.apply(trace)  # checks everything first: either every leaf is updated or none is


def _plan_update(
    node: Any,
    state: State,
    prefix: object,
    root: object,
    writes: Writes,
    trace: object,
    kinds: Mapping[type, Kind] = REGISTRY.kind_cache(),
    impls: Mapping[type, NodeTypeImpl] = REGISTRY.node_impls(),
) -> None:
    # ``prefix`` is the path to ``node`` as a linked pair ``(parent_prefix, key)`` (``()``
    # at the root): cheap to extend, made into a tuple only for an error message.
    # ``kinds`` and ``impls``: the engine's classification, remembered per type, and the
    # node impls, read through their accessors once (the mappings are never replaced).
    t = type(node)
    try:
        kind = kinds[t]
    except KeyError:
        kind = REGISTRY.classify(node)
    get_child = impls[t].get_child if kind is NODE else _get_child
    lookup = None
    if kind is DICT:
        lookup = node.get
    elif kind is SEQUENCE:
        lookup = dict(enumerate(node)).get
    # the batch's own lists, appended to directly (what ``Writes.variable`` does)
    targets, values, metadata = writes.targets, writes.values, writes.metadata
    for key, leaf in state._mapping.items():
        current = MISSING if lookup is None else lookup(key, MISSING)
        if current is MISSING:
            current = get_child(node, key)
        current_type = type(current)
        try:
            current_kind = kinds[current_type]
        except KeyError:
            current_kind = REGISTRY.classify(current)
        # (a Variable leaf first: State is an ABC, whose isinstance check is slow)
        if current_kind is VARIABLE:
            leaf_type = type(leaf)  # (the same type as the target: the same kind)
            if (
                leaf_type is current_type
                or (kinds.get(leaf_type) or REGISTRY.classify(leaf)) is VARIABLE
            ):
                targets.append(current)
                values.append(leaf._var_raw)
                if leaf is not current:  # its array is handed to another Variable
                    mark_fresh(leaf, None)
                metadata.append(metadata_of(leaf))
                continue
            if type(leaf) is not State and not isinstance(leaf, State):
                _write_leaf(writes, current, leaf)  # a raw value
                continue
        elif type(leaf) is State and (
            current_kind is NODE or current_kind is SEQUENCE or current_kind is DICT
        ):
            _plan_update(current, leaf, (prefix, key), root, writes, trace)
            continue
        path = _path_of((prefix, key))
        if isinstance(leaf, State):
            keep = getattr(type(node), "_graph_keep_substate", None)
            if current is MISSING and keep is not None:
                # a node that creates children lazily (bridge.Module) keeps the
                # sub-state until the child is created
                writes.other(functools.partial(keep, node, key, leaf))
                continue
            if current is MISSING or current_kind is VARIABLE or current_kind is ARRAY:
                raise GraphStructureError(
                    f"The State has a sub-state at {keys_str(path)}, but the node has "
                    + ("nothing" if current is MISSING else f"a {type(current).__name__} leaf")
                    + f" at {path_str('node', root, path)}.\nFix: update with a State split "
                    "from a graph of the same structure, or use merge to build new sub-graphs."
                )
            _plan_update(current, leaf, (prefix, key), root, writes, trace)
        elif (
            current is MISSING
            or current_kind is ARRAY
            or current is None
            or _is_data_child(node, key)
            or _is_static_value(current)
        ):
            new_value = leaf.copy() if REGISTRY.kind_of(leaf) is VARIABLE else leaf
            set_fn = _setter(node, key, functools.partial(path_str, "node", root, path))
            writes.other(functools.partial(set_fn, new_value))
        else:
            raise GraphStructureError(
                f"The State has a leaf "
                f"({'array' if is_array_leaf(leaf) else type(leaf).__name__}) at "
                f"{keys_str(path)}, but the node has a {type(current).__name__} there "
                f"({path_str('node', root, path)}).\nFix: update with a State split from a "
                "graph of the same structure."
            )


def _write_leaf(writes: Writes, target: Variable[Any], leaf: object) -> None:
    """Adds writing the State leaf ``leaf`` (a Variable, or a raw value keeping
    ``target``'s metadata) into the Variable ``target``."""
    if is_variable(leaf):
        writes.variable(target, leaf.raw_value, metadata_of(leaf))
    else:
        writes.variable(target, leaf, metadata_of(target))


_WALKED = frozenset({NODE, VARIABLE, SEQUENCE, DICT, PYTREE})
"""The kinds ``update`` walks into (or writes into, a Variable), never overwrites."""


def _path_of(linked: Any) -> PathParts:
    """The tuple path of a linked prefix ``(parent_prefix, key)``."""
    keys = []
    while linked:
        linked, key = linked
        keys.append(key)
    return tuple(reversed(keys))


def _is_static_value(x: object) -> bool:
    """A plain value (an int, a string…) that a State leaf may overwrite, as Flax 0.12's
    ``update`` does: not a graph node and not a container of them."""
    return REGISTRY.kind_of(x) not in _WALKED


def _is_data_child(node: object, key: Hashable) -> bool:
    """Whether ``node`` puts its child ``key`` in the State although it is no array
    (an attribute marked ``nnx.data(3)``). Only reached on the rare path."""
    return REGISTRY.kind_of(node) is NODE and any(
        k == key and type(v) is DataLeaf for k, v in node_impl(node).flatten(node)[0]
    )


def pop(node: object, *filters: Filter) -> Any:
    """Removes the leaves matching ``filters`` from ``node`` and returns them as State(s).

    Returns:
      One State per filter (a single State for one filter), holding the removed
      Variable objects themselves (as in NNX 0.12).

    Raises:
      ValueError: no filter given.
      GraphStructureError: a matched leaf sits in a list or tuple (removing it would
        renumber its siblings); nothing is removed in that case.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    >>> m.sow(nnx.Intermediate, 'y', jnp.ones(3))
    >>> sown = m.y
    >>> popped = nnx.pop(m, nnx.Intermediate)
    >>> popped['y'] is sown, hasattr(m, 'y')
    (True, False)
    """
    if not filters:
        raise ValueError("pop needs at least one filter, e.g. nnx.pop(model, nnx.Intermediate)")
    _, leaves = flatten_with_paths(node)
    parts, _ = partition(leaves, filters_to_predicates(filters))
    removals: list[Callable[[], None]] = []
    for part in parts:
        for path, _leaf in part:
            parent = node
            for key in path[:-1]:
                parent = _get_child(parent, key)
            removals.append(_remover(parent, path, node))
    for remove in removals:
        remove()
    states = [State.from_flat_path(part) for part in parts]
    return states[0] if len(states) == 1 else tuple(states)


def _remover(parent: Any, path: PathParts, root: object) -> Callable[[], None]:
    key = path[-1]
    kind = REGISTRY.kind_of(parent)
    if kind is NODE:
        impl = node_impl(parent)
        _check_node_trace(parent, "pop a leaf")
        return lambda: impl.del_child(parent, key)
    if kind is DICT:
        return lambda: parent.pop(key, None)
    raise GraphStructureError(
        f"Cannot pop the leaf at {path_str('node', root, path)}: it sits in a "
        f"{type(parent).__name__}, and removing it would renumber its siblings."
    )
