"""Flax's questions about a value (``flax.nnx.graph.is_node``, ``is_pytree_node``,
``is_graph_node``, ``is_node_leaf``, ``is_node_module``, ``get_node_impl``…) asked of the
real Flax NNX 0.12.8 and of flaxgraph in one process, over every kind of value a program
holds: ``None``, Variables and their subclasses, Modules, Pytrees (``pytree=True`` and
``False``), ``nnx.List``/``nnx.Dict``, ``Rngs``/``RngStream``, plain and named containers,
``State``, arrays, scalars, strings, functions, dataclasses (plain, registered, static),
custom pytrees, ``jax.Ref`` — and, as a property, every value of the oracle's
``attribute_values`` strategy.

The answers must be equal. A returned implementation cannot be the same object, so what a
caller can observe of it is compared: whether there is one, its class name, the name of its
``.type``, for a pytree node's implementation what its ``flatten`` gives and that its
``unflatten`` rebuilds the value, and for a graph node's the children its ``node_dict``
lists. A type registered with Flax's ``register_graph_node_type`` functions is split,
merged and updated the same way by both libraries.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx as flax_nnx
from flax.nnx import graph as flax_graph
from hypothesis import given

import flaxgraph as nnx
from flaxgraph import graph
from flaxgraph.flax_surface.node_protocol import flax_view
from flaxgraph.graphlib.registry import NODE, REGISTRY
from flaxgraph.testing.strategies import attribute_values
from flaxgraph.testing.values import Description, canonical


@dataclasses.dataclass
class PlainConfig:
    n: int = 1


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class RegisteredConfig:
    x: Any = 1.0


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class StaticConfig:
    n: int = 1


class CustomPytree:
    def __init__(self, a: Any) -> None:
        self.a = a

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CustomPytree) and other.a == self.a

    __hash__ = None  # type: ignore[assignment]


jax.tree_util.register_pytree_node(
    CustomPytree, lambda c: ((c.a,), None), lambda _, children: CustomPytree(*children)
)

Pair = collections.namedtuple("Pair", "a b")


class TupleSub(tuple):  # type: ignore[type-arg]
    """A tuple subclass that is no named tuple (a JAX leaf, a pytree node to Flax)."""


def _classes(lib: Any) -> dict[str, type]:
    class Block(lib.Module):
        def __init__(self) -> None:
            self.w = lib.Param(jnp.ones(2))
            self.n = 3

    class Box(lib.Pytree):
        def __init__(self) -> None:
            self.a = 1

    class Opaque(lib.Module, pytree=False):
        def __init__(self) -> None:
            self.a = 1

    class MyParam(lib.Param):
        pass

    return {"Block": Block, "Box": Box, "Opaque": Opaque, "MyParam": MyParam}


VALUES: dict[str, Callable[[Any, dict[str, type]], Any]] = {
    "None": lambda lib, c: None,
    "Variable": lambda lib, c: lib.Variable(jnp.ones(2)),
    "Param": lambda lib, c: lib.Param(jnp.ones(2)),
    "BatchStat": lambda lib, c: lib.BatchStat(1.0),
    "Param subclass": lambda lib, c: c["MyParam"](jnp.zeros(1)),
    "Module": lambda lib, c: c["Block"](),
    "Linear": lambda lib, c: lib.Linear(2, 2, rngs=lib.Rngs(0)),
    "Pytree": lambda lib, c: c["Box"](),
    "pytree=False Module": lambda lib, c: c["Opaque"](),
    "nnx.List": lambda lib, c: lib.List([1, lib.Param(jnp.ones(1))]),
    "nnx.Dict": lambda lib, c: lib.Dict(a=1),
    "Rngs": lambda lib, c: lib.Rngs(0),
    "RngStream": lambda lib, c: lib.Rngs(0).default,
    "State": lambda lib, c: lib.State({"b": 1, "a": jnp.ones(1)}),
    "list": lambda lib, c: [1, jnp.ones(1)],
    "empty list": lambda lib, c: [],
    "tuple": lambda lib, c: (1, 2.0),
    "dict": lambda lib, c: {"b": 1, "a": 2},
    "named tuple": lambda lib, c: Pair(1, 2),
    "tuple subclass": lambda lib, c: TupleSub((1, 2)),
    "OrderedDict": lambda lib, c: collections.OrderedDict(b=1, a=2),
    "defaultdict": lambda lib, c: collections.defaultdict(int, a=1),
    "list of Modules": lambda lib, c: [c["Block"]()],
    "jax array": lambda lib, c: jnp.ones(2),
    "numpy array": lambda lib, c: np.ones(2),
    "typed key": lambda lib, c: jax.random.key(0),
    "raw key": lambda lib, c: jax.random.PRNGKey(0),
    "ShapeDtypeStruct": lambda lib, c: jax.ShapeDtypeStruct((2,), jnp.float32),
    "jax.Ref": lambda lib, c: jax.new_ref(jnp.ones(2)),
    "numpy scalar": lambda lib, c: np.float32(1.0),
    "int": lambda lib, c: 1,
    "float": lambda lib, c: 1.5,
    "bool": lambda lib, c: True,
    "complex": lambda lib, c: 1j,
    "str": lambda lib, c: "s",
    "bytes": lambda lib, c: b"x",
    "Ellipsis": lambda lib, c: ...,
    "dtype": lambda lib, c: jnp.float32,
    "function": lambda lib, c: jax.nn.relu,
    "partial": lambda lib, c: functools.partial(max, 1),
    "PartitionSpec": lambda lib, c: jax.sharding.PartitionSpec("a", None),
    "dataclass": lambda lib, c: PlainConfig(),
    "registered dataclass": lambda lib, c: RegisteredConfig(),
    "register_static dataclass": lambda lib, c: StaticConfig(),
    "custom pytree": lambda lib, c: CustomPytree(jnp.ones(1)),
    "class": lambda lib, c: c["Block"],
}

PREDICATES = ("is_node", "is_pytree_node", "is_graph_node", "is_node_leaf", "is_node_module")


def _type_name(t: object) -> str:
    return t.__name__ if isinstance(t, type) else repr(t)


def _impl_view(impl: Any, value: Any) -> Any:
    """What a caller can observe of ``get_node_impl(value)``."""
    if impl is None:
        return None
    view: dict[str, Any] = {"class": type(impl).__name__, "type": _type_name(impl.type)}
    if type(impl).__name__ == "PytreeNodeImpl":
        try:
            children, aux = impl.flatten(value)
        except (ValueError, IndexError):  # a tuple subclass JAX takes as a leaf
            view["flatten raises"] = True  # (Flax: IndexError, flaxgraph: ValueError)
            return view
        view["keys"] = [key for key, _ in children]
        view["children"] = canonical([child for _, child in children])
        view["roundtrip"] = canonical(impl.unflatten(children, aux)) == canonical(value)
        view["can set/pop"] = (impl.set_key is not None, impl.pop_key is not None)
    else:  # a graph node's: its children by key, Flax's `_pytree__` bookkeeping left out
        view["children"] = {
            key: type(child).__name__
            for key, child in impl.node_dict(value).items()
            if not (isinstance(key, str) and key.startswith("_"))
        }
    return view


def answers(module: Any, value: Any) -> dict[str, Any]:
    """Every question of Flax's ``graph`` module about ``value``, as comparable data."""
    out: dict[str, Any] = {name: getattr(module, name)(value) for name in PREDICATES}
    out["is_pytree_node (no graph check)"] = module.is_pytree_node(
        value, check_graph_registry=False
    )
    out["get_node_impl"] = _impl_view(module.get_node_impl(value), value)
    if isinstance(value, type):
        out["is_node_type"] = module.is_node_type(value)
        found = module.get_node_impl_for_type(value)
        out["get_node_impl_for_type"] = None if found is None else _type_name(found.type)
    return out


