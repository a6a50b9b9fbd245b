"""Flax's small helpers of ``nnx.module`` and ``nnx.helpers`` that flaxgraph does not use.

``table.py`` puts them at ``flaxgraph.module`` and ``flaxgraph.helpers``.
Source: Flax NNX 0.12.8 ``flax.nnx.module`` and ``flax.nnx.helpers``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, Generic, Protocol, TypeVar

from flaxgraph.flax_surface.pytreelib_records import PytreeMeta
from flaxgraph.graphlib.graphdefs import GraphDef
from flaxgraph.module_class import Module
from flaxgraph.proxy_caller import ApplyCaller
from flaxgraph.statelib import State
from flaxgraph.typing import PathParts

M = TypeVar("M", bound=Module)

StateMapping = Mapping[PathParts, Any]
"""A mapping from paths to values (a flat state)."""


class ModuleMeta(PytreeMeta):
    """Flax's metaclass of ``Module`` (flaxgraph's is ``type``), for a metaclass to derive from."""


def tuple_reduce(xs: tuple[Any, ...], x: Any) -> tuple[Any, ...]:
    """``xs + (x,)``: ``Module.sow``'s default reduce function."""
    return (*xs, x)


def tuple_init() -> tuple[()]:
    """``()``: ``Module.sow``'s default initial value."""
    return ()


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
