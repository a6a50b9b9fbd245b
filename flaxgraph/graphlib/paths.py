"""Readable paths into graphs for error messages (``model.layers[0].kernel``), made on error."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from flaxgraph.graphlib.registry import (
    DICT,
    NODE,
    PYTREE,
    REGISTRY,
    SEQUENCE,
    flatten_pytree,
    node_impl,
)
from flaxgraph.typing import MISSING


def path_str(root_name: str, root: object, keys: Sequence[Hashable]) -> str:
    """Formats ``keys`` from ``root`` as Python would reach it, e.g. ``args[0]['a'].kernel``.

    Args:
      root_name: how to call the root (``'model'``, ``'args'``, ``'output'``).
      root: the root value, walked to know whether each key is an attribute.
      keys: the path.
    """
    out = [root_name]
    node: object = root
    for key in keys:
        if REGISTRY.kind_of(node) is NODE:
            out.append(step_str(key, True))
            node = node_impl(node).get_child(node, key)
            node = None if node is MISSING else node
        else:
            out.append(f"[{key!r}]")
            node = _child(node, key)
    return "".join(out)


def step_str(key: Hashable, attr: bool) -> str:
    """One step of a path: ``.key`` for an attribute named like an identifier, else ``[key!r]``."""
    return f".{key}" if attr and isinstance(key, str) and key.isidentifier() else f"[{key!r}]"


def keys_str(keys: Sequence[Hashable]) -> str:
    """Formats a path without a root, for States: ``layers/0/kernel``."""
    return "/".join(str(k) for k in keys) if keys else "<root>"


def _child(node: Any, key: Hashable) -> object:
    try:
        kind = REGISTRY.kind_of(node)
        if kind is SEQUENCE or kind is DICT:
            return node[key]
        if kind is PYTREE:
            return dict(flatten_pytree(node)[0]).get(key)
        return node[key]
    except Exception:
        return None
