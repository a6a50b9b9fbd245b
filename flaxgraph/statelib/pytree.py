"""A ``State`` as a JAX pytree: its entries are the children, its cached keys tuple the aux data.

Why the keys are cached: the package README. Source: Flax NNX 0.12 ``nnx.State`` (a
pytree registered with keys).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any

import jax


class _Keys(tuple[Any, ...]):
    """A State's keys as aux data (equal to the plain tuple), with its children's ``DictKey``s."""

    dict_keys: tuple[Any, ...] = ()


def state_pytree_functions(
    state_cls: type,
) -> tuple[Callable[[Any], Any], Callable[[Any, Iterable[Any]], Any], Callable[[Any], Any]]:
    """``(flatten_with_keys, unflatten, flatten)`` registering ``state_cls`` as a keyed pytree."""
    set_mapping = state_cls._mapping.__set__  # type: ignore[attr-defined]
    set_keys = state_cls._state_keys.__set__  # type: ignore[attr-defined]
    new = object.__new__

    def keys_of(state: Any) -> _Keys:
        # cached on the State while its keys stay the same
        keys = tuple(state._mapping)
        try:
            cached = state._state_keys
        except AttributeError:  # a State built without __init__
            cached = None
        if cached is None or cached != keys:
            cached = _Keys(keys)
            cached.dict_keys = tuple(map(jax.tree_util.DictKey, keys))
            set_keys(state, cached)
        typed: _Keys = cached
        return typed

    def flatten_with_keys(state: Any) -> object:
        keys = keys_of(state)
        return list(zip(keys.dict_keys, state._mapping.values())), keys

    def flatten(state: Any) -> tuple[tuple[object, ...], tuple[Hashable, ...]]:
        # keys_of inlined for the common case (the cached keys still hold).
        mapping = state._mapping
        keys = tuple(mapping)
        try:
            cached = state._state_keys
        except AttributeError:
            cached = None
        if cached is not None and cached == keys:
            return tuple(mapping.values()), cached
        return tuple(mapping.values()), keys_of(state)

    def unflatten(keys: tuple[Any, ...], children: Iterable[Any]) -> object:
        state: object = new(state_cls)
        set_mapping(state, dict(zip(keys, children)))
        set_keys(state, keys if type(keys) is _Keys else None)
        return state

    return flatten_with_keys, unflatten, flatten


__all__ = ["state_pytree_functions"]
