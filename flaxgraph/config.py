"""Scoped configuration flags: one small class, global default plus ``with`` override.

A ``Flag`` holds a value that can be read (``flag.get()``), set for the rest of
the program (``flag.set_globally(v)``) or overridden for a block
(``with flag.scoped(v): ...``). This is the only mutable state flaxgraph keeps
at module level; each flag is explicit and documented where it is defined.
"""

from __future__ import annotations

import contextlib
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

    __slots__ = ("name", "_value")

    def __init__(self, name: str, default: T):
        self.name = name
        self._value = default

    def get(self) -> T:
        """The current value (the innermost ``scoped`` override, else the global one)."""
        return self._value

    def set_globally(self, value: T) -> None:
        """Sets the value for the rest of the program (outside ``scoped`` blocks)."""
        self._value = value

    @contextlib.contextmanager
    def scoped(self, value: T) -> Iterator[None]:
        """A context manager: the flag holds ``value`` inside the ``with`` block only."""
        previous = self._value
        self._value = value
        try:
            yield
        finally:
            self._value = previous

    def __repr__(self) -> str:
        return f"Flag({self.name!r}, {self._value!r})"
