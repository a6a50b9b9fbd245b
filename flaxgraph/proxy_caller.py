"""Flax NNX's ``proxy_caller``: record attribute and item accesses, replay them later.

``proxy.layer[0].method(x)`` calls ``fn(accessor, x)``, ``accessor`` replaying
``.layer[0].method`` (how ``nnx.call`` and ``GraphDef.apply`` take a method path)::

  >>> from flaxgraph.proxy_caller import CallableProxy, DelayedAccessor
  >>> path = DelayedAccessor().imag
  >>> path(3 + 4j)
  4.0
  >>> proxy = CallableProxy(lambda accessor, *args: accessor(2 + 0j)(*args))
  >>> proxy.conjugate()
  (2-0j)

Source: Flax NNX 0.12.8 ``flax.nnx.proxy_caller``."""

from __future__ import annotations

import dataclasses
from typing import Any, Generic, Protocol, TypeVar

import jax

__all__ = ["ApplyCaller", "CallableProxy", "DelayedAccessor", "GetAttr", "GetItem"]

A = TypeVar("A", covariant=True)


@dataclasses.dataclass(frozen=True)
class GetItem:
    """A recorded ``x[key]``."""

    key: Any


@dataclasses.dataclass(frozen=True)
class GetAttr:
    """A recorded ``x.name``."""

    name: str


@dataclasses.dataclass(frozen=True)
class DelayedAccessor:
    """A path of recorded lookups (``actions``); ``accessor(x)`` replays them on ``x``.

    Hashable and static under JAX transforms."""

    actions: tuple[GetItem | GetAttr, ...] = ()

    def __call__(self, x: Any) -> Any:
        for action in self.actions:
            x = x[action.key] if isinstance(action, GetItem) else getattr(x, action.name)
        return x

    def __getattr__(self, name: str) -> DelayedAccessor:
        if name.startswith("__"):  # copy/pickle protocols look these up
            raise AttributeError(name)
        return DelayedAccessor((*self.actions, GetAttr(name)))

    def __getitem__(self, key: Any) -> DelayedAccessor:
        return DelayedAccessor((*self.actions, GetItem(key)))


jax.tree_util.register_static(DelayedAccessor)


class _AccessorCall(Protocol):
    def __call__(self, accessor: DelayedAccessor, /, *args: Any, **kwargs: Any) -> Any: ...


class CallableProxy:
    """Records lookups, then calls ``callable(accessor, *args, **kwargs)`` when called."""

    def __init__(self, callable: _AccessorCall, accessor: DelayedAccessor | None = None) -> None:
        self._callable = callable
        self._accessor = DelayedAccessor() if accessor is None else accessor

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._callable(self._accessor, *args, **kwargs)

    def __getattr__(self, name: str) -> CallableProxy:
        if name.startswith("__"):
            raise AttributeError(name)
        return CallableProxy(self._callable, getattr(self._accessor, name))

    def __getitem__(self, key: Any) -> CallableProxy:
        return CallableProxy(self._callable, self._accessor[key])


class ApplyCaller(Protocol, Generic[A]):
    """The type of a proxy whose call returns ``(output, A)``, as ``nnx.call(...)`` does."""

    def __getattr__(self, name: str, /) -> ApplyCaller[A]: ...

    def __getitem__(self, name: Any, /) -> ApplyCaller[A]: ...

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[Any, A]: ...
