"""What an inner split says about Ref-backed Variables: ``NoUpdate`` and ``ArrayRefOutput``.

At step (3) of an update context (the package README), a Ref-backed Variable from the
caller needs no value out (its writes went into the caller's Ref): ``NoUpdate``, no
leaves. One created inside: ``ArrayRefOutput(value)``, one leaf, from which step (4)
builds a new Ref-backed Variable. Source: Flax NNX 0.12 ``graphlib.NoUpdate`` and
``graphlib.ArrayRefOutput``.

>>> import jax, flaxgraph as nnx
>>> len(jax.tree.leaves(nnx.graphlib.NoUpdate())), jax.tree.leaves(nnx.graphlib.ArrayRefOutput(1.0))
(0, [1.0])
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any

import jax

from flaxgraph.graphlib.registry import REGISTRY, VARIABLE
from flaxgraph.variablelib.variable import is_ref_backed, metadata_of, trace_of


class NoUpdate:
    """The value of a Ref-backed Variable that needs no write on the way out."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return type(other) is NoUpdate

    def __hash__(self) -> int:
        return hash(NoUpdate)

    def __repr__(self) -> str:
        return "NoUpdate()"


NO_UPDATE = NoUpdate()


class ArrayRefOutput:
    """The content of a Ref-backed Variable created inside a transform.

    Attributes:
      value: the Ref's content (an array of its shape and dtype).
    """

    __slots__ = ("value",)

    def __init__(self, value: object):
        self.value = value

    def __repr__(self) -> str:
        return f"ArrayRefOutput({self.value!r})"


jax.tree_util.register_pytree_node(NoUpdate, lambda x: ((), None), lambda _, __: NO_UPDATE)
jax.tree_util.register_pytree_with_keys(
    ArrayRefOutput,
    lambda x: (((jax.tree_util.GetAttrKey("value"), x.value),), None),
    lambda _, children: ArrayRefOutput(*children),
    flatten_func=lambda x: ((x.value,), None),
)


def mark_ref_outputs(
    leaves: list[tuple[Any, Any]], came_in: Container[object]
) -> list[tuple[Any, Any]]:
    """An inner split's pairs, each Ref-backed Variable holding ``NO_UPDATE`` or ``ArrayRefOutput``.

    ``NO_UPDATE`` for one in ``came_in`` (from the caller), ``ArrayRefOutput`` for one made inside.
    """
    out = []
    for path, leaf in leaves:
        if REGISTRY.kind_of(leaf) is VARIABLE and is_ref_backed(leaf):
            value = NO_UPDATE if leaf in came_in else ArrayRefOutput(leaf.raw_value)
            leaf = type(leaf)._from_parts(value, metadata_of(leaf), trace_of(leaf))
        out.append((path, leaf))
    return out


def unwrap_ref_output(value: object) -> object:
    """``value`` without an ``ArrayRefOutput`` box (the content)."""
    return value.value if type(value) is ArrayRefOutput else value
