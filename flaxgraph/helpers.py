"""Containers that are Modules: ``List``, ``Dict`` and ``Sequential``.

Plain lists and dicts work as attributes too (the graph engine walks them by
value). These containers are graph nodes themselves, so they keep reference
semantics: two modules holding the same ``nnx.List`` share it.

Source: Flax NNX ``nnx.List``, ``nnx.Dict``, ``nnx.Sequential``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from flaxgraph.module import Module


class List(Module):
    """A list that is a Module: ``nnx.List([Linear(...), Linear(...)])``.

    Items are stored as attributes named ``0``, ``1``, … (their State keys are ints).
    """

    def __init__(self, items: Iterable[Any] = ()):
        for item in items:
            self.append(item)

    def _items(self) -> list[tuple[int, Any]]:
        return sorted((k, v) for k, v in self.__dict__.items() if isinstance(k, int))

    def __len__(self) -> int:
        return sum(1 for k in self.__dict__ if isinstance(k, int))

    def __getitem__(self, index: int | slice) -> Any:
        items = [v for _, v in self._items()]
        return items[index]

    def __setitem__(self, index: int, value: Any) -> None:
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"List index {index} out of range for length {n}")
        self._set(index % n, value)

    def _set(self, index: int, value: Any) -> None:
        self._check_trace("set an item")
        old = self.__dict__.get(index)
        self.__dict__[index] = value
        if old is not value:
            object.__setattr__(self, "_obj_version", self._obj_version + 1)

    def append(self, value: Any) -> None:
        """Adds ``value`` at the end (index ``len(self)``), like ``list.append``."""
        self._set(len(self), value)

    def extend(self, values: Iterable[Any]) -> None:
        """Appends every item of ``values`` in order."""
        for v in values:
            self.append(v)

    def pop(self, index: int = -1) -> Any:
        """Removes and returns the item at ``index`` (default the last); later items
        move down one index, like ``list.pop``.

        Raises:
          IndexError: the list is empty or ``index`` is out of range.
        """
        items = [v for _, v in self._items()]
        value = items.pop(index)
        self._check_trace("pop an item")
        for k in [k for k in self.__dict__ if isinstance(k, int)]:
            del self.__dict__[k]
        self.__dict__.update(enumerate(items))
        object.__setattr__(self, "_obj_version", self._obj_version + 1)
        return value

    def __iter__(self) -> Iterator[Any]:
        return iter([v for _, v in self._items()])


class Dict(Module):
    """A dict with string keys that is a Module: ``nnx.Dict(encoder=..., decoder=...)``."""

    def __init__(self, items: Mapping[str, Any] | None = None, /, **kwargs: Any):
        for k, v in {**(items or {}), **kwargs}.items():
            setattr(self, k, v)

    def __getitem__(self, key: str) -> Any:
        return self.__dict__[key]

    def __setitem__(self, key: str, value: Any) -> None:
        setattr(self, key, value)

    def __delitem__(self, key: str) -> None:
        delattr(self, key)

    def __contains__(self, key: object) -> bool:
        return key in self.__dict__

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self.__dict__))

    def __len__(self) -> int:
        return len(self.__dict__)

    def keys(self) -> list[str]:
        """The keys, sorted."""
        return sorted(self.__dict__)

    def values(self) -> list[Any]:
        """The values, in sorted-key order."""
        return [self.__dict__[k] for k in self.keys()]

    def items(self) -> list[tuple[str, Any]]:
        """The ``(key, value)`` pairs, in sorted-key order."""
        return [(k, self.__dict__[k]) for k in self.keys()]


class Sequential(Module):
    """Calls its layers in order: ``Sequential(f, g)(x) == g(f(x))``.

    Extra arguments and keyword arguments go to the first layer only.
    """

    def __init__(self, *fns: Callable[..., Any]):
        self.layers = List(fns)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        output: Any = None
        for i, f in enumerate(self.layers):
            output = f(*args, **kwargs) if i == 0 else f(output)
        return output if len(self.layers) else (args[0] if len(args) == 1 else args)
