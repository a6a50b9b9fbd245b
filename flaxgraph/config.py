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
import threading
from collections.abc import Iterator
from typing import Generic, TypeVar

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
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        stack.append(value)

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
