"""The groups a transform's leaves fall into: the distinct plain prefixes of its prefix trees.

  >>> from flaxgraph.transforms.aliasing import PrefixSpec
  >>> spec = PrefixSpec("in_axes", lambda x: x is None or isinstance(x, int))
  >>> prefix_keys((0, None, 0), 1, spec=spec)
  [0, None, 1]

See ``docs/design.md``, "The five lift steps" (step 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from flaxgraph.statelib import State
from flaxgraph.transforms.aliasing import PrefixSpec
from flaxgraph.transforms.lift_types import object_prefix
from flaxgraph.variablelib.variable import is_variable


class DonatedKey(NamedTuple):
    """The group key of an input leaf for a donating transform: its plain prefix, and donated."""

    prefix: object
    donated: bool


def donated_keys(keys: Sequence[Any], donates: bool = True) -> list[DonatedKey]:
    """Each key kept and (if ``donates``) donated, in that order."""
    return [DonatedKey(k, d) for k in keys for d in ((False, True) if donates else (False,))]


def same_unless_donated(in_key: DonatedKey, out_key: object) -> bool:
    """An ``Inner.same_prefix``: unchanged leaves return as is unless donated or re-prefixed."""
    return not in_key.donated and in_key.prefix == out_key


def prefix_keys(*trees: object, spec: PrefixSpec) -> list[Any]:
    """The distinct plain prefixes in prefix trees (lift types, States too), first seen first."""
    keys: list[Any] = []

    def add(p: object) -> None:
        if not any(same_prefix(p, k) for k in keys):
            keys.append(p)

    def go(t: object) -> None:
        if spec.is_leaf(t):
            add(t)
        elif isinstance(t, State):
            for leaf in t.flat_state().leaves:
                go(leaf.raw_value if is_variable(leaf) else leaf)
        elif spec.lift_type is not None and isinstance(t, spec.lift_type):
            for p in t.prefixes:  # type: ignore[attr-defined]
                go(p)
            leaf = getattr(t, "leaf_prefix", None)
            if leaf is not None and spec.is_leaf(leaf):
                add(leaf)
        elif (mapping := object_prefix(t, graph=False)) is not None:
            for p in mapping.prefixes:
                if spec.is_leaf(p):
                    add(p)
        elif isinstance(t, (tuple, list)):
            for x in t:
                go(x)
        elif isinstance(t, dict):
            for x in t.values():
                go(x)

    for tree in trees:
        go(tree)
    return keys


def same_prefix(a: object, b: object) -> bool:
    """Whether two prefixes are the same group: the same object, or equal and of one type."""
    return a is b or (type(a) is type(b) and a == b)


def group_index(prefix: object, keys: Sequence[Any]) -> int:
    """The position of ``prefix`` among ``keys``; ``ValueError`` if absent (an internal error)."""
    for i, k in enumerate(keys):
        if same_prefix(prefix, k):
            return i
    raise ValueError(f"Internal error: prefix {prefix!r} is not among the groups {keys!r}")


__all__ = ["group_index", "prefix_keys", "same_prefix"]
