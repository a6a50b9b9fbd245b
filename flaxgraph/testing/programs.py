"""Mutation programs: small, plain-data edits applied to any object graph.

Steps hold *selectors* (see the package README, "programs.py"), so one program makes the
same edits on a graph and on its copy inside a trace; a step with no candidate does nothing.

Source: ``docs/design.md``, section "Tests" (differential tests, "transformed == eager").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from flaxgraph.graphlib.descendants import iter_graph
from flaxgraph.graphlib.paths import step_str
from flaxgraph.graphlib.registry import REGISTRY, Kind, node_impl
from flaxgraph.testing.nodes import Node
from flaxgraph.typing import PathParts
from flaxgraph.variablelib.variable import BatchStat, Param, is_variable


@dataclasses.dataclass(frozen=True)
class SetValue:
    """Sets ``v.value = v.value * scale + shift`` on one numeric Variable.

    Attributes:
      variable: selector among the Variables with an integer or floating array value.
      scale, shift: small non-negative ints (exact in float32, valid for unsigned dtypes).
    """

    variable: int
    scale: int
    shift: int


ADD_KINDS = ("param", "batch_stat", "array", "static", "node")
"""The kinds of value ``AddAttribute`` can create."""


@dataclasses.dataclass(frozen=True)
class AddAttribute:
    """Sets ``node.<name>`` to a new value, replacing any attribute (and its data/static mark).

    Attributes:
      node: selector among the graph nodes.
      name: the attribute name.
      kind: one of ``ADD_KINDS``: ``'param'`` (a ``Param`` of 2 float32s equal to ``n``),
        ``'batch_stat'`` (2 int32s), ``'array'`` (int32 ``[n, n + 1]``), ``'static'``
        (the int ``n``) or ``'node'`` (a ``Node`` holding one such Param).
      seed: the number ``n`` the new value is made from.
    """

    node: int
    name: str
    kind: str
    seed: int


@dataclasses.dataclass(frozen=True)
class DeleteAttribute:
    """Deletes one string-keyed attribute of a node.

    Attributes:
      node: selector among the graph nodes.
      attribute: selector among the node's string attribute names, sorted.
    """

    node: int
    attribute: int


@dataclasses.dataclass(frozen=True)
class ShareAttribute:
    """Sets ``node.<name>`` to an object already in the graph, so that it is shared.

    Attributes:
      source: selector among the graph's nodes, then its Variables (one list).
      node: selector among the graph nodes: the node that gets the attribute.
      name: the attribute name.
      allow_cycle: if False, sources from which ``node`` is reachable are left out.
    """

    source: int
    node: int
    name: str
    allow_cycle: bool = True


@dataclasses.dataclass(frozen=True)
class SwapAttributes:
    """Swaps the values of two unmarked string-keyed attributes of one node.

    Attributes:
      node: selector among the graph nodes with at least two such attributes.
      first, second: selectors among those names, sorted; if both pick the same name,
        ``second`` takes the next one.
    """

    node: int
    first: int
    second: int


MutationStep = SetValue | AddAttribute | DeleteAttribute | ShareAttribute | SwapAttributes


def apply_mutations(root: Any, steps: Sequence[MutationStep]) -> list[str]:
    """Applies a mutation program to the graph ``root``, in place.

    Args:
      root: a graph node (or any value holding graph nodes).
      steps: the program, e.g. drawn from ``flaxgraph.testing.mutations()``.

    Returns:
      One line per step saying what it did, by path from ``root``.

    Raises:
      TypeError: a step is not one of the step classes.
      TraceContextError (a ``ValueError``): the graph was created outside the current
        JAX trace.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> from flaxgraph.testing import Node, SetValue, DeleteAttribute, apply_mutations
    >>> m = Node(w=nnx.Param(jnp.ones(2)), n=3)
    >>> apply_mutations(m, [SetValue(0, 2, 1), DeleteAttribute(0, 0)])
    ['set root.w = value * 2 + 1', 'delete root.n']
    >>> m.w.value
    Array([3., 3.], dtype=float32)
    """
    log = []
    for step in steps:
        handler = _HANDLERS.get(type(step))
        if handler is None:
            raise TypeError(
                f"apply_mutations got a step of type {type(step).__name__}; steps are "
                "SetValue, AddAttribute, DeleteAttribute, ShareAttribute or SwapAttributes."
            )
        log.append(handler(root, step))
    return log


# -- enumeration -------------------------------------------------------------------------


def _objects(root: Any) -> tuple[list[tuple[PathParts, Any]], list[tuple[PathParts, Any]]]:
    """Graph nodes and Variables of ``root`` with their first paths, in iter_graph order."""
    nodes, variables = [], []
    for path, value in iter_graph(root):
        kind = REGISTRY.kind_of(value)
        if kind is Kind.NODE:
            nodes.append((path, value))
        elif kind is Kind.VARIABLE:
            variables.append((path, value))
    return nodes, variables


def _attribute_names(node: Any) -> list[str]:
    impl = node_impl(node)
    return sorted(k for k, _ in impl.flatten(node)[0] if isinstance(k, str))


def _marked_names(node: Any) -> set[str]:
    """Attributes marked ``nnx.data``/``nnx.static`` (from the marks: traced, data is an array)."""
    return {name for name, _ in getattr(node, "_obj_kinds", ())}


def _set_unmarked(node: Any, name: str, value: Any) -> None:
    """``node.<name> = value``, first dropping the name's data/static mark."""
    impl = node_impl(node)
    if name in _marked_names(node):
        impl.del_child(node, name)
    impl.set_child(node, name, value)


