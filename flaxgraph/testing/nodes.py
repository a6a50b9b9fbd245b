"""Generic node and Variable types that generated graphs are built from.

Generated graphs need node *types* as much as node instances: the graph engine
stores a node's type in the GraphDef, and a bug that confuses two types only
shows up when a graph holds more than one. These classes are deliberately
featureless containers of attributes, so that every behaviour a test sees
comes from the graph engine, not from the class:

* ``Node``: a ``Module`` whose attributes are given as keyword arguments;
* ``Block``: a subclass of ``Node`` (a second Module type with a base class);
* ``Record``: a plain ``Pytree`` that is not a ``Module``;
* ``CustomVariable``: a user-defined Variable kind, next to the built-in
  ``Param``, ``BatchStat``, ``Cache``…

They are ordinary public classes, usable in hand-written tests too::

  >>> import jax.numpy as jnp, flaxgraph as nnx
  >>> from flaxgraph.testing import Node, CustomVariable
  >>> shared = nnx.Param(jnp.ones(2))
  >>> root = Node(a=shared, b=shared, child=Node(n=CustomVariable(jnp.zeros(3))))
  >>> root.a is root.b
  True
"""

from __future__ import annotations

from typing import Any

from flaxgraph.module_class import Module
from flaxgraph.pytreelib.objects import Pytree
from flaxgraph.variablelib.variable import Variable


class Node(Module):
    """A generic Module: ``Node(**attributes)`` sets each keyword as an attribute.

    Args:
      **attributes: attribute name -> value (any value an Object attribute may hold).

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> from flaxgraph.testing import Node
      >>> Node(w=nnx.Param(jnp.ones(2)), name='n').name
      'n'

    Source: flaxgraph (test helper).
    """

    def __init__(self, **attributes: Any):
        for name, value in attributes.items():
            setattr(self, name, value)


class Block(Node):
    """A second generic Module type (a subclass of ``Node``); same constructor.

    Source: flaxgraph (test helper).
    """


class Record(Pytree):
    """A generic plain ``Object`` (not a ``Module``): ``Record(**attributes)``.

    Args:
      **attributes: attribute name -> value.

    Source: flaxgraph (test helper).
    """

    def __init__(self, **attributes: Any):
        for name, value in attributes.items():
            setattr(self, name, value)


class CustomVariable(Variable[Any]):
    """A user-defined Variable kind, as ``class Count(nnx.Variable): pass`` would be.

    Source: flaxgraph (test helper).
    """


__all__ = ["Node", "Block", "Record", "CustomVariable"]
