"""The conformance matrix: every corpus graph under every transform, identity-like.

``docs/design.md`` ("Tests"): every corpus graph (``tests/graphs.py``) under every transform
with an identity-like function behaves as the eager call. Here that means:

* **outputs**: the transformed call returns what the eager call returns on a
  clone, up to isomorphism, *and* every returned object is the caller's own
  object at the same place (checked by comparing the ``(graph, output)`` pairs
  in one lockstep walk, which pairs objects one-to-one);
* **objects unchanged**: after the call, the caller's graph holds the same
  objects at the same paths, with the same metadata and the same array objects
  (equal arrays, for transforms that send every leaf through JAX: ``Lift.new_leaves``);
* **sharing preserved**: the graph is still isomorphic to a clone taken before.

Transforms that return something else than their function's output have their
own check against an oracle computed here with plain JAX: ``grad``,
``value_and_grad``, ``vjp`` and ``jvp`` (a loss of the graph's Params, compared
with ``jax.grad``/``jax.vjp``/``jax.jvp`` of the same loss written on a plain
list of arrays) and ``eval_shape`` (the graph with every array replaced by its
``jax.ShapeDtypeStruct``).

Adding a transform is one line in ``LIFTS`` (a ``Lift`` mapping a function to
its transformed version, called with the same argument) or in ``SPECIAL`` (a
check of its own).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from graphs import CORPUS

import flaxgraph as nnx
from flaxgraph.graphlib.registry import (
    DataLeaf,
    StaticLeaf,
    get_graph_node_impl,
    is_node_module,
    is_node_or_variable,
)
from flaxgraph.testing import assert_graphs_equal

F = Callable[[Any], Any]


def objects_of(root: Any) -> list[Any]:
    """Every graph node and Variable reachable from ``root``, each once."""
    return [v for _, v in nnx.iter_graph(root) if is_node_or_variable(v)]


# -- identity-like functions: (make the argument from the graph, the function) -------------------


def identity(x: Any) -> Any:
    return x


def with_sub_objects(m: Any) -> Any:
    return m, objects_of(m)


def nothing(m: Any) -> None:
    return None


# (argument from the graph, function). Loop bodies must return their argument's
# structure, so they get the sub-objects in the carry instead of returning them.
CARRY_FUNCTIONS: dict[str, tuple[F, F]] = {
    "returns_argument": (identity, identity),
    "returns_argument_and_sub_objects": (with_sub_objects, identity),
}
FUNCTIONS: dict[str, tuple[F, F]] = {
    "returns_argument": (identity, identity),
    "returns_sub_objects": (identity, with_sub_objects),
    "touches_nothing": (identity, nothing),
}


# -- the transforms ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Lift:
    """How to run a function under one transform.

    Attributes:
      apply: ``apply(f)`` is ``f`` transformed, called with what ``f`` takes.
      carry: the function must return its argument's structure (a loop body).
      new_leaves: every leaf goes through the JAX transform and may come back as a
        new JAX array (``lax.cond``, loops, ``pmap``): values must be unchanged but
        not the array objects, and NumPy arrays or ``nnx.data`` scalars may come
        back as JAX arrays, as ``jax.lax.cond`` returns them. Otherwise unchanged
        leaves are not written back, so the caller keeps the very same arrays.
    """

    apply: Callable[[F], F]
    carry: bool = False
    new_leaves: bool = False


LIFTS: dict[str, Lift] = {
    "jit": Lift(lambda f: nnx.jit(f)),
    "remat": Lift(lambda f: nnx.remat(f)),
    "cond": Lift(lambda f: lambda x: nnx.cond(jnp.array(False), f, f, x), new_leaves=True),
    "switch": Lift(lambda f: lambda x: nnx.switch(1, [f, f, f], x), new_leaves=True),
    "fori_loop_0": Lift(
        lambda f: lambda x: nnx.fori_loop(0, 0, lambda i, c: f(c), x), carry=True, new_leaves=True
    ),
    "fori_loop_3": Lift(
        lambda f: lambda x: nnx.fori_loop(0, 3, lambda i, c: f(c), x), carry=True, new_leaves=True
    ),
    "vmap_broadcast": Lift(lambda f: nnx.vmap(f, in_axes=None, out_axes=None, axis_size=2)),
    "pmap_broadcast": Lift(
        lambda f: (
            lambda x: nnx.pmap(lambda a, i: f(a), in_axes=(None, 0), out_axes=None)(
                x, jnp.zeros(jax.local_device_count())
            )
        ),
        new_leaves=True,
    ),
    "shard_map_replicated": Lift(
        lambda f: nnx.shard_map(
            f,
            mesh=jax.sharding.Mesh(jax.devices()[:1], ("x",)),
            in_specs=(jax.sharding.PartitionSpec(),),
            out_specs=jax.sharding.PartitionSpec(),
        ),
        # With graph updates the arguments' arrays come back placed on the mesh
        # (NamedSharding), as in Flax NNX 0.12: equal values, new array objects.
        new_leaves=True,
    ),
    "scan_carry_3": Lift(
        lambda f: nnx.scan(f, in_axes=nnx.Carry, out_axes=nnx.Carry, length=3),
        carry=True,
        new_leaves=True,
    ),
    # (No broadcast-output scan: scan's out_axes may not be None, as in Flax NNX 0.12.)
    "while_loop_3": Lift(
        lambda f: (
            lambda x: nnx.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, f(c[1])), (0, x))[1]
        ),
        carry=True,
        new_leaves=True,
    ),
}


# -- leaves, snapshots: the caller's objects are unchanged ---------------------------------------


def is_array(x: Any) -> bool:
    return isinstance(x, (jax.Array, np.ndarray, np.generic, jax.ShapeDtypeStruct))


def map_leaves(root: Any, fn: Callable[[Any], Any]) -> Any:
    """A clone of ``root`` with ``fn`` applied to every array leaf: Variable values,
    arrays held by nodes (directly or in containers) and ``nnx.data`` scalars."""

    def map_arrays(x: Any) -> Any:
        return jax.tree.map(lambda y: fn(y) if is_array(y) else y, x, is_leaf=is_node_or_variable)

    copy = nnx.clone(root)
    for _, v in list(nnx.iter_graph(copy)):
        if isinstance(v, nnx.Variable):
            v.value = map_arrays(v.raw_value)
        elif is_node_module(v):
            impl = get_graph_node_impl(v)
            assert impl is not None
            for key, child in list(impl.flatten(v)[0]):
                if type(child) is DataLeaf:
                    impl.set_child(v, key, fn(jnp.asarray(child.value)))
                elif type(child) is not StaticLeaf and not is_node_or_variable(child):
                    impl.set_child(v, key, map_arrays(child))
    return copy


def as_jax(root: Any) -> Any:
    """``root`` as a transform returning every leaf leaves it: JAX arrays everywhere."""
    return map_leaves(root, jnp.asarray)


def abstract(root: Any) -> Any:
    """``root`` as ``eval_shape`` returns it: every array a ShapeDtypeStruct."""
    return map_leaves(root, lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype))


def snapshot(root: Any) -> list[tuple[Any, ...]]:
    """Everything reachable, by path: nodes and Variables (by identity), Variable
    metadata, array leaves, containers by type and size, static values."""
    entries: list[tuple[Any, ...]] = []
    for path, v in nnx.iter_graph(root):
        if type(v) is DataLeaf:  # an nnx.data attribute: a leaf, even a Python scalar
            entries.append((path, "leaf", v.value))
        elif type(v) is StaticLeaf:
            entries.append((path, "static", v.value))
        elif isinstance(v, nnx.Variable):
            entries.append((path, "variable", v, dict(v._var_metadata)))
            entries.extend(
                ((*path, "value", i), "leaf", leaf)
                for i, leaf in enumerate(jax.tree.leaves(v.raw_value))
            )
        elif is_node_or_variable(v):
            entries.append((path, "node", v))
        elif is_array(v):
            entries.append((path, "leaf", v))
        elif type(v) in (list, tuple, dict):
            entries.append((path, type(v), len(v)))
        else:
            entries.append((path, "static", v))
    return entries


def plain(x: Any) -> np.ndarray:
    if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    return np.asarray(x)


def assert_unchanged(before: list[tuple[Any, ...]], root: Any, *, same_leaves: bool) -> None:
    """The graph has the same nodes and Variables at the same paths, the same metadata,
    containers and static values; leaves are the same objects (``same_leaves``) or
    equal values."""
    after = snapshot(root)
    assert [e[:2] for e in after] == [e[:2] for e in before], "the graph's layout changed"
    for (path, kind, *old), (_, _, *new) in zip(before, after):
        if kind in ("node", "variable"):
            assert new[0] is old[0], f"at {path}: {old[0]!r} was replaced by {new[0]!r}"
            assert new[1:] == old[1:], f"at {path}: metadata changed"
        elif kind == "leaf" and same_leaves:
            assert new[0] is old[0], f"at {path}: {old[0]!r} was replaced by {new[0]!r}"
        elif kind == "leaf":
            a, b = plain(old[0]), plain(new[0])
            assert a.shape == b.shape and np.array_equal(a, b), f"at {path}: value changed"
        else:
            assert type(new[0]) is type(old[0]) and new[0] == old[0], f"at {path}: changed"


# -- the identity-like part of the matrix -------------------------------------------------------


def check_identity_like(graph: Any, lift: Lift) -> None:
    # With new_leaves, leaf classes may differ (a NumPy array or an nnx.data scalar
    # may come back as a JAX array): both sides are compared with JAX leaves.
    normal = as_jax if lift.new_leaves else identity
    functions = CARRY_FUNCTIONS if lift.carry else FUNCTIONS
    for name, (make_input, f) in functions.items():
        eager_graph = nnx.clone(graph)
        eager_out = f(make_input(eager_graph))
        reference = nnx.clone(graph)
        before = snapshot(graph)
        out = lift.apply(f)(make_input(graph))
        try:
            assert_unchanged(before, graph, same_leaves=not lift.new_leaves)
            assert_graphs_equal(normal((graph, out)), normal((eager_graph, eager_out)))
            assert_graphs_equal(normal(graph), normal(reference))
        except AssertionError as e:
            raise AssertionError(f"with the function {name!r}: {e}") from None
        if f is identity and make_input is identity:
            assert out is graph


GRAPHS = list(CORPUS)


def matrix(names: list[str]) -> list[Any]:
    return [pytest.param(g, t, id=f"{g}-{t}") for g, t in itertools.product(GRAPHS, names)]


@pytest.mark.parametrize(("graph_name", "transform"), matrix(list(LIFTS)))
def test_identity_like_functions_behave_as_the_eager_call(graph_name: str, transform: str) -> None:
    check_identity_like(CORPUS[graph_name](), LIFTS[transform])


# -- autodiff: compared with plain JAX on a list of arrays -------------------------------------


def params_of(root: Any) -> list[Any]:
    return [v for v in objects_of(root) if isinstance(v, nnx.Param)]


def pure_loss(values: list[Any]) -> Any:
    """The loss on plain arrays: what ``loss`` computes on a graph's Params."""
    return sum((jnp.sum(jnp.sin(v)) for v in values), jnp.zeros((), jnp.float32))


