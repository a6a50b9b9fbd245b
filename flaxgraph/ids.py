"""Unique ids for objects: ``nnx.ids.uuid()``, equal only to itself, never recycled while
alive (unlike ``id(x)``), with no shared counter to lock.

Source: Flax NNX 0.12 ``flax.nnx.ids`` (``uuid``, ``UUID``, ``UUIDManager``)."""

from __future__ import annotations

from typing import Any


class UUID:
    """A unique, hashable id; copies are new ids.

    Example::

      >>> import copy
      >>> a = uuid()
      >>> a == a, a == uuid(), copy.copy(a) == a
      (True, False, False)
    """

    __slots__ = ("_token",)

    def __init__(self) -> None:
        self._token = object()

    def __eq__(self, other: object) -> bool:
        return type(other) is UUID and other._token is self._token

    def __hash__(self) -> int:
        return hash(self._token)

    def __copy__(self) -> UUID:
        return UUID()

    def __deepcopy__(self, memo: Any) -> UUID:
        return UUID()

    def __repr__(self) -> str:
        return f"UUID({id(self._token):#x})"


def uuid() -> UUID:
    """Returns a new unique id (a ``UUID`` equal only to itself).

    Example::

      >>> uuid() != uuid()
      True
    """
    return UUID()


class UUIDManager:
    """Flax's maker of unique ids: ``UUIDManager()()`` is a new :class:`UUID`."""

    __slots__ = ()

    def __call__(self) -> UUID:
        return UUID()


__all__ = ["UUID", "UUIDManager", "uuid"]
