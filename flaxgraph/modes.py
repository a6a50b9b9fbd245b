"""Traversal modes: graph mode, tree mode, and whether transforms propagate graph updates.

Flax NNX 0.12 has three ways to walk an object and lift it through a transform:

* ``graph=True, graph_updates=True`` (the default): objects are graphs. Shared
  references and cycles are allowed, and every change a transformed function makes
  to its arguments (Variable values, new or deleted attributes, new shared
  references) is written back to the caller's objects.
* ``graph=True, graph_updates=False``: objects are still walked as graphs (sharing
  is fine), but only Variable *values* come back; attribute and structural changes
  made inside stay inside, and returning an input Variable as an output is an error.
  Lift types (``StateAxes``, ``DiffState``, ``StateSharding``) are not accepted.
* ``graph=False`` (**tree mode**): objects are plain pytrees. A Variable reachable
  along two paths is an error, updates are as with ``graph_updates=False``, and a
  Variable may appear only once among the inputs and outputs together.

``graph=None``/``graph_updates=None`` on a transform or graph function take the
current defaults, read once when the transform is created (as Flax does):
``set_graph_mode(False)`` / ``set_graph_updates(False)`` change them, globally
when called as a statement, for a block with ``with``, or for every call of a
function when used as a decorator. Global settings are shared by all threads;
``with`` blocks and decorated functions override them in their own thread only,
as JAX's configuration contexts do.

Source: Flax NNX 0.12 ``nnx.set_graph_mode``, ``nnx.set_graph_updates`` and the
``graph``/``graph_updates`` arguments of its transforms.
"""

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
    """A resolved traversal mode.

    Attributes:
      graph: objects are walked as graphs (sharing allowed) rather than as trees.
      updates: structural changes made inside a transform reach the caller
        (always ``False`` in tree mode).
    """

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
    """The mode of a transform created with these arguments (``None``: the defaults).

    Tree mode (``graph=False``) never propagates structural updates, whatever
    ``graph_updates`` says.
    """
    g = resolve_graph(graph)
    updates = GRAPH_UPDATES.get() if graph_updates is None else bool(graph_updates)
    return Mode(g, g and updates)


class _Setting:
    """What ``set_graph_mode``/``set_graph_updates`` return: the setting is already in
    force (globally); entering it as a context manager, or applying it to a function
    as a decorator, turns it into an override of this thread for the block or for each
    call of the function, and the global value goes back to what it was."""

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
      value: ``True`` for graph mode (shared references allowed), ``False`` for tree
        mode (objects are plain pytrees).

    Returns:
      A setting object: the new default holds from now on; used as ``with
      nnx.set_graph_mode(False):`` it holds in that block only, and used as a
      decorator, during each call of the decorated function (in the calling thread).

    Raises:
      TypeError: ``value`` is not a bool.

    Example::

      >>> import flaxgraph as nnx
      >>> with nnx.set_graph_mode(False):
      ...   nnx.modes.GRAPH.get()
      False
      >>> nnx.modes.GRAPH.get()
      True

    Transforms read the default when they are created (``nnx.jit(f)``), not when
    they are called.

    Source: Flax NNX 0.12 ``nnx.set_graph_mode``.
    """
    return _Setting(GRAPH, value)


def set_graph_updates(value: bool, /) -> Any:
    """Sets the default ``graph_updates`` of transforms (see ``set_graph_mode``).

    Args:
      value: ``True``: structural changes made inside a transform reach the caller;
        ``False``: only Variable values do.

    Returns:
      A setting object usable as a statement, context manager or decorator.

    Raises:
      TypeError: ``value`` is not a bool.

    Example::

      >>> import flaxgraph as nnx
      >>> @nnx.set_graph_updates(False)
      ... def mode():
      ...   return nnx.modes.resolve(None, None)
      >>> mode()
      Mode(graph=True, updates=False)

    Source: Flax NNX 0.12 ``nnx.set_graph_updates``.
    """
    return _Setting(GRAPH_UPDATES, value)
