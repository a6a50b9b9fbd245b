"""Scoped configuration flags: a global default (shared by all threads, the only mutable
module-level state flaxgraph keeps) plus a ``with`` override holding in its thread only.

Source: Flax 0.12 ``flax.config`` (``update``, ``_read``, the option names); JAX's
configuration contexts (``jax.enable_x64``) for the thread rules."""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Flag(Generic[T]):
    """A named configuration value with a global default and scoped overrides.

    Example::

      >>> check = Flag('check_aliasing', True)
      >>> with check.scoped(False):
      ...   check.get()
      False
      >>> check.get()
      True
    """

    __slots__ = ("name", "_value", "_local")

    def __init__(self, name: str, default: T):
        self.name = name
        self._value = default
        self._local = threading.local()  # this thread's stack of scoped overrides

    def get(self) -> T:
        """The current value: this thread's innermost ``scoped`` override, else the global one."""
        stack = getattr(self._local, "stack", None)
        return stack[-1] if stack else self._value

    def global_value(self) -> T:
        """The global value, whatever ``scoped`` overrides are in force."""
        return self._value

    def stack(self) -> list[T]:
        """This thread's stack of overrides, the list itself (a caller pushing on it pops it)."""
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def set_globally(self, value: T) -> None:
        """Sets the value for the rest of the program (outside ``scoped`` blocks)."""
        self._value = value

    def set_current(self, value: T) -> None:
        """Replaces this thread's innermost override if there is one, else the global value."""
        stack = getattr(self._local, "stack", None)
        if stack:
            stack[-1] = value
        else:
            self.set_globally(value)

    def push(self, value: T) -> None:
        """Starts a scoped override in this thread (``pop`` ends it)."""
        self.stack().append(value)

    def pop(self) -> None:
        """Ends this thread's innermost scoped override."""
        self._local.stack.pop()

    @contextlib.contextmanager
    def scoped(self, value: T) -> Iterator[None]:
        """The flag holds ``value`` inside the ``with`` block only (in this thread)."""
        self.push(value)
        try:
            yield
        finally:
            self.pop()

    def __repr__(self) -> str:
        return f"Flag({self.name!r}, {self.get()!r})"


class FlaxConfigFlag(Flag[T]):
    """A ``Flag`` whose global value is ``flax.config``'s ``flax_name`` once real Flax is
    imported (its own value otherwise); scoped overrides stay this flag's. Never imports Flax.

    Example::

      >>> shard = FlaxConfigFlag('eager_sharding', True, 'flax_always_shard_variable')
      >>> with shard.scoped(False):
      ...   shard.get()
      False
    """

    __slots__ = ("flax_name",)

    def __init__(self, name: str, default: T, flax_name: str):
        super().__init__(name, default)
        self.flax_name = flax_name

    def _flax_config(self) -> Any:
        """``flax.config`` if real Flax is imported and knows this option, else ``None``."""
        module = sys.modules.get("flax.configurations")
        config = getattr(module, "config", None)
        return config if config is not None and hasattr(config, self.flax_name) else None

    def get(self) -> T:
        stack = getattr(self._local, "stack", None)
        return stack[-1] if stack else self.global_value()

    def global_value(self) -> T:
        config = self._flax_config()
        return self._value if config is None else getattr(config, self.flax_name)

    def set_globally(self, value: T) -> None:
        self._value = value
        config = self._flax_config()
        if config is not None:
            config.update(self.flax_name, value)


# -- Flax-style named configuration ----------------------------------------------------

FLAX_CONFIG_NAMES: tuple[tuple[str, str, str], ...] = (
    ("nnx_graph_mode", "flaxgraph.modes", "GRAPH"),
    ("nnx_graph_updates", "flaxgraph.modes", "GRAPH_UPDATES"),
    ("flax_always_shard_variable", "flaxgraph.mesh_context", "EAGER_SHARDING"),
    ("flax_max_repr_depth", "flaxgraph.reprlib", "MAX_REPR_DEPTH"),
)
"""The Flax configuration names ``update``/``_read`` know: name, module, ``Flag`` (looked up
when asked for, so this ground-floor module imports nothing above it)."""


def _flag_named(name: str) -> Flag[Any]:
    for known, module, attribute in FLAX_CONFIG_NAMES:
        if known == name:
            return getattr(importlib.import_module(module), attribute)
    names = ", ".join(n for n, _, _ in FLAX_CONFIG_NAMES)
    raise LookupError(
        f"Unrecognized config option: {name!r}. flaxgraph knows {names}; other settings "
        "have their own functions (nnx.var_defaults, nnx.use_eager_sharding...)."
    )


def update(name: str, value: Any, /) -> None:
    """Sets a configuration value by its Flax name, for the rest of the program.

    One setting with ``flax.config`` once Flax is imported (either ``update`` changes it).

    Args:
      name: one of ``FLAX_CONFIG_NAMES`` (``'nnx_graph_mode'``, ...).
      value: the new value.

    Raises:
      LookupError: ``name`` is not a known option.

    Example::

      >>> from flaxgraph import config
      >>> config.update('nnx_graph_mode', False); config._read('nnx_graph_mode')
      False
      >>> config.update('nnx_graph_mode', True)
    """
    _flag_named(name).set_current(value)


def _read(name: str) -> Any:
    """The current value of an option by its Flax name; ``LookupError`` if unknown."""
    return _flag_named(name).get()
