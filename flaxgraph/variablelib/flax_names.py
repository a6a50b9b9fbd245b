"""The names Flax NNX's ``variablelib`` defines for its own machinery, at the same path.

Flax's hook type names, ``is_array_ref``, metaclasses a user's metaclass may derive
from, a ``VariableContext`` record flaxgraph does not read, and stand-ins
(:mod:`flaxgraph.stand_ins`) for the hijax primitives, which raise
:class:`~flaxgraph.errors.FlaxInternalError` when built or called. Reasons:
``guides/from_flax.md``, "Flax-internal names at their dotted paths".
Source: Flax NNX 0.12.8 ``flax.nnx.variablelib`` (its module map and public source).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from flaxgraph.stand_ins import internal_class, internal_function
from flaxgraph.variablelib.hijax import HijaxVariable
from flaxgraph.variablelib.refs import is_ref
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


def is_array_ref(x: object) -> bool:
    """Whether ``x`` is a ``jax.Ref``, concrete or traced (a Ref-backed Variable's storage).

    >>> import jax, jax.numpy as jnp, flaxgraph as nnx
    >>> from flaxgraph.variablelib import is_array_ref
    >>> is_array_ref(jax.new_ref(jnp.zeros(3))), is_array_ref(jnp.zeros(3))
    (True, False)
    >>> is_array_ref(nnx.Param(jnp.ones(2), ref=True).get_raw_value())
    True
    """
    return is_ref(x)


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

# -- the hijax machinery: stand-ins ------------------------------------------------------------

HERE = "flaxgraph.variablelib"  # the module map's path of these names
INSTEAD = (
    "a Variable with hijax=True (nnx.Param(x, hijax=True)), which flaxgraph keeps as a "
    "Ref-backed Variable of its own kind"
)

VariableQDD = internal_class(HERE, "VariableQDD", INSTEAD)
VariableEffect = internal_class(HERE, "VariableEffect", INSTEAD)
NewVariable = internal_class(HERE, "NewVariable", INSTEAD)
SetVariable = internal_class(HERE, "SetVariable", INSTEAD)
GetVariable = internal_class(HERE, "GetVariable", INSTEAD)
AbstractVariable = internal_class(HERE, "AbstractVariable", INSTEAD)
variable_effect = internal_function(HERE, "variable_effect", INSTEAD)
new_variable_p = internal_function(HERE, "new_variable_p", INSTEAD)
set_variable_p = internal_function(HERE, "set_variable_p", INSTEAD)
get_variable_p = internal_function(HERE, "get_variable_p", INSTEAD)
for _primitive in (new_variable_p, set_variable_p, get_variable_p):
    _primitive.bind = _primitive  # type: ignore[attr-defined]  # a primitive is bound

__all__ = [
    "VARIABLE_CONTEXT",
    "AbstractVariable",
    "AddAxisHook",
    "AxisIndex",
    "AxisName",
    "CreateValueHook",
    "GetValueHook",
    "GetVariable",
    "HijaxVariableMeta",
    "Leaf",
    "NewVariable",
    "PyTreeDef",
    "RemoveAxisHook",
    "SetValueHook",
    "SetVariable",
    "VariableContext",
    "VariableEffect",
    "VariableMeta",
    "VariableQDD",
    "get_variable_p",
    "is_array_ref",
    "new_variable_p",
    "set_variable_p",
    "variable_effect",
]
