"""Generic node and Variable types that generated graphs are built from.

Featureless attribute holders, so every behaviour a test sees comes from the graph
engine; two Module types because the GraphDef records each node's type.

Source: ``docs/design.md``, section "Tests".
"""

from __future__ import annotations

from typing import Any

from flaxgraph.module_class import Module
from flaxgraph.pytreelib.objects import Pytree
from flaxgraph.variablelib.variable import Variable


class Node(Module):
    """A generic Module: ``Node(**attributes)`` sets each keyword as an attribute.

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> from flaxgraph.testing import Node, CustomVariable
    >>> shared = nnx.Param(jnp.ones(2))
    >>> root = Node(a=shared, b=shared, child=Node(n=CustomVariable(jnp.zeros(3))), name='r')
    >>> root.a is root.b, root.name
    (True, 'r')
    """

    def __init__(self, **attributes: Any):
        for name, value in attributes.items():
            setattr(self, name, value)


class Block(Node):
    """A second generic Module type (a subclass of ``Node``); same constructor."""


class Record(Pytree):
    """A generic plain ``Object`` (not a ``Module``): ``Record(**attributes)``."""

    def __init__(self, **attributes: Any):
        for name, value in attributes.items():
            setattr(self, name, value)


class CustomVariable(Variable[Any]):
    """A user-defined Variable kind, as ``class Count(nnx.Variable): pass`` would be."""


__all__ = ["Node", "Block", "Record", "CustomVariable"]
