"""What ``argnums`` of ``grad`` (and ``vjp``, ``jvp``, ``custom_vjp``) select.

Source: ``jax.grad``'s argnums; ``DiffState`` per the "JAX-style NNX Transforms"
FLIP flax#4107; Flax NNX 0.12 ``nnx.grad``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from flaxgraph.filterlib import Filter
from flaxgraph.graphlib.registry import (
    REGISTRY,
    VARIABLE,
    is_node_module,
    is_node_or_variable,
    node_impl,
)
from flaxgraph.modes import DEFAULT, Mode
from flaxgraph.statelib import State
from flaxgraph.transforms.aliasing import PrefixSpec
from flaxgraph.transforms.lift import Inner
from flaxgraph.transforms.lift_types import DiffState, LiftType
from flaxgraph.typing import MISSING, PathParts
from flaxgraph.variablelib.variable import Param, is_variable


class Diff(LiftType):
    """``{filter: True, ...: False}``; for raw leaves outside objects: True."""

    __slots__ = ()
    distributes = True
    leaf_prefix = True

    def __init__(self, filter: Filter):
        super().__init__([(filter, True), (..., False)])


def _is_bool(p: object) -> bool:
    return isinstance(p, bool)


DIFF_SPEC = PrefixSpec("argnums", _is_bool, Diff)
AUX_SPEC = PrefixSpec("outputs", lambda p: p is None, None)
DIFF_KEYS = (True, False)


def _always(a: object, b: object) -> bool:
    return True


def output_inner(f: Callable[..., Any], mode: Mode) -> Inner:
    """Steps 3-4 for a transform whose output has no prefix (``grad``, ``remat``, ``vjp``…)."""
    return Inner(f, AUX_SPEC, [None], same_prefix=_always, mode=mode)


def _int_prefix(arg: Any) -> Any:
    """An int argnum's prefix with graph updates (see the module docstring)."""
    if isinstance(arg, State) or is_variable(arg):
        return True
    if type(arg) in (list, tuple):
        return type(arg)(_int_prefix(a) for a in arg)
    if type(arg) is dict:
        return {k: _int_prefix(v) for k, v in arg.items()}
    return Diff(Param)


def diff_prefix(
    argnums: Any, n_args: int, mode: Mode = DEFAULT, args: tuple[Any, ...] | None = None
) -> tuple[tuple[Any, ...], tuple[int, ...]]:
    """``argnums`` (ints and DiffStates) -> per-argument prefixes and the argnums."""
    single = isinstance(argnums, (int, DiffState))
    items = (argnums,) if single else tuple(argnums)
    prefixes: list[Any] = [False] * n_args
    nums = []
    mapping: Diff | bool
    for item in items:
        if isinstance(item, DiffState):
            num, mapping = item.argnum, Diff(item.filter)
        elif isinstance(item, int):
            if not mode.updates:
                num, mapping = item, True
            elif args is not None and -n_args <= item < n_args:
                num, mapping = item, _int_prefix(args[item])
            else:
                num, mapping = item, Diff(Param)
        else:
            raise TypeError(
                f"argnums entries must be ints or nnx.DiffState, got {type(item).__name__}."
            )
        if not -n_args <= num < n_args:
            raise ValueError(
                f"argnums {num} is out of range for a function called with {n_args} "
                "positional arguments."
            )
        prefixes[num % n_args] = mapping
        nums.append(num % n_args)
    return tuple(prefixes), tuple(nums)


def check_argnums(argnums: object, transform: str) -> None:
    """Checks ``argnums`` holds ints or ``DiffState``s (``ValueError`` for an object)."""
    items = argnums if isinstance(argnums, (tuple, list)) else (argnums,)
    for i, item in enumerate(items):
        where = "argnums" if items is not argnums else f"argnums[{i}]"
        if is_node_or_variable(item):
            raise ValueError(
                f"nnx.{transform} got a {type(item).__name__} as {where}: Graph nodes are not "
                "allowed as prefixes; argnums says which arguments to differentiate.\nFix: "
                "pass the object as an argument and its position in argnums (an int, or "
                "nnx.DiffState(position, filter) to pick a sub-state)."
            )
        if not isinstance(item, (int, DiffState)) or isinstance(item, bool):
            raise TypeError(
                f"nnx.{transform}: argnums entries must be ints or nnx.DiffState, but "
                f"{where} is a {type(item).__name__}."
            )


def tangent_at(tangents: tuple[Any, ...], path: PathParts, primal_value: Any) -> object:
    """The (co)tangent of the primal leaf at ``path`` in per-argument trees; zero if absent."""
    node: Any = tangents[path[1]]  # type: ignore[call-overload]  # path[1] is the argnum
    for key in path[2:]:
        if isinstance(node, State) or type(node) in (dict, list, tuple):
            try:
                node = node[key]
            except (KeyError, IndexError):
                node = None
        elif is_node_module(node):  # attributes, and int keys (nnx.List items)
            child = node_impl(node).get_child(node, key)
            node = None if child is MISSING else child
        else:
            node = None
        if node is None:
            break
    if node is None:
        return jax.numpy.zeros_like(primal_value)
    return node.raw_value if REGISTRY.kind_of(node) is VARIABLE else node
