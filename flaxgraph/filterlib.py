"""Filters: a small language for selecting parts of a graph's state.

``to_predicate`` turns a filter into ``(path, value) -> bool`` (``path``: the keys from
the root to a leaf; ``value``: a Variable or raw array). Filters select what ``split``,
``state`` and ``pop`` return, and where a lift type applies.

======================  =========================================================
filter                  matches
======================  =========================================================
a type, ``OfType(t)``   values that are instances of ``t`` (``Param``, ``jax.Array``)
a string, ``WithTag``   values whose ``tag`` attribute equals the string
``PathContains(k)``     leaves whose path contains the key ``k``
``PathIn(p, q)``        leaves at exactly one of the paths ``p``, ``q``
``Any(a, b)``, tuple    leaves matched by at least one of the filters
``All(a, b)``           leaves matched by every filter
``Not(a)``              leaves ``a`` does not match
``...``, ``True``       everything (``Everything()``)
``None``, ``False``     nothing (``Nothing()``)
a callable              used as the predicate itself
======================  =========================================================

Source: Flax NNX's filter guide (the same vocabulary and semantics).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol
from typing import Any as _AnyType

from flaxgraph.errors import InvalidFilterError
from flaxgraph.typing import Key, PathParts

Predicate = Callable[[PathParts, _AnyType], bool]
Filter = _AnyType  # type | str | Predicate | bool | Ellipsis | None | tuple[Filter, ...]

if TYPE_CHECKING:
    from builtins import ellipsis as ellipsis
else:
    ellipsis = _AnyType  # the type of ``...`` (a name for type checkers only, as in Flax)

FilterLiteral = type | str | Predicate | bool | ellipsis | None
"""A filter that is not a tuple or list of filters."""


class HasTag(Protocol):
    """A value with a ``tag`` attribute (what a string filter, ``WithTag``, reads)."""

    tag: str


def to_predicate(filter: Filter) -> Predicate:
    """Turns a filter (one of the module table's forms) into a predicate ``(path, value) -> bool``.

    Raises:
      InvalidFilterError (a ``TypeError``): ``filter`` is none of them, e.g. an int.

    Example::

      >>> import flaxgraph as nnx
      >>> pred = nnx.filterlib.to_predicate((nnx.Param, 'dropout'))
      >>> pred(('kernel',), nnx.Param(1.0))
      True
    """
    if isinstance(filter, type):
        return OfType(filter)
    if isinstance(filter, str):
        return WithTag(filter)
    if filter is Ellipsis or filter is True:
        return Everything()
    if filter is None or filter is False:
        return Nothing()
    if isinstance(filter, (tuple, list)):
        return Any(*filter)
    if callable(filter):
        return filter
    raise InvalidFilterError(
        f"Invalid filter {filter!r} of type {type(filter).__name__}. A filter is a "
        "type (e.g. nnx.Param), a string tag, ..., True/False, None, a tuple of "
        "filters, or a callable (path, value) -> bool."
    )


def filters_to_predicates(filters: tuple[Filter, ...]) -> tuple[Predicate, ...]:
    """Converts several filters at once (see ``to_predicate``)."""
    return tuple(to_predicate(f) for f in filters)


def partition_predicates(filters: tuple[Filter, ...]) -> tuple[Predicate, ...]:
    """``filters_to_predicates`` for filters that partition a state (first match wins).

    Raises:
      ValueError: a catch-all (``...``/``True``) is followed by a filter that is not one.
    """
    for i, f in enumerate(filters):
        if (f is Ellipsis or f is True) and any(
            g is not Ellipsis and g is not True for g in filters[i + 1 :]
        ):
            raise ValueError(
                f"`...` or `True` can only be used as the last filters, but filter {i} of "
                f"{filters!r} is a catch-all followed by other filters, which would match "
                "nothing.\nFix: move `...` to the end."
            )
    return filters_to_predicates(filters)


@dataclasses.dataclass(frozen=True)
class OfType:
    """Matches values that are instances of ``type`` (for a Variable, its kind and subclasses)."""

    type: type

    def __call__(self, path: PathParts, value: object) -> bool:
        return isinstance(value, self.type)

    def __repr__(self) -> str:
        return f"OfType({self.type.__name__})"


@dataclasses.dataclass(frozen=True)
class WithTag:
    """Matches values whose ``tag`` attribute equals ``tag`` (e.g. an RNG stream name)."""

    tag: str

    def __call__(self, path: PathParts, value: object) -> bool:
        return getattr(value, "tag", None) == self.tag


@dataclasses.dataclass(frozen=True)
class PathContains:
    """Matches leaves whose path contains ``key`` (``exact=False``: a key containing it)."""

    key: Key
    exact: bool = True

    def __call__(self, path: PathParts, value: object) -> bool:
        if self.exact:
            return self.key in path
        return any(str(self.key) in str(part) for part in path)


class PathIn:
    """Matches leaves whose path is exactly one of ``paths`` (each a tuple of keys).

    Example::

      >>> from flaxgraph.filterlib import PathIn
      >>> f = PathIn(('a', 'kernel'), ('b',))
      >>> f(('a', 'kernel'), None), f(('a',), None), f == PathIn(('b',), ('a', 'kernel'))
      (True, False, True)
    """

    def __init__(self, *paths: PathParts) -> None:
        self.paths = frozenset(paths)

    def __call__(self, path: PathParts, value: object) -> bool:
        return path in self.paths

    def __repr__(self) -> str:
        return f"PathIn({','.join(map(repr, self.paths))})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PathIn) and self.paths == other.paths

    def __hash__(self) -> int:
        return hash(self.paths)


class _Combination:
    """Base of ``Any`` and ``All``: the predicates of ``filters``, compared by class and them."""

    __slots__ = ("predicates",)

    def __init__(self, *filters: Filter):
        self.predicates = filters_to_predicates(filters)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(map(repr, self.predicates))})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, type(self)) and self.predicates == other.predicates

    def __hash__(self) -> int:
        return hash((type(self), self.predicates))


class Any(_Combination):
    """Matches what at least one of ``filters`` matches (a tuple of filters means this)."""

    __slots__ = ()

    def __call__(self, path: PathParts, value: object) -> bool:
        return any(p(path, value) for p in self.predicates)


class All(_Combination):
    """Matches what every one of ``filters`` matches."""

    __slots__ = ()

    def __call__(self, path: PathParts, value: object) -> bool:
        return all(p(path, value) for p in self.predicates)


class Not:
    """Matches what ``filter`` does not match."""

    __slots__ = ("predicate",)

    def __init__(self, filter: Filter):
        self.predicate = to_predicate(filter)

    def __call__(self, path: PathParts, value: object) -> bool:
        return not self.predicate(path, value)

    def __repr__(self) -> str:
        return f"Not({self.predicate!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Not) and self.predicate == other.predicate

    def __hash__(self) -> int:
        return hash((Not, self.predicate))


class _Constant:
    """Base of ``Everything`` and ``Nothing``: equal to every instance of its class."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, type(self))

    def __hash__(self) -> int:
        return hash(type(self))


class Everything(_Constant):
    """Matches every leaf (``...`` and ``True`` mean this)."""

    def __call__(self, path: PathParts, value: object) -> bool:
        return True


class Nothing(_Constant):
    """Matches no leaf (``None`` and ``False`` mean this)."""

    def __call__(self, path: PathParts, value: object) -> bool:
        return False
