"""The one classification of the graph engine (``graphlib/registry.py``).

Properties: the kind remembered for a type is the kind a fresh decision gives for every
value met in a generated graph, and it agrees with the record the general walk writes for
that value; unit checks for what the per-type memory must not hide (a Tracer standing for a
Ref, a type registered after it was classified).
"""

from __future__ import annotations

import collections
import dataclasses
import warnings
from typing import Any

import jax
import jax.numpy as jnp
from hypothesis import given

import flaxgraph as nnx
from flaxgraph.graphlib.graphdefs import (
    ArrayDef,
    ContainerDef,
    NodeDef,
    NodeRef,
    StaticDef,
    VariableDef,
)
from flaxgraph.graphlib.registry import (
    REGISTRY,
    Kind,
    NodeRegistry,
    NodeTypeImpl,
    children_of,
)
from flaxgraph.graphlib.walk import flatten_with_paths
from flaxgraph.testing import graphs


def fresh_kind(x: Any) -> Kind:
    """The kind a registry that has remembered nothing gives ``x``."""
    fresh = NodeRegistry()
    fresh.impls.update(REGISTRY.impls)
    return fresh.classify(x)


RECORD_KINDS = {
    NodeDef: {Kind.NODE},
    VariableDef: {Kind.VARIABLE},
    NodeRef: {Kind.NODE, Kind.VARIABLE, Kind.REF},
    ContainerDef: {Kind.SEQUENCE, Kind.DICT, Kind.PYTREE},
    ArrayDef: {Kind.ARRAY, Kind.DATA_LEAF, Kind.REF},
    StaticDef: {Kind.CONSTANT, Kind.STATIC, Kind.STATIC_LEAF},
}


def walk_with_records(x: Any, d: Any, out: list[tuple[Any, Any]]) -> None:
    """Pairs each value of the graph with the record the general walk wrote for it."""
    out.append((x, d))
    if type(d) is NodeDef:
        items = dict(REGISTRY.impls[type(x)].flatten(x)[0])
        for k, c in d.attributes:
            walk_with_records(items[k], c, out)
    elif type(d) is ContainerDef:
        children = dict(children_of(x))
        for k, c in zip(d.keys, d.children):
            walk_with_records(children[k], c, out)


@given(graphs(marks=True))
def test_the_remembered_kind_is_a_fresh_decision_and_matches_the_walks_record(g: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graphdef, _ = flatten_with_paths(g)
    pairs: list[tuple[Any, Any]] = []
    walk_with_records(g, graphdef.root, pairs)
    for x, d in pairs:
        kind = REGISTRY.kind_of(x)
        assert kind is fresh_kind(x)
        assert kind is REGISTRY.kind_of(x)  # and it stays so once remembered
        assert kind in RECORD_KINDS[type(d)], (x, d)


def test_kinds_of_common_values() -> None:
    m = nnx.Linear(2, 3, rngs=nnx.Rngs(0))

    @dataclasses.dataclass(frozen=True)
    class Config:
        size: int

    cases = [
        (m, Kind.NODE),
        (m.kernel, Kind.VARIABLE),
        ([1], Kind.SEQUENCE),
        ((1,), Kind.SEQUENCE),
        ({"a": 1}, Kind.DICT),
        (nnx.State({}), Kind.PYTREE),
        (jnp.ones(2), Kind.ARRAY),
        (jnp.float32(1), Kind.ARRAY),
        (jax.ShapeDtypeStruct((2,), jnp.float32), Kind.STATIC),
        (3, Kind.CONSTANT),
        (None, Kind.CONSTANT),
        ("a", Kind.CONSTANT),
        (jax.nn.relu, Kind.STATIC),
        (Config(1), Kind.STATIC),
        (jax.new_ref(jnp.ones(1)), Kind.REF),
    ]
    assert [REGISTRY.kind_of(x) for x, _ in cases] == [k for _, k in cases]
    assert all(kind for kind in Kind)  # a remembered kind is never falsy


def test_a_tracer_is_classified_per_value() -> None:
    # Inside one trace an array and a Ref are Tracers of one type; only their abstract
    # values tell them apart, so a Tracer's kind is remembered per abstract-value type.
    found: list[Any] = []

    @jax.jit
    def f(x: jax.Array) -> jax.Array:
        r = jax.new_ref(x)
        found.extend([REGISTRY.kind_of(x), REGISTRY.kind_of(r), REGISTRY.kind_of(x)])
        return x

    f(jnp.ones(2))
    assert found == [Kind.ARRAY, Kind.REF, Kind.ARRAY]
    assert not any(issubclass(t, jax.core.Tracer) for t in REGISTRY.kinds)


class Box:
    def __init__(self) -> None:
        self.items: dict[str, Any] = {}


BOX_IMPL = NodeTypeImpl(
    Box,
    lambda b: (sorted(b.items.items()), None),
    lambda metadata, trace=None: Box(),
    lambda b, items, metadata: b.items.update(items),
    lambda b, k: b.items[k],
    lambda b, k, v: b.items.__setitem__(k, v),
    lambda b, k: b.items.pop(k),
)


def test_registering_a_node_type_forgets_its_remembered_kind() -> None:
    registry = NodeRegistry()
    assert registry.kind_of(Box()) is Kind.STATIC
    registry.register(BOX_IMPL)
    assert registry.kind_of(Box()) is Kind.NODE
    assert REGISTRY.kind_of(Box()) is Kind.STATIC  # another registry is unaffected


def test_the_memory_of_kinds_is_bounded() -> None:
    class Small(NodeRegistry):
        MAX_KINDS = 3

    registry = Small()
    made = [collections.namedtuple(f"T{i}", "a")(1) for i in range(10)]
    assert [registry.kind_of(x) for x in made] == [Kind.PYTREE] * 10
    assert 0 < len(registry.kinds) <= 3


def test_a_class_registered_as_a_jax_pytree_after_first_use_is_a_pytree() -> None:
    @dataclasses.dataclass(frozen=True)
    class Late:
        a: Any

    class Model(nnx.Module):
        def __init__(self) -> None:
            self.late = nnx.static(Late(2))

    model = Model()
    _, state = nnx.split(model)  # the engine meets Late as a static value
    assert len(nnx.to_flat_state(state)) == 0
    assert REGISTRY.kind_of(Late(1)) is Kind.STATIC
    jax.tree_util.register_pytree_node(Late, lambda x: ((x.a,), None), lambda _, c: Late(*c))
    assert REGISTRY.kind_of(Late(1)) is Kind.PYTREE
    model.late = nnx.data(Late(jnp.ones(2)))
    _, state = nnx.split(model)
    assert [p for p, _ in nnx.to_flat_state(state)] == [("late", 0)]