def _pick(candidates: Sequence[Any], selector: int) -> Any:
    return candidates[selector % len(candidates)]


def _where(path: PathParts) -> str:
    return "root" + "".join(step_str(key, True) for key in path)


def _is_numeric_array(value: Any) -> bool:
    dtype = getattr(value, "dtype", None)
    if dtype is None or not hasattr(value, "shape"):
        return False
    try:
        return bool(jnp.issubdtype(dtype, jnp.integer) or jnp.issubdtype(dtype, jnp.floating))
    except TypeError:  # extended dtypes (PRNG keys)
        return False


# -- steps ----------------------------------------------------------------------------------


def _set_value(root: Any, step: SetValue) -> str:
    _, variables = _objects(root)
    numeric = [(p, v) for p, v in variables if _is_numeric_array(v.raw_value)]
    if not numeric:
        return "skip SetValue: no Variable with a numeric array value"
    path, variable = _pick(numeric, step.variable)
    variable.value = variable.raw_value * step.scale + step.shift
    return f"set {_where(path)} = value * {step.scale} + {step.shift}"


def _new_value(kind: str, seed: int) -> Any:
    if kind == "param":
        return Param(jnp.full((2,), seed, dtype=jnp.float32))
    if kind == "batch_stat":
        return BatchStat(jnp.full((2,), seed, dtype=jnp.int32))
    if kind == "array":
        return jnp.asarray(np.array([seed, seed + 1], dtype=np.int32))
    if kind == "static":
        return seed
    if kind == "node":
        return Node(w=Param(jnp.full((2,), seed, dtype=jnp.float32)))
    raise ValueError(f"AddAttribute kind must be one of {ADD_KINDS}, got {kind!r}")


def _add_attribute(root: Any, step: AddAttribute) -> str:
    nodes, _ = _objects(root)
    if not nodes:
        return "skip AddAttribute: no graph node"
    value = _new_value(step.kind, step.seed)
    path, node = _pick(nodes, step.node)
    _set_unmarked(node, step.name, value)
    return f"add {_where((*path, step.name))} = new {step.kind} ({step.seed})"


def _delete_attribute(root: Any, step: DeleteAttribute) -> str:
    nodes, _ = _objects(root)
    nodes = [(p, n) for p, n in nodes if _attribute_names(n)]
    if not nodes:
        return "skip DeleteAttribute: no node has a string attribute"
    path, node = _pick(nodes, step.node)
    name = _pick(_attribute_names(node), step.attribute)
    node_impl(node).del_child(node, name)
    return f"delete {_where((*path, name))}"


def _reaches(source: Any, target: Any) -> bool:
    return any(value is target for _, value in iter_graph(source))


def _swappable_names(node: Any) -> list[str]:
    marked = _marked_names(node)
    return [n for n in _attribute_names(node) if n not in marked]


def _share_attribute(root: Any, step: ShareAttribute) -> str:
    nodes, variables = _objects(root)
    if not nodes:
        return "skip ShareAttribute: no graph node"
    holder_path, holder = _pick(nodes, step.node)
    sources = nodes + variables
    if not step.allow_cycle:
        sources = [(p, s) for p, s in sources if is_variable(s) or not _reaches(s, holder)]
    if not sources:
        return "skip ShareAttribute: every candidate would close a cycle"
    source_path, source = _pick(sources, step.source)
    _set_unmarked(holder, step.name, source)
    return f"share {_where((*holder_path, step.name))} = {_where(source_path)}"


def _swap_attributes(root: Any, step: SwapAttributes) -> str:
    nodes, _ = _objects(root)
    nodes = [(p, n) for p, n in nodes if len(_swappable_names(n)) >= 2]
    if not nodes:
        return "skip SwapAttributes: no node has two unmarked string attributes"
    path, node = _pick(nodes, step.node)
    names = _swappable_names(node)
    i = step.first % len(names)
    j = step.second % len(names)
    if i == j:
        j = (j + 1) % len(names)
    impl = node_impl(node)
    first, second = impl.get_child(node, names[i]), impl.get_child(node, names[j])
    impl.set_child(node, names[i], second)
    impl.set_child(node, names[j], first)
    return f"swap {_where((*path, names[i]))} <-> {_where((*path, names[j]))}"


_HANDLERS: dict[type, Any] = {
    SetValue: _set_value,
    AddAttribute: _add_attribute,
    DeleteAttribute: _delete_attribute,
    ShareAttribute: _share_attribute,
    SwapAttributes: _swap_attributes,
}

__all__ = [
    "ADD_KINDS",
    "AddAttribute",
    "DeleteAttribute",
    "MutationStep",
    "SetValue",
    "ShareAttribute",
    "SwapAttributes",
    "apply_mutations",
]
