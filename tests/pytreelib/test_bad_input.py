"""Bad input: a value flaxgraph cannot classify as data or static (issue 29, "Bad input").

A value whose type is registered as a JAX pytree but whose flatten raises cannot be
walked as data nor known to be static. Assigned to an attribute, it raises
``UnclassifiableValueError`` (a ``TypeError``) naming the attribute (``Class.name``), the
value's type, JAX's error, and how to mark it; Flax 0.12.8 fails at assignment too (with
JAX's own error). Marked ``nnx.static(...)`` it is kept whole and everything works.
"""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import nnx as flax_nnx

import flaxgraph as nnx
from flaxgraph.errors import UnclassifiableValueError


class BrokenPytree:
    """A type registered with JAX whose flatten fails."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BrokenPytree)

    def __hash__(self) -> int:
        return 0


def _broken_flatten(x: BrokenPytree) -> Any:
    raise RuntimeError("cannot flatten this")


jax.tree_util.register_pytree_node(BrokenPytree, _broken_flatten, lambda aux, c: BrokenPytree())


class Holder(nnx.Module):
    def __init__(self, value: Any) -> None:
        self.w = nnx.Param(jnp.ones(2))
        self.layer = value


def test_an_unclassifiable_attribute_names_its_path_type_and_marks() -> None:
    with pytest.raises(UnclassifiableValueError) as caught:
        Holder(BrokenPytree())
    message = str(caught.value)
    for part in ("Holder.layer", "BrokenPytree", "RuntimeError: cannot flatten this"):
        assert part in message
    assert "nnx.static(value)" in message and "nnx.data(value)" in message
    assert isinstance(caught.value, TypeError)
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert isinstance(caught.value.value, BrokenPytree)


def test_flax_fails_on_it_at_assignment_too() -> None:
    class FlaxHolder(flax_nnx.Module):
        def __init__(self) -> None:
            self.layer = BrokenPytree()

    with pytest.raises(RuntimeError, match="cannot flatten this"):
        FlaxHolder()


def test_marked_static_it_is_kept_whole_through_split_jit_and_tree_leaves() -> None:
    m = Holder(nnx.static(BrokenPytree()))
    graphdef, state = nnx.split(m)
    assert len(jax.tree.leaves(state)) == 1
    back = nnx.merge(graphdef, state)
    assert isinstance(back.layer, BrokenPytree)
    assert float(nnx.jit(lambda h: h.w[...].sum())(m)) == 2.0
    assert len(jax.tree.leaves(m)) == 1


@pytest.mark.parametrize(
    ("value", "where"),
    [([1, BrokenPytree()], "Holder.layer[1]"), ({"a": (BrokenPytree(),)}, "Holder.layer['a'][0]")],
)
def test_inside_plain_containers_the_path_names_the_item(value: Any, where: str) -> None:
    with pytest.raises(UnclassifiableValueError, match=re.escape(where)):
        Holder(value)
