"""``nnx.variables(node, *filters)``: Flax NNX 0.12's function, on flaxgraph's module.

In flaxgraph, ``flaxgraph.variables`` is the module defining ``Variable`` and its
kinds, so ``nnx.variables`` names that module. To keep Flax code running, this top
layer makes the module callable: ``nnx.variables(model, nnx.Param)`` is
``nnx.state(model, nnx.Param)``, while ``nnx.variables.Param`` and ``from
flaxgraph.variables import Variable`` keep working. The module's class is swapped
for a ``ModuleType`` subclass (supported by Python for modules), once, on package
import; nothing in the core depends on it.

Source: Flax NNX 0.12 ``nnx.variables``.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from flaxgraph.filters import Filter
from flaxgraph.graph.split_merge import state


class _CallableVariablesModule(types.ModuleType):
    def __call__(self, node: Any, *filters: Filter, graph: bool | None = None) -> Any:
        """The State of ``node`` (one per filter), holding ``node``'s own Variables.

        Args:
          node: a graph node (Module, Object…).
          *filters: optional filters; one State per filter.
          graph: ``False`` for tree mode; ``None``: the default.

        Returns:
          ``nnx.state(node, *filters, graph=graph)``.

        Raises:
          As ``nnx.state``.

        Example::

          >>> import flaxgraph as nnx
          >>> m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
          >>> sorted(nnx.variables(m, nnx.Param))
          ['bias', 'kernel']

        Source: Flax NNX 0.12 ``nnx.variables``.
        """
        return state(node, *filters, graph=graph)


sys.modules["flaxgraph.variables"].__class__ = _CallableVariablesModule
