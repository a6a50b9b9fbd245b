"""``HijaxVariable``: Flax's class of ``hijax=True`` Variables, here an ``isinstance`` check.

A flaxgraph hijax Variable keeps its own kind (a ``Param`` stays a ``Param``), so
``isinstance(v, HijaxVariable)`` is ``v.hijax``. Source: Flax NNX 0.12
``nnx.variablelib.HijaxVariable``.

>>> import flaxgraph as nnx
>>> from flaxgraph.variablelib import HijaxVariable
>>> isinstance(nnx.Param(1.0, hijax=True), HijaxVariable)
True
>>> isinstance(nnx.Param(1.0), HijaxVariable)
False
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
    """``isinstance(v, HijaxVariable)``: ``v`` was made with ``hijax=True``. Not instantiable.

    Raises:
      TypeError: on instantiation (write ``Param(x, hijax=True)``).
    """

    def __new__(cls, *args: object, **kwargs: object) -> Any:
        raise TypeError(
            "flaxgraph has no separate HijaxVariable class: a hijax Variable keeps its own "
            "kind.\nFix: write nnx.Param(value, hijax=True) (or nnx.Variable(..., hijax=True))."
        )
