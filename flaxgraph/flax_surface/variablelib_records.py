"""Flax's ``variablelib`` names for its own machinery: hook types and metaclasses.

Also a ``VariableContext`` record flaxgraph does not read; ``table.py`` puts them at
``flaxgraph.variablelib`` and adds the stand-ins of the hijax primitives.
Source: Flax NNX 0.12.8 ``flax.nnx.variablelib`` (its public source).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from flaxgraph.variablelib.hijax import HijaxVariable
from flaxgraph.variablelib.variable import A, V, Variable

# -- type names ----------------------------------------------------------------------

GetValueHook = Callable[["Variable[A]", A], A]  # (variable, value) -> the value read
SetValueHook = Callable[["Variable[A]", A], A]  # (variable, value) -> the value stored
CreateValueHook = Callable[["Variable[A]", A], A]  # (variable, value) -> the initial value
AxisName = str
AxisIndex = int
AddAxisHook = Callable[[V, AxisIndex, AxisName | None], None]  # (variable, index, name)
RemoveAxisHook = Callable[[V, AxisIndex, AxisName | None], None]  # (variable, index, name)
PyTreeDef = Any
Leaf = Any


# -- metaclasses and context ---------------------------------------------------------------


class VariableMeta(type):
    """Flax's metaclass of ``Variable`` (flaxgraph's is ``type``), for metaclasses to derive."""


HijaxVariableMeta = type(HijaxVariable)
"""The metaclass of ``HijaxVariable``, whose instance check is ``v.hijax`` (``hijax.py``)."""


@dataclasses.dataclass
class VariableContext(threading.local):
    """Flax's per-thread stacks of ``var_defaults`` settings (not read by ``defaults.py``)."""

    variable_hijax_stack: list[bool] = dataclasses.field(default_factory=list)
    variable_ref_stack: list[bool] = dataclasses.field(default_factory=list)
    eager_shard_stack: list[bool] = dataclasses.field(default_factory=list)


VARIABLE_CONTEXT = VariableContext()
"""This thread's :class:`VariableContext` (not read by flaxgraph)."""
