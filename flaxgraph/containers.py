"""``List``, ``Dict`` and ``Sequential``: containers that are Modules (graph nodes, so two
modules holding one ``nnx.List`` share it); Flax's ``nnx.helpers`` path gathers them.

Source: Flax NNX 0.12 ``nnx.List``, ``nnx.Dict`` (a ``MutableMapping``), ``nnx.Sequential``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, MutableSequence
from typing import Any, overload

from flaxgraph.graphlib.snapshot import same_structure
from flaxgraph.module_class import Module
from flaxgraph.pytreelib.attribute_kinds import Marked
from flaxgraph.pytreelib.objects import mark_structure_changed, set_attribute_kinds
from flaxgraph.typing import MISSING


class List(Module, MutableSequence[Any]):
    """A list that is a Module: ``nnx.List([Linear(...), Linear(...)])``.

    Items are attributes ``0``, ``1``, … (int State keys); a full ``MutableSequence``; an item
    given as ``nnx.data(x)``/``nnx.static(x)`` is marked as an attribute would be.

    Example::

      >>> import flaxgraph as nnx
      >>> ls = nnx.List([1, 2, 3])
      >>> ls.insert(1, 5); del ls[0]; ls[1:] = [7, 8]
      >>> list(ls)
      [5, 7, 8]
    """

    def __init__(self, items: Iterable[Any] = ()):
        for item in items:
            self.append(item)

    def _items(self) -> list[tuple[int, Any]]:
        return sorted((k, v) for k, v in self.__dict__.items() if isinstance(k, int))

    def __len__(self) -> int:
        return sum(1 for k in self.__dict__ if isinstance(k, int))

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        items = [v for _, v in self._items()]
        return items[index]

    def __setitem__(self, index: int | slice, value: Any) -> None:
        if isinstance(index, slice):
            entries = self._entries()
            entries[index] = [_entry(v) for v in value]
            self._rewrite(entries)
            return
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"List index {index} out of range for length {n}")
        self._set(index % n, value)

    def __delitem__(self, index: int | slice) -> None:
        entries = self._entries()
        del entries[index]
        self._rewrite(entries)

    def insert(self, index: int, value: Any) -> None:
        """Inserts ``value`` before ``index``, like ``list.insert``."""
        entries = self._entries()
        entries.insert(index, _entry(value))
        self._rewrite(entries)

    def _set(self, index: int, value: Any) -> None:
        self._check_trace("set an item")
        value, kind = _entry(value)
        old = self.__dict__.get(index, MISSING)
        self.__dict__[index] = value
        if not same_structure(old, value):  # an array for an array: a new value only
            mark_structure_changed(self)
        if kind is not None or any(n == index for n, _ in self._obj_kinds):
            self._set_kinds([(n, k) for n, k in self._obj_kinds if n != index], index, kind)

    def _set_kinds(self, kinds: list[tuple[Any, str]], index: int = -1, kind: Any = None) -> None:
        if kind is not None:
            kinds.append((index, kind))
        new = tuple(sorted(kinds, key=lambda nk: (type(nk[0]).__name__, nk[0])))
        if new != self._obj_kinds:
            set_attribute_kinds(self, new)

    def _entries(self) -> list[tuple[Any, str | None]]:
        kinds = {n: k for n, k in self._obj_kinds if isinstance(n, int)}
        return [(v, kinds.get(i)) for i, v in self._items()]

    def _rewrite(self, entries: list[tuple[Any, str | None]]) -> None:
        """Stores ``entries`` (value, kind) as items ``0…n-1``, dropping the old ones."""
        self._check_trace("change the items")
        d = self.__dict__
        for k in [k for k in d if isinstance(k, int)]:
            del d[k]
        d.update((i, v) for i, (v, _) in enumerate(entries))
        mark_structure_changed(self)
        kinds = [(n, k) for n, k in self._obj_kinds if not isinstance(n, int)]
        kinds += [(i, k) for i, (_, k) in enumerate(entries) if k is not None]
        self._set_kinds(kinds)

    def append(self, value: Any) -> None:
        """Adds ``value`` at the end (index ``len(self)``), like ``list.append``."""
        self._set(len(self), value)

    def extend(self, values: Iterable[Any]) -> None:
        """Appends every item of ``values`` in order."""
        for v in values:
            self.append(v)

    def pop(self, index: int = -1) -> Any:
        """Removes and returns the item at ``index`` (default the last), like ``list.pop``;
        ``IndexError`` if out of range."""
        entries = self._entries()
        value, _ = entries.pop(index)
        self._rewrite(entries)
        return value

    def __iter__(self) -> Iterator[Any]:
        return iter([v for _, v in self._items()])


def _entry(value: Any) -> tuple[Any, str | None]:
    if type(value) is Marked:
        return value.value, value.kind
    return value, None


class Dict(Module, MutableMapping[str, Any]):
    """A dict with string keys that is a Module: ``nnx.Dict(encoder=..., decoder=...)``.

    A ``MutableMapping`` (views, ``==`` by entries) that hashes by identity, as a Module;
    iterates in sorted-key order.

    Example::

      >>> import collections.abc, flaxgraph as nnx
      >>> d = nnx.Dict(b=2, a=1)
      >>> isinstance(d, collections.abc.Mapping), list(d.keys()), d == {'a': 1, 'b': 2}
      (True, ['a', 'b'], True)
      >>> d.popitem(), len(d)
      (('a', 1), 1)
    """

    __hash__ = Module.__hash__  # Mapping's __eq__ would otherwise make it unhashable

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

    def get(self, key: str, default: Any = None) -> Any:
        """The value at ``key``, or ``default``."""
        return self.__dict__.get(key, default)

    def setdefault(self, key: str, default: Any = None) -> Any:
        """The value at ``key``; if there is none, sets it to ``default`` first."""
        if key not in self.__dict__:
            self[key] = default
        return self.__dict__[key]

    def pop(self, key: str, *default: Any) -> Any:
        """Removes ``key`` and returns its value (``default`` if given); ``KeyError`` if missing."""
        if key not in self.__dict__:
            if default:
                return default[0]
            raise KeyError(key)
        value = self.__dict__[key]
        del self[key]
        return value

    def update(self, other: Mapping[str, Any] = {}, /, **kwargs: Any) -> None:  # type: ignore[override]
        """Sets every ``key: value`` of ``other`` and ``kwargs``, like ``dict.update``."""
        for k, v in {**other, **kwargs}.items():
            self[k] = v

    def popitem(self) -> tuple[str, Any]:
        """Removes and returns the first ``(key, value)`` in sorted-key order; ``KeyError`` if empty."""
        if not self.__dict__:
            raise KeyError("popitem(): the nnx.Dict is empty")
        key = next(iter(self))
        return key, self.pop(key)

    def clear(self) -> None:
        """Removes every entry (the Dict stays the same object)."""
        for key in list(self):
            del self[key]


class Sequential(Module):
    """Calls its layers in order: ``Sequential(f, g)(x) == g(f(x))``; extra arguments go to the
    first layer only."""

    def __init__(self, *fns: Callable[..., Any]):
        self.layers = List(fns)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not len(self.layers):
            # The identity: one argument back as it is, several as a tuple, keywords
            # as a dict (both: a pair), nothing as None (Flax 0.12).
            positional = (args[0] if len(args) == 1 else args) if args else None
            if not kwargs:
                return positional
            return kwargs if not args else (positional, kwargs)
        output: Any = None
        for i, f in enumerate(self.layers):
            output = f(*args, **kwargs) if i == 0 else f(output)
        return output