def loss(root: Any) -> Any:
    return pure_loss([p.value for p in params_of(root)])


def resolve(root: Any, path: tuple[Any, ...]) -> Any:
    """The value at a State path, walked with plain attribute and item access."""
    x = root
    for key in path:
        x = getattr(x, key) if isinstance(key, str) and isinstance(x, nnx.Pytree) else x[key]
    return x


def assert_grads(grads: Any, root: Any, expected: dict[int, Any]) -> None:
    """``grads`` (a State) holds one Param per Param of ``root`` (by identity, via its
    path) with the expected gradient."""
    assert isinstance(grads, nnx.State)
    found = {}
    for path, g in grads.flat_state():
        param = resolve(root, path)
        assert isinstance(param, nnx.Param), f"grads has an entry at {path} that is not a Param"
        assert type(g) is nnx.Param and g._var_metadata == param._var_metadata
        found[id(param)] = g.raw_value
    assert set(found) == set(expected), "grads do not cover exactly the graph's Params"
    for key, value in expected.items():
        np.testing.assert_allclose(np.asarray(found[key]), np.asarray(value), rtol=1e-6)


def expected_grads(root: Any) -> tuple[Any, dict[int, Any]]:
    params = params_of(root)
    value, grads = jax.value_and_grad(pure_loss)([p.value for p in params])
    return value, {id(p): g for p, g in zip(params, grads)}


