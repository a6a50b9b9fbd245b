"""``graphdef_diff``: the first path where two GraphDefs differ, in words.

Source: JAX's ``tree_util`` equality errors (name the key path).
"""

from __future__ import annotations

from typing import Any

from flaxgraph.graphlib.graphdefs import (
    ContainerDef,
    GraphDef,
    NodeDef,
    NodeRef,
    StaticDef,
    VariableDef,
)
from flaxgraph.graphlib.paths import step_str


def graphdef_diff(
    a: GraphDef[Any], b: GraphDef[Any], root: str = "", roots: tuple[str, ...] | None = None
) -> str | None:
    """Describes the first difference between two GraphDefs, or ``None`` if they are equal.

    Args:
      a, b: the GraphDefs to compare.
      root: a name to prefix paths with (``'args[0]'``…).
      roots: names for the entries of root tuples (``('args', 'kwargs', 'output')``).

    Returns:
      A one-line description, or ``None``.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> from flaxgraph.graphlib.diff import graphdef_diff
    >>> m = nnx.Module(); g1 = nnx.graphdef(m); m.w = nnx.Param(jnp.ones(1))
    >>> graphdef_diff(g1, nnx.graphdef(m))
    '.w: missing in the first, a Param in the second'
    """
    if a == b:
        return None
    ra, rb = a.root, b.root
    if (
        roots is not None
        and isinstance(ra, ContainerDef)
        and isinstance(rb, ContainerDef)
        and len(ra.children) == len(rb.children) == len(roots)
    ):
        for name, ca, cb in zip(roots, ra.children, rb.children):
            found = _diff(ca, cb, name)
            if found:
                return found
    return _diff(ra, rb, root) or "the GraphDefs differ (leaf order)"


def _name(d: object) -> str:
    if isinstance(d, (NodeDef, VariableDef)):
        return f"a {d.type.__name__}"

    if isinstance(d, NodeRef):
        return f"a reference to node #{d.index} ({d.type.__name__})"
    if isinstance(d, StaticDef):
        return f"the static value {d.value!r}"
    if isinstance(d, ContainerDef):
        return f"a {d.type.__name__} of {len(d.children)}"
    return "an array"


def _diff(a: Any, b: Any, path: str) -> str | None:
    if a == b:
        return None
    if type(a) is not type(b) or getattr(a, "type", None) is not getattr(b, "type", None):
        return f"{path or '<root>'}: {_name(a)} in the first, {_name(b)} in the second"
    if isinstance(a, NodeDef):
        if a.index != b.index:
            return f"{path or '<root>'}: node #{a.index} in the first, #{b.index} in the second"
        return _diff_children(dict(a.attributes), dict(b.attributes), path, True) or (
            f"{path or '<root>'}: the {a.type.__name__}'s metadata differs "
            f"({a.metadata!r} vs {b.metadata!r})"
        )
    if isinstance(a, ContainerDef):
        return _diff_children(
            dict(zip(a.keys, a.children)), dict(zip(b.keys, b.children)), path, False
        ) or (
            f"{path or '<root>'}: the {a.type.__name__}'s pytree structure differs "
            f"({a.treedef} vs {b.treedef})"
        )
    if isinstance(a, VariableDef):
        if a.metadata != b.metadata:
            return (
                f"{path or '<root>'}: the {a.type.__name__}'s metadata differs "
                f"({dict(a.metadata)} vs {dict(b.metadata)})"
            )
        return f"{path or '<root>'}: Variable #{a.index} in the first, #{b.index} in the second"
    if isinstance(a, NodeRef):
        return f"{path or '<root>'}: reference to #{a.index} in the first, #{b.index} in the second"
    return f"{path or '<root>'}: {_name(a)} in the first, {_name(b)} in the second"


def _diff_children(a: dict[Any, Any], b: dict[Any, Any], path: str, attr: bool) -> str | None:
    def at(key: Any) -> str:
        return path + step_str(key, attr)

    for key in a:
        if key not in b:
            return f"{at(key)}: {_name(a[key])} in the first, missing in the second"
    for key in b:
        if key not in a:
            return f"{at(key)}: missing in the first, {_name(b[key])} in the second"
    for key in a:
        found = _diff(a[key], b[key], at(key))
        if found:
            return found
    if list(a) != list(b):
        return f"{path or '<root>'}: the keys are in another order"
    return None
