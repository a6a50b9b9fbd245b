"""The direct build of ``merge``: a GraphDef and one nested State walked together into new objects.

It reads each node's children straight from the sub-state at the same place and counts
the entries used, so a misfit State is still noticed; on anything unusual it gives up
without side effects (the package README, "The fast copies"). Source: Flax NNX 0.12
``nnx.merge`` (what it builds).
"""

from __future__ import annotations

from typing import Any

from flaxgraph.graphlib.build import container_of, variable_for
from flaxgraph.graphlib.direct_split import GiveUp
from flaxgraph.graphlib.graphdefs import (
    ArrayDef,
    ContainerDef,
    NodeDef,
    NodeRef,
    StaticDef,
    VariableDef,
)
from flaxgraph.graphlib.ref_outputs import ArrayRefOutput, NoUpdate
from flaxgraph.graphlib.registry import REGISTRY, VARIABLE
from flaxgraph.graphlib.statics import PartialKey
from flaxgraph.statelib import State
from flaxgraph.tracing import current_trace

GAVE_UP: Any = object()
"""What ``merge_direct`` returns when the general path must build the graph."""

_MARKERS = (NoUpdate, ArrayRefOutput)
_EMPTY: dict[Any, Any] = {}


def merge_direct(graphdef: Any, state: State, copy: bool, recreate: bool) -> Any:
    """Builds the graph of ``graphdef`` from ``state``, or returns ``GAVE_UP``.

    Args:
      graphdef: a GraphDef whose root is a graph node or a container.
      state: a ``State`` nested as the graph (what ``split`` returns).
      copy: as ``nnx.merge``'s ``copy``.
      recreate: as ``nnx.merge``'s ``recreate_variables``.

    Returns:
      The new root (``__init__`` not called; sharing and cycles restored), or ``GAVE_UP``.
    """
    root = graphdef.root
    root_kind = type(root)
    if root_kind is not NodeDef and root_kind is not ContainerDef:
        return GAVE_UP
    impls = REGISTRY.node_impls()
    kind_of = REGISTRY.kind_of  # the engine's classification, for the State's leaves
    trace = current_trace()
    built: dict[int, Any] = {}

    def child(k: Any, c: Any, mapping: dict[Any, Any]) -> tuple[Any, int]:  # c: a Def
        """``(value, entries of mapping used)`` of the definition ``c`` at key ``k``."""
        kind = type(c)
        if kind is VariableDef:
            return _leaf_of(c, mapping[k], copy, recreate, trace, built), 1
        if kind is StaticDef:
            value = c.key
            return (value.partial if type(value) is PartialKey else value), 0
        if kind is NodeRef:
            return built[c.index], 0
        if kind is ArrayDef:
            if c.index is not None:  # a raw jax.Ref
                raise GiveUp
            leaf = mapping[k]
            if kind_of(leaf) is VARIABLE:
                leaf = leaf.raw_value
            elif isinstance(leaf, State):
                raise GiveUp
            return leaf, 1
        sub = mapping.get(k, None)
        used = 0
        if sub is None:
            sub = _EMPTY
        elif type(sub) is State:
            used = 1
            sub = sub._mapping
        else:
            raise GiveUp
        return (node(c, sub) if kind is NodeDef else container(c, sub)), used

    def node(d: NodeDef, mapping: dict[Any, Any]) -> Any:
        impl = impls[d.type]
        metadata = d.metadata
        obj = impl.create_empty(metadata, trace)
        built[d.index] = obj
        items = []
        used = 0
        for k, c in d.attributes:
            if not copy and type(c) is VariableDef:  # the common case, inline
                leaf = mapping[k]
                used += 1
                if type(leaf) is not c.type or (
                    leaf._var_ref is None and type(leaf._var_raw) in _MARKERS
                ):
                    leaf = _leaf_of(c, leaf, copy, recreate, trace, built)
                else:
                    built[c.index] = leaf
                items.append((k, leaf))
            else:
                value, n = child(k, c, mapping)
                used += n
                items.append((k, value))
        if used != len(mapping):
            raise GiveUp  # the State has entries the GraphDef has no place for
        impl.set_items(obj, items, metadata)
        return obj

    def container(d: ContainerDef, mapping: dict[Any, Any]) -> Any:
        keys = d.keys
        values = []
        used = 0
        for k, c in zip(keys, d.children):
            if type(c) is NodeDef:  # inline: a list of Modules
                sub = mapping.get(k, None)
                if sub is None:
                    values.append(node(c, _EMPTY))
                    continue
                if type(sub) is not State:
                    raise GiveUp
                used += 1
                values.append(node(c, sub._mapping))
                continue
            value, n = child(k, c, mapping)
            used += n
            values.append(value)
        if used != len(mapping):
            raise GiveUp
        return container_of(d, values)

    try:
        if root_kind is NodeDef:
            return node(root, state._mapping)
        return container(root, state._mapping)
    except (GiveUp, KeyError):
        return GAVE_UP


def _leaf_of(
    c: VariableDef, leaf: Any, copy: bool, recreate: bool, trace: Any, built: dict[int, Any]
) -> Any:
    """The value at a Variable's place ``c`` for a State leaf, recorded in ``built``."""
    if REGISTRY.kind_of(leaf) is VARIABLE:
        if leaf._var_ref is None and type(leaf._var_raw) in _MARKERS:
            raise GiveUp
    elif type(leaf) in _MARKERS or isinstance(leaf, State):
        raise GiveUp
    leaf = built[c.index] = variable_for(c, leaf, copy, recreate, trace)
    return leaf


def join_states(states: tuple[Any, ...]) -> State | None:
    """The nested union of ``merge``'s States (the first itself if alone), or ``None`` on a misfit.

    ``None`` if one is not a ``State`` or a path is in two of them; the States given are
    not modified (a sub-state receiving entries is copied first).
    """
    if any(type(s) is not State for s in states):
        return None
    if len(states) == 1:
        typed: State | None = states[0]
        return typed
    owned: set[int] = set()

    def join(dst: dict[Any, Any], src: dict[Any, Any]) -> bool:
        for k, v in src.items():
            current = dst.get(k, _EMPTY)
            if current is _EMPTY:
                dst[k] = v
                continue
            if type(current) is not State or type(v) is not State:
                return False  # a leaf at a path of another State
            if id(current) not in owned:
                current = dst[k] = State._wrap(dict(current._mapping))
                owned.add(id(current))
            if not join(current._mapping, v._mapping):
                return False
        return True

    root = State._wrap(dict(states[0]._mapping))
    owned.add(id(root))
    for s in states[1:]:
        if not join(root._mapping, s._mapping):
            return None
    return root