def check_grad(graph: Any) -> None:
    _, expected = expected_grads(graph)
    assert_grads(nnx.grad(loss)(graph), graph, expected)


def check_value_and_grad(graph: Any) -> None:
    value, expected = expected_grads(graph)
    v, grads = nnx.value_and_grad(loss)(graph)
    np.testing.assert_allclose(np.asarray(v), np.asarray(value), rtol=1e-6)
    assert_grads(grads, graph, expected)


def check_value_and_grad_of_a_constant(graph: Any) -> None:
    v, grads = nnx.value_and_grad(lambda m: jnp.ones(()))(graph)
    assert float(v) == 1.0
    assert_grads(grads, graph, {id(p): jnp.zeros_like(p.value) for p in params_of(graph)})


def check_vjp(graph: Any) -> None:
    params = params_of(graph)
    value, pure_vjp = jax.vjp(pure_loss, [p.value for p in params])
    out, vjp_fn = nnx.vjp(loss, graph)
    np.testing.assert_allclose(np.asarray(out), np.asarray(value), rtol=1e-6)
    (grads,) = vjp_fn(jnp.full((), 2.0))
    (pure_grads,) = pure_vjp(jnp.full((), 2.0))
    assert_grads(grads, graph, {id(p): g for p, g in zip(params, pure_grads)})


