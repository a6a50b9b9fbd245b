"""The direct walk of ``split``: an object graph to ``(GraphDef, State)`` in one pass.

It fills the nested State's dicts as it goes and leaves ``GraphDef.leaf_paths`` to be
derived on demand; on anything needing a path or care it gives up without side
effects (the package README, "The fast copies"). Source: Flax NNX 0.12 ``nnx.split``
(its graph-mode flatten).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from flaxgraph.graphlib.graphdefs import (
    ARRAY_DEF,
    ContainerDef,
    GraphDef,
    NodeDef,
    NodeRef,
    StaticDef,
)
from flaxgraph.graphlib.registry import (
    ARRAY,
    CONSTANT,
    DATA_LEAF,
    DICT,
    NODE,
    PYTREE,
    REF,
    REGISTRY,
    SEQUENCE,
    STATIC_LEAF,
    VARIABLE,
    flatten_pytree,
)
from flaxgraph.graphlib.walk import SCALARS, made_per_instance, variable_def
from flaxgraph.statelib import State

# The records' C-speed constructors (field values in field order, see graphdefs.py).
_node_def = NodeDef.from_fields
_node_ref = NodeRef.from_fields
_container_def = ContainerDef.from_fields
_static_def = StaticDef.from_fields
_state = State._wrap  # a State around a dict, without checks
_ROOT = object()
# The engine's classification (registry.py) and node impls, read through the registry's
# accessors once: the mappings are never replaced, so the walk's inner loop indexes them.
_KINDS = REGISTRY.kind_cache()
_kind_of_type = _KINDS.get
_classify = REGISTRY.classify
_IMPLS = REGISTRY.node_impls()


class GiveUp(Exception):
    """Raised inside a direct walk on what only the general walk handles; never seen by a caller."""


def split_direct(node: Any, graph: bool = True) -> tuple[GraphDef[Any], Any] | None:
    """``(graphdef, state)`` of ``node``, as the general walk makes them, or ``None`` to run it.

    ``None`` for a Python scalar root, a raw ``jax.Ref``, a static that warrants a warning,
    and in tree mode any object reached twice or ``pytree=False`` object.

    Args:
      node: the root (a graph node, a Variable, a container, an array).
      graph: ``False`` for tree mode.

    Returns:
      The GraphDef and a nested State of the graph's own Variables and arrays (the leaf
      itself when the root is a Variable or an array).
    """
    if type(node) in SCALARS:
        return None
    # ``seen``: id -> reference index of every node and Variable met. The ids stay unique
    # while the walk runs: a Variable is held by the State being filled, a node by ``kept``.
    seen: dict[int, int] = {}
    kept: list[Any] = []

    def visit(x: Any, key: Any, out: dict[Any, Any]) -> Any:
        t = type(x)
        try:
            kind = _KINDS[t]
        except KeyError:
            kind = _classify(x)
        if kind is NODE:
            x_id = id(x)
            index = seen.get(x_id)
            if index is not None:
                if not graph:  # tree mode: a cycle, shared Variables, or harmless
                    raise GiveUp
                return _node_ref((t, index))
            if not graph and getattr(t, "_obj_is_pytree", True) is False:
                raise GiveUp
            index = seen[x_id] = len(seen)
            kept.append(x)
            items, metadata = _IMPLS[t].flatten(x)
            sub: dict[Any, Any] = {}
            pairs: list[tuple[Any, Any]] = []
            for k, v in items:
                vt = type(v)  # (a type not classified yet is left to visit)
                if _kind_of_type(vt) is VARIABLE:
                    v_id = id(v)
                    if v_id not in seen:  # the common case, without a visit call
                        i = seen[v_id] = len(seen)
                        sub[k] = v
                        pairs.append((k, variable_def(vt, i, v)))
                        continue
                pairs.append((k, visit(v, k, sub)))
            if sub:
                out[key] = _state(sub)
            return _node_def((t, index, metadata, tuple(pairs)))
        if kind is VARIABLE:
            index = seen.get(id(x))
            if index is not None:
                if not graph:  # tree mode: a shared Variable is an error
                    raise GiveUp
                return _node_ref((t, index))
            index = seen[id(x)] = len(seen)
            out[key] = x
            return variable_def(t, index, x)
        if kind is SEQUENCE:
            sub = {}
            children = tuple([visit(v, k, sub) for k, v in enumerate(x)])
            if sub:
                out[key] = _state(sub)
            return _container_def((t, tuple(range(len(x))), children, None))
        if kind is DICT:
            sub = {}
            children = tuple([visit(v, k, sub) for k, v in x.items()])
            if sub:
                out[key] = _state(sub)
            return _container_def((t, tuple(x), children, None))
        if kind is ARRAY:
            out[key] = x
            return ARRAY_DEF
        if kind is CONSTANT:
            return _static_def((t, x))
        if kind is DATA_LEAF:
            out[key] = x.value
            return ARRAY_DEF
        if kind is PYTREE:
            items, treedef = flatten_pytree(x)
            sub = {}
            children = tuple([visit(v, k, sub) for k, v in items])
            if sub:
                out[key] = _state(sub)
            keys = tuple([k for k, _ in items])
            return _container_def((t, keys, children, treedef))
        if kind is STATIC_LEAF:
            x = x.value
        elif kind is REF:
            raise GiveUp
        if made_per_instance(x):  # the general walk warns, naming the path
            raise GiveUp
        return StaticDef(x)

    root: dict[Any, Any] = {}
    try:
        root_def = visit(node, _ROOT, root)
    except GiveUp:
        return None
    state = root[_ROOT] if root else _state({})
    return GraphDef(root_def, None, not graph), state


def partition_state(
    state: State, predicates: Sequence[Callable[[tuple[Hashable, ...], Any], bool]]
) -> tuple[list[State], list[tuple[tuple[Hashable, ...], Any]]]:
    """Sorts a nested ``state``'s leaves into one State per predicate (first match wins).

    Args:
      state: a nested State (e.g. from ``split_direct``).
      predicates: ``(path, leaf) -> bool`` functions.

    Returns:
      ``(states, rest)``: one State per predicate (as ``State.from_flat_path`` would make
      them) and the ``(path, leaf)`` pairs no predicate accepts.
    """
    numbered = list(enumerate(predicates))
    rest: list[tuple[tuple[Hashable, ...], Any]] = []

    def walk(mapping: dict[Any, Any], path: tuple[Hashable, ...], outs: list[Any]) -> None:
        for k, v in mapping.items():
            here = (*path, k)
            if type(v) is State:
                subs: list[dict[Any, Any]] = [{} for _ in numbered]
                walk(v._mapping, here, subs)
                for out, sub in zip(outs, subs):
                    if sub:
                        out[k] = _state(sub)
                continue
            for i, predicate in numbered:
                if predicate(here, v):
                    outs[i][k] = v
                    break
            else:
                rest.append((here, v))

    outs: list[dict[Any, Any]] = [{} for _ in numbered]
    walk(state._mapping, (), outs)
    return [_state(out) for out in outs], rest
