"""graphdef_diff: the first path where two GraphDefs differ (``flaxgraph/graphlib/diff.py``)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import pytest
from graphs import corpus_params

import flaxgraph as nnx
from flaxgraph.graphlib.diff import graphdef_diff
from flaxgraph.testing import Block, Node


def model() -> Node:
    return Node(
        w=nnx.Param(jnp.ones(2)), layers=[Block(b=nnx.Param(jnp.ones(1))), Block()], name="net"
    )


G = nnx.graphdef(model())


@pytest.mark.parametrize("make", corpus_params())
def test_equal_graphdefs_have_no_difference(make):
    assert graphdef_diff(nnx.graphdef(make()), nnx.graphdef(make())) is None


def test_exported():
    assert nnx.graphdef_diff is graphdef_diff


def changed(edit) -> nnx.GraphDef:
    m = model()
    edit(m)
    return nnx.graphdef(m)


@pytest.mark.parametrize(
    "edit, expected",
    [
        (
            lambda m: setattr(m.layers[1], "bias", nnx.Param(jnp.ones(1))),
            ".layers[1].bias: missing in the first, a Param in the second",
        ),
        (
            lambda m: delattr(m.layers[0], "b"),
            ".layers[0].b: a Param in the first, missing in the second",
        ),
        (
            lambda m: setattr(m, "w", nnx.BatchStat(jnp.ones(2))),
            ".w: a Param in the first, a BatchStat in the second",
        ),
        (
            lambda m: setattr(m, "w", jnp.ones(2)),
            ".w: a Param in the first, an array in the second",
        ),
        (
            lambda m: setattr(m, "name", "other"),
            ".name: the static value 'net' in the first, the static value 'other' in the second",
        ),
        (
            lambda m: m.layers.append(Block()),
            ".layers[2]: missing in the first, a Block in the second",
        ),
        (
            lambda m: setattr(m, "layers", {"a": 1}),
            ".layers: a list of 2 in the first, a dict of 1 in the second",
        ),
        (
            lambda m: setattr(m, "layers", [Node(b=nnx.Param(jnp.ones(1))), Block()]),
            ".layers[0]: a Block in the first, a Node in the second",
        ),
        (
            lambda m: setattr(m, "w", nnx.Param(jnp.ones(2), out_sharding=("a",))),
            ".w: the Param's metadata differs ({} vs {'out_sharding': ('a',)})",
        ),
    ],
    ids=[
        "added",
        "deleted",
        "variable-kind",
        "variable-to-array",
        "static",
        "appended",
        "container-type",
        "node-type",
        "metadata",
    ],
)
def test_names_the_first_differing_path(edit, expected):
    assert graphdef_diff(G, changed(edit)) == expected


def test_new_shared_reference():
    def share(m):
        m.layers[1] = m.layers[0]

    msg = graphdef_diff(G, changed(share))
    assert msg is not None and msg.startswith(
        ".layers[1]: a Block in the first, a reference to node #"
    )


def test_root_name_prefixes_paths():
    msg = graphdef_diff(changed(lambda m: setattr(m, "extra", 1)), G, root="model")
    assert msg == "model.extra: the static value 1 in the first, missing in the second"


def test_roots_name_the_entries_of_a_root_tuple():
    a = nnx.graphdef(((model(),), {"k": 1}))
    m = model()
    m.extra = nnx.Param(jnp.ones(1))
    b = nnx.graphdef(((m,), {"k": 1}))
    assert graphdef_diff(a, b, roots=("args", "kwargs")) == (
        "args[0].extra: missing in the first, a Param in the second"
    )
    c = nnx.graphdef(((model(),), {"k": 2}))
    assert graphdef_diff(a, c, roots=("args", "kwargs")) == (
        "kwargs['k']: the static value 1 in the first, the static value 2 in the second"
    )


def test_root_types_differ():
    assert (
        graphdef_diff(G, nnx.graphdef(Block()))
        == "<root>: a Node in the first, a Block in the second"
    )
    assert (
        graphdef_diff(G, nnx.graphdef([1]))
        == "<root>: a Node in the first, a list of 1 in the second"
    )


def test_static_values_of_equal_value_but_different_type_differ():
    a, b = nnx.graphdef(Node(n=1)), nnx.graphdef(Node(n=True))
    assert a != b
    assert (
        graphdef_diff(a, b)
        == ".n: the static value 1 in the first, the static value True in the second"
    )


def test_dict_key_order():
    a, b = nnx.graphdef({"a": 1, "b": 2}), nnx.graphdef({"b": 2, "a": 1})
    assert graphdef_diff(a, b) == "<root>: the keys are in another order"


@dataclasses.dataclass
class Tagged:
    x: jax.Array
    tag: str = dataclasses.field(metadata={"static": True})


jax.tree_util.register_dataclass(Tagged)


def test_pytree_auxiliary_data_differs():
    # Regression: a difference only in a pytree's auxiliary data (its treedef) was
    # reported as "the GraphDefs differ (leaf order)" with no path.
    a = nnx.graphdef({"p": Tagged(jnp.ones(1), "a")})
    b = nnx.graphdef({"p": Tagged(jnp.ones(1), "b")})
    msg = graphdef_diff(a, b)
    assert msg is not None and msg.startswith("['p']: the Tagged's pytree structure differs")


def test_cycle_and_reference_indices():
    a = Node(w=nnx.Param(jnp.ones(1)))
    a.me = a
    b = Node(w=nnx.Param(jnp.ones(1)))
    b.me = Node()
    msg = graphdef_diff(nnx.graphdef(a), nnx.graphdef(b))
    assert msg == ".me: a reference to node #0 (Node) in the first, a Node in the second"
