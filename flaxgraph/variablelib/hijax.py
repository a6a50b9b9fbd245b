"""``HijaxVariable``: the name Flax NNX 0.12 gives a Variable made with ``hijax=True``.

In Flax a hijax Variable is an instance of a separate class. In flaxgraph it keeps
its own kind (a ``Param`` stays a ``Param``) and carries the ``hijax`` flag; its
value lives in a ``jax.Ref``, or for a pytree value (a dict…) in JAX's mutable box
(see ``flaxgraph/variablelib/variable.py`` and ``boxes.py``). So
``HijaxVariable`` here is a *check*, not a class to build from:
``isinstance(v, HijaxVariable)`` is ``v.hijax``::

  >>> import flaxgraph as nnx
  >>> from flaxgraph.variablelib import HijaxVariable
  >>> isinstance(nnx.Param(1.0, hijax=True), HijaxVariable)
  True
  >>> isinstance(nnx.Param(1.0), HijaxVariable)
  False

Source: Flax NNX 0.12 ``nnx.variablelib.HijaxVariable``.
"""

from __future__ import annotations

from typing import Any

from flaxgraph.variablelib.variable import Variable


class _HijaxCheck(type):
    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, Variable) and obj.hijax

    def __subclasscheck__(cls, sub: type) -> bool:
        return sub is cls


class HijaxVariable(metaclass=_HijaxCheck):
    """``isinstance(v, HijaxVariable)``: ``v`` is a Variable made with ``hijax=True``
    (see the module docstring). Not instantiable.

    Raises:
      TypeError: on instantiation; make a hijax Variable with ``Param(x, hijax=True)``
        or under ``nnx.var_defaults(hijax=True)``.
    """

    def __new__(cls, *args: object, **kwargs: object) -> Any:
        raise TypeError(
            "flaxgraph has no separate HijaxVariable class: a hijax Variable keeps its own "
            "kind.\nFix: write nnx.Param(value, hijax=True) (or nnx.Variable(..., hijax=True))."
        )