def check_jvp(graph: Any) -> None:
    params = params_of(graph)
    values = [p.value for p in params]
    tangents = [jnp.full_like(v, 0.5) for v in values]
    value, tangent = jax.jvp(pure_loss, (values,), (tangents,))
    tangent_graph = nnx.clone(graph)
    for p in params_of(tangent_graph):
        p.value = jnp.full_like(p.value, 0.5)
    out, out_tangent = nnx.jvp(loss, (graph,), (tangent_graph,))
    np.testing.assert_allclose(np.asarray(out), np.asarray(value), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(out_tangent), np.asarray(tangent), rtol=1e-6)


# -- eval_shape: compared with the graph made abstract here -------------------------------------


def check_eval_shape(graph: Any) -> None:
    expected = abstract(graph)
    out = nnx.eval_shape(identity, graph)
    assert out is not graph
    assert_graphs_equal(out, expected)
    out = nnx.eval_shape(with_sub_objects, graph)
    assert_graphs_equal(out, with_sub_objects(expected))


SPECIAL: dict[str, Callable[[Any], None]] = {
    "grad": check_grad,
    "value_and_grad": check_value_and_grad,
    "value_and_grad_constant": check_value_and_grad_of_a_constant,
    "vjp": check_vjp,
    "jvp": check_jvp,
    "eval_shape": check_eval_shape,
}


@pytest.mark.parametrize(("graph_name", "transform"), matrix(list(SPECIAL)))
def test_transforms_with_their_own_outputs_match_plain_jax(graph_name: str, transform: str) -> None:
    graph = CORPUS[graph_name]()
    reference = nnx.clone(graph)
    before = snapshot(graph)
    SPECIAL[transform](graph)
    assert_unchanged(before, graph, same_leaves=True)
    assert_graphs_equal(graph, reference)
