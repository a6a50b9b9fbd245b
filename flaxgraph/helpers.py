"""Flax NNX's ``nnx.helpers``: ``List``, ``Dict``, ``Sequential`` and ``TrainState``, with Flax's
small helpers.

Defined in :mod:`flaxgraph.containers` and :mod:`flaxgraph.training.train_state`.

Source: Flax NNX 0.12.8 ``flax.nnx.helpers``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from flaxgraph.containers import Dict, List, Sequential
from flaxgraph.graphlib.graphdefs import GraphDef
from flaxgraph.module_class import Module
from flaxgraph.proxy_caller import ApplyCaller
from flaxgraph.statelib import State
from flaxgraph.training.train_state import TrainState

__all__ = ["Dict", "List", "ModuleDefApply", "Sequential", "TrainState", "has_keyword_arg"]


M = TypeVar("M", bound=Module)


class ModuleDefApply(Protocol, Generic[M]):
    """The type of ``graphdef.apply``: its proxy's method call gives ``(output, (state, graphdef))``."""

    def __call__(self, state: State, *states: State) -> ApplyCaller[tuple[State, GraphDef[M]]]: ...


def has_keyword_arg(func: Callable[..., Any], name: str) -> bool:
    """Whether ``func`` has a parameter ``name`` passable by keyword (``**kwargs`` does not count).

    Raises ``ValueError``/``TypeError`` if ``func`` has no signature.

    Example::

      >>> has_keyword_arg(lambda x, *, rngs: x, 'rngs'), has_keyword_arg(lambda **kw: 0, 'rngs')
      (True, False)
    """
    return any(
        p.name == name and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
        for p in inspect.signature(func).parameters.values()
    )
