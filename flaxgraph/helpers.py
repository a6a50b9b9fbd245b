"""Flax NNX's ``nnx.helpers``: ``List``, ``Dict``, ``Sequential`` and ``TrainState``, with Flax's
small helpers.

The containers are defined in :mod:`flaxgraph.containers`, ``TrainState`` in
:mod:`flaxgraph.training.train_state`; this module is Flax's path to them
(``from flax.nnx.helpers import Sequential``).

Source: Flax NNX 0.12.8 ``flax.nnx.helpers`` (its module map, behaviour read from its public
source).
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
    """The type of ``graphdef.apply``: called with States, it returns a proxy whose method
    call gives ``(output, (state, graphdef))``."""

    def __call__(self, state: State, *states: State) -> ApplyCaller[tuple[State, GraphDef[M]]]: ...


def has_keyword_arg(func: Callable[..., Any], name: str) -> bool:
    """Whether ``func`` takes an argument ``name`` by keyword (keyword-only or
    positional-or-keyword).

    Args:
      func: any callable with a signature.
      name: the parameter name.

    Returns:
      ``True`` if ``func(..., name=...)`` names a parameter of ``func`` (``**kwargs`` does not
      count).

    Raises:
      ValueError, TypeError: ``func`` has no signature (``inspect.signature``).

    Example::

      >>> has_keyword_arg(lambda x, *, rngs: x, 'rngs'), has_keyword_arg(lambda **kw: 0, 'rngs')
      (True, False)
    """
    return any(
        p.name == name and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
        for p in inspect.signature(func).parameters.values()
    )