@pytest.fixture(scope="module")
def classes() -> dict[str, dict[str, type]]:
    return {"flax": _classes(flax_nnx), "flaxgraph": _classes(nnx)}


@pytest.mark.parametrize("kind", list(VALUES))
def test_flax_graph_questions_answer_as_flax(kind: str, classes: dict[str, Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = answers(flax_graph, VALUES[kind](flax_nnx, classes["flax"]))
        ours = answers(graph, VALUES[kind](nnx, classes["flaxgraph"]))
    assert ours == theirs, kind


TYPES = (list, tuple, dict, type(None), int, str, np.ndarray, CustomPytree, PlainConfig)


@pytest.mark.parametrize("t", TYPES, ids=_type_name)
def test_node_type_questions_answer_as_flax(t: type) -> None:
    ours, theirs = graph.get_node_impl_for_type(t), flax_graph.get_node_impl_for_type(t)
    assert graph.is_node_type(t) == flax_graph.is_node_type(t)
    assert (ours is None) == (theirs is None)
    assert (ours and _type_name(ours.type)) == (theirs and _type_name(theirs.type))


def test_state_and_generic_impls_flatten_as_flax() -> None:
    ours = graph.get_node_impl(nnx.State({"b": 1, "a": 2}))
    theirs = flax_graph.get_node_impl(flax_nnx.State({"b": 1, "a": 2}))
    assert ours is not None and theirs is not None
    assert ours.flatten(nnx.State({"b": 1, "a": 2})) == theirs.flatten(
        flax_nnx.State({"b": 1, "a": 2})
    )
    assert graph.get_node_impl_for_type(graph.GenericPytree) is graph.PYTREE_NODE_IMPL


@given(attribute_values())
def test_every_attribute_value_is_answered_as_flax(description: Description) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert answers(graph, description.build()) == answers(flax_graph, description.build())


class Bag:
    """A user's graph node type, registered with Flax's functions in both libraries."""

    def __init__(self, **children: Any) -> None:
        vars(self).update(children)


def _pop_child(bag: Bag, key: str) -> Any:
    return vars(bag).pop(key)


def _init_children(bag: Bag, children: Any) -> None:
    vars(bag).update(children)


BAG_FUNCTIONS = dict(
    flatten=lambda bag: (sorted(vars(bag).items()), type(bag)),
    set_key=setattr,
    pop_key=_pop_child,
    create_empty=lambda bag_type: bag_type(),
    clear=lambda bag: vars(bag).clear(),
    init=_init_children,
)


def _bag_outcome(lib: Any, module: Any, bag_type: type) -> Any:
    bag = bag_type(w=lib.Param(jnp.ones(2)), n=3, shared=None)
    bag.shared = bag.w  # a shared Variable stays shared through split/merge
    graphdef, state = lib.split(bag)
    leaves = [(tuple(path), np.asarray(leaf).tolist()) for path, leaf in lib.to_flat_state(state)]
    copy = lib.merge(graphdef, state)
    state["shared"] = jnp.zeros(2)
    lib.update(bag, state)

    @lib.jit
    def step(b: Any) -> Any:
        b.w.value = b.w.value + 1
        b.n = b.n + 1  # a static child changed inside the transform
        return b.shared.value.sum()

    total = float(step(bag))
    impl = module.get_node_impl(bag)
    return (
        total,
        bag.n,
        leaves,
        copy.n,
        copy.shared is copy.w,
        np.asarray(bag.w.get_value()).tolist(),
        type(impl).__name__,
        sorted(impl.node_dict(bag)),
        module.is_node(bag) and module.is_graph_node(bag) and not module.is_pytree_node(bag),
    )


def test_a_type_registered_with_flax_functions_is_walked_as_in_flax() -> None:
    theirs_type = type("Bag", (Bag,), {})
    ours_type = type("Bag", (Bag,), {})
    flax_graph.register_graph_node_type(theirs_type, **BAG_FUNCTIONS)
    graph.register_graph_node_type(ours_type, **BAG_FUNCTIONS)
    with pytest.raises(ValueError, match="already registered"):
        graph.register_graph_node_type(ours_type, **BAG_FUNCTIONS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = _bag_outcome(flax_nnx, flax_graph, theirs_type)
        ours = _bag_outcome(nnx, graph, ours_type)
    assert ours == theirs
    assert ours[:3] == (2.0, 4, [(("shared",), [1.0, 1.0])]) and ours[5] == [1.0, 1.0]


def test_graph_node_impl_of_an_object_works_as_flax_describes() -> None:
    model = nnx.Dict(w=nnx.Param(jnp.ones(2)), n=3)
    impl = graph.get_node_impl(model)
    assert impl is graph.GRAPH_REGISTRY[nnx.Dict] and isinstance(impl, graph.GraphNodeImpl)
    children, aux = impl.flatten(model)
    empty = impl.create_empty(aux)
    impl.init(empty, children)
    assert impl.node_dict(empty) == impl.node_dict(model)
    impl.set_key(empty, "m", 4)
    assert impl.pop_key(empty, "m") == 4 and "m" not in impl.node_dict(empty)
    impl.clear(empty)
    assert impl.node_dict(empty) == {}


def test_one_register_graph_node_type_and_its_record_is_a_view() -> None:
    # One function at both of flaxgraph's paths (Flax NNX 0.12.8 has it at graphlib only).
    assert nnx.register_graph_node_type is graph.register_graph_node_type
    assert not hasattr(flax_nnx, "register_graph_node_type")
    theirs_type = type("Bag", (Bag,), {})
    ours_type = type("Bag", (Bag,), {})
    flax_graph.register_graph_node_type(theirs_type, **BAG_FUNCTIONS)
    nnx.register_graph_node_type(ours_type, **BAG_FUNCTIONS)
    # The Flax record of a type registered with Flax's functions holds those functions,
    # in both libraries; flaxgraph's is the view of the engine's one record of the type.
    for module, node_type in ((flax_graph, theirs_type), (graph, ours_type)):
        impl = module.GRAPH_REGISTRY[node_type]
        assert [getattr(impl, name) for name in BAG_FUNCTIONS] == list(BAG_FUNCTIONS.values())
    engine = REGISTRY.node_impls()[ours_type]
    assert graph.GRAPH_REGISTRY[ours_type] is flax_view(engine)
    assert ours_type in graph.GRAPH_REGISTRY and len(graph.GRAPH_REGISTRY) == len(
        REGISTRY.node_impls()
    )


def test_is_node_module_is_the_engines_node_kind() -> None:
    # One meaning, one name: graphlib.is_node_module is the engine's NODE kind.
    def values(lib: Any) -> list[Any]:
        return [lib.Dict(), lib.Param(1), [1], None, lib.Rngs(0), jnp.ones(1), 3]

    ours = [graph.is_node_module(v) for v in values(nnx)]
    assert ours == [flax_graph.is_node_module(v) for v in values(flax_nnx)]
    assert ours == [REGISTRY.kind_of(v) is NODE for v in values(nnx)]
