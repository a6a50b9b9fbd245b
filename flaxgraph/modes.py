"""Traversal modes: graph mode, tree mode, and whether transforms propagate graph updates
(``docs/design.md``, "Traversal modes"). ``graph=None``/``graph_updates=None`` take the
defaults when the transform is created; ``set_graph_mode``/``set_graph_updates`` change
them globally, for a ``with`` block or per call (a decorator; the last two per thread).

Source: Flax NNX 0.12 ``nnx.set_graph_mode``, ``nnx.set_graph_updates``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from flaxgraph.config import Flag, FlaxConfigFlag

F = TypeVar("F", bound=Callable[..., Any])

GRAPH = FlaxConfigFlag("graph", True, "nnx_graph_mode")
"""The default of every ``graph=None`` argument (``set_graph_mode`` changes it)."""
GRAPH_UPDATES = FlaxConfigFlag("graph_updates", True, "nnx_graph_updates")
"""The default of every ``graph_updates=None`` argument (``set_graph_updates``)."""


class Mode(NamedTuple):
    """A resolved traversal mode: ``graph`` (walked as graphs) and ``updates`` (structural
    changes reach the caller; always ``False`` in tree mode)."""

    graph: bool
    updates: bool

    @property
    def name(self) -> str:
        """How messages name the mode (``'graph_updates=False'``, ``'graph=False'``)."""
        if not self.graph:
            return "graph=False"
        return "graph=True" if self.updates else "graph_updates=False"


DEFAULT = Mode(True, True)


def resolve_graph(graph: bool | None) -> bool:
    """``graph``, or the current default (``set_graph_mode``) when it is ``None``."""
    return GRAPH.get() if graph is None else bool(graph)


def resolve(graph: bool | None, graph_updates: bool | None) -> Mode:
    """The mode of a transform created with these arguments (``None``: the defaults)."""
    g = resolve_graph(graph)
    updates = GRAPH_UPDATES.get() if graph_updates is None else bool(graph_updates)
    return Mode(g, g and updates)


class _Setting:
    """What ``set_graph_mode``/``set_graph_updates`` return: in force globally at once; as a
    context manager or decorator it becomes this thread's override instead."""

    __slots__ = ("flag", "value", "previous", "active")

    def __init__(self, flag: Flag[bool], value: bool):
        if not isinstance(value, bool):
            raise TypeError(f"{flag.name} must be True or False, got {value!r}.")
        self.flag, self.value = flag, value
        self.previous = flag.global_value()
        self.active = True
        flag.set_globally(value)

    def _scope(self) -> None:
        # The global change becomes a scoped one: undo it if nobody changed it since.
        if self.active and self.flag.global_value() is self.value:
            self.flag.set_globally(self.previous)
        self.active = False

    def __enter__(self) -> _Setting:
        self._scope()
        self.flag.push(self.value)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.flag.pop()

    def __call__(self, f: F) -> F:
        self._scope()
        flag, value = self.flag, self.value

        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with flag.scoped(value):
                return f(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"set_{self.flag.name}({self.value})"


def set_graph_mode(value: bool, /) -> Any:
    """Sets the default ``graph`` mode of transforms and graph functions.

    Args:
      value: ``True`` for graph mode, ``False`` for tree mode.

    Returns:
      A setting usable as a statement, ``with`` block or decorator (see the module).

    Raises:
      TypeError: ``value`` is not a bool.

    Example::

      >>> import flaxgraph as nnx
      >>> with nnx.set_graph_mode(False):
      ...   nnx.modes.GRAPH.get()
      False
      >>> nnx.modes.GRAPH.get()
      True
    """
    return _Setting(GRAPH, value)


def set_graph_updates(value: bool, /) -> Any:
    """Sets the default ``graph_updates`` of transforms (``False``: only Variable values come
    back); returns a setting as ``set_graph_mode``, raises ``TypeError`` for a non-bool.

    Example::

      >>> import flaxgraph as nnx
      >>> @nnx.set_graph_updates(False)
      ... def mode():
      ...   return nnx.modes.resolve(None, None)
      >>> mode()
      Mode(graph=True, updates=False)
    """
    return _Setting(GRAPH_UPDATES, value)
