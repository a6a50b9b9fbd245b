"""How a fast-path plan reads and stores each input leaf, from the general walk's record.

See ``docs/design.md``, "The recorded plan".
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Callable, Hashable, Mapping, MutableMapping
from typing import Any, NamedTuple, cast

import jax

from flaxgraph.graphlib.graphdefs import ContainerDef, Def, NodeDef
from flaxgraph.graphlib.registry import REGISTRY
from flaxgraph.transforms.ref_writes import read_ref
from flaxgraph.variablelib.boxes import read as read_box
from flaxgraph.variablelib.refs import has_direct_content
from flaxgraph.variablelib.variable import (
    is_box_backed,
    is_ref_backed,
    is_variable,
    read_slot,
    write_value,
)

get_raw = read_slot
get_ref_content = operator.attrgetter("_refs._buf")


def _identity(x: object) -> object:
    return x


def level_treedef(x: object) -> object:
    """The structure of one level of the pytree ``x`` (its children as leaves)."""
    return jax.tree_util.tree_structure(x, is_leaf=lambda y: y is not x)


def leaf_reader(
    path: tuple[Hashable, ...],
    root: Def,
    leaf: object,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    in_arguments: bool,
) -> tuple[Callable[[Any], Any], Any]:
    """``(getter, target)``: ``getter(target)`` is the leaf's value (``None``: in the arguments)."""
    if is_variable(leaf):
        if is_box_backed(leaf):  # a fresh container holding the box's arrays
            return read_box, leaf._var_ref
        if is_ref_backed(leaf):
            ref = leaf._var_ref
            if has_direct_content(ref):  # one C-level read (see variablelib/refs.py)
                return get_ref_content, ref
            return read_ref, ref
        return get_raw, leaf
    if in_arguments:
        return _identity, None
    place = leaf_place(path, root, args, kwargs)
    if place is None:
        raise ValueError(f"the leaf at {path} has no place to be read from")
    if place.in_tuple:
        return TupleItemGetter(place.key, place.in_tuple), place.holder
    return operator.itemgetter(place.key), place.holder


def is_in_place(
    path: tuple[Hashable, ...],
    root: Def,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    in_arguments: bool,
) -> bool:
    """Whether the raw leaf at ``path`` is an argument's own or has a ``LeafPlace``."""
    return in_arguments or leaf_place(path, root, args, kwargs) is not None


class LeafPlace(NamedTuple):
    """Where a raw leaf lives: ``holder[key]`` (a ``__dict__``, list or dict), then ``in_tuple``."""

    holder: MutableMapping[Hashable, object] | list[object]
    key: Hashable
    in_tuple: tuple[int, ...]


def leaf_place(
    path: tuple[Hashable, ...], root: Def, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> LeafPlace | None:
    """The ``LeafPlace`` of the raw leaf at ``path`` (from the recorded Defs), or ``None``."""
    node: Any = (args, kwargs)
    d: Def = root
    place: LeafPlace | None = None
    impls = REGISTRY.node_impls()
    for key in path:
        if type(d) is NodeDef:
            impl = impls.get(d.type)
            if impl is None:
                return None
            place = LeafPlace(node.__dict__, key, ())
            node = impl.get_child(node, key)
            d = dict(d.attributes)[key]
        elif type(d) is ContainerDef and d.treedef is None:
            if d.type is list or d.type is dict:
                place = LeafPlace(node, key, ())
            elif d.type is tuple:
                if place is not None:
                    place = LeafPlace(place.holder, place.key, (*place.in_tuple, cast(int, key)))
            else:
                return None
            node = node[key]
            d = d.children[d.keys.index(key)]
        else:
            return None
    return place


def leaf_writer(
    path: tuple[Hashable, ...],
    root: Def,
    leaf: object,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    in_arguments: bool,
) -> Callable[[Any], None] | None:
    """How to store a new value for an input leaf in place (``None``: an argument's own leaf)."""
    if is_variable(leaf):
        if is_ref_backed(leaf):  # into the Ref (checked first by the lift) or the box
            return functools.partial(write_value, leaf)
        return functools.partial(write_value, leaf)
    if in_arguments:
        return None  # the caller's containers are not written (as on the general path)
    place = leaf_place(path, root, args, kwargs)
    if place is None:
        return None
    if place.in_tuple:
        return functools.partial(_write_in_tuple, place.holder, place.key, place.in_tuple)
    return functools.partial(place.holder.__setitem__, place.key)


@dataclasses.dataclass(frozen=True, slots=True)
class TupleItemGetter:
    """Reads a leaf held in tuples at ``holder[key]`` (the tuple is replaced on every write)."""

    key: Hashable
    in_tuple: tuple[int, ...]

    def __call__(self, holder: Mapping[Hashable, object] | list[object]) -> object:
        x = holder[self.key]  # type: ignore[call-overload]
        for i in self.in_tuple:
            x = cast(tuple[object, ...], x)[i]
        return x


def _replaced(
    t: tuple[object, ...], in_tuple: tuple[int, ...], value: object
) -> tuple[object, ...]:
    """``t`` with the item at ``in_tuple`` (keys down nested tuples) set to ``value``."""
    i, rest = in_tuple[0], in_tuple[1:]
    item = _replaced(cast(tuple[object, ...], t[i]), rest, value) if rest else value
    return (*t[:i], item, *t[i + 1 :])


def _write_in_tuple(
    holder: MutableMapping[Hashable, object] | list[object],
    key: Hashable,
    in_tuple: tuple[int, ...],
    value: object,
) -> None:
    """Stores ``value`` in the tuple at ``holder[key]`` by rebuilding that tuple."""
    old = cast(tuple[object, ...], holder[key])  # type: ignore[call-overload]
    holder[key] = _replaced(old, in_tuple, value)  # type: ignore[call-overload]
