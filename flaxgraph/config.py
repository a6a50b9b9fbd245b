"""Scoped configuration flags: one small class, global default plus ``with`` override.

A ``Flag`` holds a value that can be read (``flag.get()``), set for the rest of
the program (``flag.set_globally(v)``) or overridden for a block
(``with flag.scoped(v): ...``). This is the only mutable state flaxgraph keeps
at module level; each flag is explicit and documented where it is defined.

Thread safety follows JAX's own configuration: the global value is shared by all
threads, while a ``scoped`` override holds only in the thread that entered it
(as ``with jax.enable_x64():`` does), so concurrent threads can use different
overrides.
"""

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

    Args:
      name: the flag's name, used in ``repr`` and error messages.
      default: the initial global value.

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
        """The current value (this thread's innermost ``scoped`` override, else the
        global one)."""
        stack = getattr(self._local, "stack", None)
        return stack[-1] if stack else self._value

    def global_value(self) -> T:
        """The global value, whatever ``scoped`` overrides are in force."""
        return self._value

    def stack(self) -> list[T]:
        """This thread's stack of scoped overrides (innermost last), the list itself:
        a caller that pushes and pops on it directly owns that balance."""
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def set_globally(self, value: T) -> None:
        """Sets the value for the rest of the program (outside ``scoped`` blocks)."""
        self._value = value

    def set_current(self, value: T) -> None:
        """Replaces the value in force here: this thread's innermost ``scoped``
        override if there is one, else the global value."""
        stack = getattr(self._local, "stack", None)
        if stack:
            stack[-1] = value
        else:
            self._value = value

    def push(self, value: T) -> None:
        """Starts a scoped override in this thread (``pop`` ends it)."""
        self.stack().append(value)

    def pop(self) -> None:
        """Ends this thread's innermost scoped override."""
        self._local.stack.pop()

    @contextlib.contextmanager
    def scoped(self, value: T) -> Iterator[None]:
        """A context manager: the flag holds ``value`` inside the ``with`` block only
        (in this thread)."""
        self.push(value)
        try:
            yield
        finally:
            self.pop()

    def __repr__(self) -> str:
        return f"Flag({self.name!r}, {self.get()!r})"


class FlaxConfigFlag(Flag[T]):
    """A ``Flag`` whose global value is one setting with Flax's own configuration object
    (``flax.config``) once the program has imported real Flax: read from and written to
    ``flax.config`` under ``flax_name`` then, its own value otherwise. Scoped overrides
    stay this flag's, per thread.

    Under the drop-in ``flax.config`` is the real Flax's (only ``flax.nnx`` is bound), and
    a program that calls ``flax.config.update('flax_always_shard_variable', False)``
    expects NNX to follow it, as Flax NNX 0.12.8 reads its defaults from ``flax.config``.
    Never imports Flax.

    Args:
      name: the flag's name.
      default: the global value while real Flax is not imported.
      flax_name: the option's name in ``flax.config``.

    Example::

      >>> shard = FlaxConfigFlag('eager_sharding', True, 'flax_always_shard_variable')
      >>> with shard.scoped(False):
      ...   shard.get()
      False

    Source: Flax 0.12 ``flax.configurations`` (``flax.config``).
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

    def set_current(self, value: T) -> None:
        stack = getattr(self._local, "stack", None)
        if stack:
            stack[-1] = value
        else:
            self.set_globally(value)


# -- Flax-style named configuration ----------------------------------------------------

FLAX_CONFIG_NAMES: tuple[tuple[str, str, str], ...] = (
    ("nnx_graph_mode", "flaxgraph.modes", "GRAPH"),
    ("nnx_graph_updates", "flaxgraph.modes", "GRAPH_UPDATES"),
    ("flax_always_shard_variable", "flaxgraph.mesh_context", "EAGER_SHARDING"),
    ("flax_max_repr_depth", "flaxgraph.reprlib", "MAX_REPR_DEPTH"),
)
"""The Flax configuration names ``update``/``_read`` know: name, module, ``Flag``.
The flags live in the modules that use them; they are looked up when asked for, so
this ground-floor module imports nothing above it."""


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
    """Sets a configuration value by its Flax name, for the rest of the program
    (``flax.config.update`` as Flax NNX's own code and tests use it).

    Args:
      name: one of ``FLAX_CONFIG_NAMES`` (``'nnx_graph_mode'``, ...).
      value: the new value.

    Each option is one setting with real Flax's ``flax.config`` once the program has
    imported Flax (``FlaxConfigFlag``: either ``update`` changes it, so a program run
    through the drop-in that calls ``flax.config.update('nnx_graph_mode', False)`` gets
    tree mode by default, as with Flax NNX).

    Raises:
      LookupError: ``name`` is not a known option (as ``flax.config.update``).

    Example::

      >>> from flaxgraph import config
      >>> config.update('nnx_graph_mode', False); config._read('nnx_graph_mode')
      False
      >>> config.update('nnx_graph_mode', True)

    Source: Flax 0.12 ``flax.config.update``.
    """
    _flag_named(name).set_current(value)


def _read(name: str) -> Any:
    """The current value of a configuration option by its Flax name (``update``).

    Raises:
      LookupError: ``name`` is not a known option.

    Source: Flax 0.12 ``flax.config._read``.
    """
    return _flag_named(name).get()
