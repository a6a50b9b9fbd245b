"""``jax.Ref``s created inside ``nnx.jit`` and returned.

JAX refuses to return a mutable array reference from a jitted function. A Ref
the function *received* comes back as the caller's own Ref (the lift keeps input
leaves by identity); a Ref it *created* crosses the boundary as its value, boxed
in ``NewRef``, and ``unbox_new_refs`` makes a fresh ``jax.Ref`` of it outside.

Source: Flax NNX 0.12 ``nnx.jit`` (``TestJIT::test_mutable_array_input_output``:
a Ref made inside the function is returned as a ``jax.Ref``).
"""

from __future__ import annotations

from typing import Any

import jax

from flaxgraph.graphlib.registry import _GRAPH_NODE_IMPLS
from flaxgraph.variablelib.refs import is_ref
from flaxgraph.variablelib.variable import Variable


class NewRef:
    """The value of a ``jax.Ref`` created inside a jitted function (a pytree node)."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __repr__(self) -> str:
        return f"NewRef({self.value!r})"


jax.tree_util.register_pytree_node(NewRef, lambda r: ((r.value,), None), lambda _, c: NewRef(c[0]))


def _object(x: Any) -> bool:
    return isinstance(x, Variable) or type(x) in _GRAPH_NODE_IMPLS


def box_new_refs(output: Any, inputs: Any) -> tuple[Any, bool]:
    """``output`` with every raw ``jax.Ref`` not found in ``inputs`` (outside
    objects) replaced by ``NewRef(value)``; and whether there was any."""
    leaves = jax.tree.leaves(output, is_leaf=_object)
    if not any(is_ref(x) for x in leaves):
        return output, False
    known = {id(x) for x in jax.tree.leaves(inputs) if is_ref(x)}
    found = False

    def box(x: Any) -> Any:
        nonlocal found
        if is_ref(x) and id(x) not in known:
            found = True
            return NewRef(x[...])
        return x

    return jax.tree.map(box, output, is_leaf=_object), found


def unbox_new_refs(result: Any) -> Any:
    """``result`` with every ``NewRef`` made a new ``jax.Ref`` of its value."""

    def unbox(x: Any) -> Any:
        return jax.new_ref(x.value) if isinstance(x, NewRef) else x

    return jax.tree.map(unbox, result, is_leaf=lambda x: isinstance(x, NewRef) or _object(x))
