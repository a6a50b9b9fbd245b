"""Flax NNX's ``transforms.iteration``: the mapping and looping transforms at Flax's path.

The names are the same objects as ``nnx.StateAxes``, ``nnx.vmap``, ``nnx.scan``…;
the wrappers Flax builds around a user's function (``VmapFn``, ``ScanFn``, the
tree-mode ``Simple*`` classes) are stand-ins (``flaxgraph.stand_ins``).

  >>> from flaxgraph.transforms.iteration import StateAxes, vmap
  >>> import flaxgraph as nnx
  >>> StateAxes is nnx.StateAxes and vmap is nnx.vmap
  True

Source: Flax NNX 0.12.8 ``flax.nnx.transforms.iteration``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Mapping
from typing import Any

import jax

from flaxgraph.stand_ins import internal_class
from flaxgraph.statelib import State
from flaxgraph.transforms.control import fori_loop, while_loop
from flaxgraph.transforms.lift_types import StateAxes
from flaxgraph.transforms.metadata_hooks import transform_metadata
from flaxgraph.transforms.scan import Carry, scan
from flaxgraph.transforms.vmap import pmap, vmap
from flaxgraph.variablelib import Variable

__all__ = [
    "AxisFn",
    "AxisName",
    "Broadcasted",
    "Carry",
    "ForiLoopBodyFn",
    "Index",
    "Leaves",
    "PmapFn",
    "ScanFn",
    "SimpleForiLoopBodyFn",
    "SimplePmapFn",
    "SimpleScanFn",
    "SimpleVmapFn",
    "SimpleWhileLoopBodyFn",
    "SimpleWhileLoopCondFn",
    "StateAxes",
    "VmapFn",
    "WhileLoopBodyFn",
    "WhileLoopCondFn",
    "fori_loop",
    "pmap",
    "scan",
    "transform_metadata",
    "vmap",
    "while_loop",
]

AxisName = Hashable
"""A mesh or mapped axis name."""
Leaves = list[Any]
"""A list of pytree leaves."""
Index = int
"""A position (an axis, an argument)."""
AxisFn = Callable[[State | Variable[Any], int, Mapping[Any, Any]], State | Variable[Any]]
"""A function ``(state_or_variable, axis, metadata) -> same`` that adds or removes an axis."""


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Broadcasted:
    """A pytree node holding ``data`` a ``scan`` broadcasts to every step (leaves as children).

    Example::

      >>> import jax
      >>> jax.tree.leaves(Broadcasted(data={'a': 1, 'b': 2}))
      [1, 2]
    """

    data: object


VmapFn = internal_class(__name__, "VmapFn", "nnx.vmap")
PmapFn = internal_class(__name__, "PmapFn", "nnx.pmap")
ScanFn = internal_class(__name__, "ScanFn", "nnx.scan")
WhileLoopCondFn = internal_class(__name__, "WhileLoopCondFn", "nnx.while_loop")
WhileLoopBodyFn = internal_class(__name__, "WhileLoopBodyFn", "nnx.while_loop")
ForiLoopBodyFn = internal_class(__name__, "ForiLoopBodyFn", "nnx.fori_loop")
SimpleVmapFn = internal_class(__name__, "SimpleVmapFn", "nnx.vmap(..., graph=False)")
SimplePmapFn = internal_class(__name__, "SimplePmapFn", "nnx.pmap(..., graph=False)")
SimpleScanFn = internal_class(__name__, "SimpleScanFn", "nnx.scan(..., graph=False)")
SimpleWhileLoopCondFn = internal_class(
    __name__, "SimpleWhileLoopCondFn", "nnx.while_loop(..., graph=False)"
)
SimpleWhileLoopBodyFn = internal_class(
    __name__, "SimpleWhileLoopBodyFn", "nnx.while_loop(..., graph=False)"
)
SimpleForiLoopBodyFn = internal_class(
    __name__, "SimpleForiLoopBodyFn", "nnx.fori_loop(..., graph=False)"
)
