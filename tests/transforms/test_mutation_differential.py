"""Differential tests: a mutation program under a transform does what it does eagerly.

For a random object graph and a random mutation program (``flaxgraph.testing``:
set a Variable's value, add or delete an attribute, share a sub-object, swap two
children), running the program inside a transform on the caller's graph must
leave that graph isomorphic (values, types, metadata, sharing pattern, cycles)
to a clone on which the program ran eagerly, and return the same value. The
returned value holds the root and every object reachable after the program, so
comparing ``(graph, output)`` pairs in one lockstep walk also checks that every
returned object is the caller's object at the same place (new objects
included), not a copy.

And if the program raises midway, the caller's graph is exactly as it was: same
objects at the same places holding the same array objects (``docs/design.md``,
"The five lift steps", step 5: if anything in steps 1-4 raises, the caller's objects
are unchanged).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given

import flaxgraph as nnx
from flaxgraph.graphlib.registry import is_node_or_variable
from flaxgraph.testing import (
    MutationStep,
    apply_mutations,
    assert_graphs_equal,
    graphs,
    mutations,
)

# Generated programs may write the counter of a broadcast Rngs as data (SetValue): a value
# written back, not a draw of the same random numbers per instance (RngBroadcastWarning).
pytestmark = pytest.mark.filterwarnings(
    "ignore::flaxgraph.transforms.rng_broadcast.RngBroadcastWarning"
)

SMALL_GRAPHS = graphs(max_nodes=4, max_depth=2, max_attributes=3)
PROGRAMS = mutations(max_steps=4)


def objects_of(root: Any) -> list[Any]:
    """Every graph node and Variable reachable from ``root``, each once."""
    return [v for _, v in nnx.iter_graph(root) if is_node_or_variable(v)]


def is_numeric(value: Any) -> bool:
    dtype = getattr(value, "dtype", None)
    if dtype is None or jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return False
    return bool(jnp.issubdtype(dtype, jnp.integer) or jnp.issubdtype(dtype, jnp.floating))


def numeric_total(root: Any) -> Any:
    """The sum of every numeric Variable value (exact: values are small multiples of 1/4)."""
    total = jnp.zeros((), jnp.float32)
    for v in objects_of(root):
        if isinstance(v, nnx.Variable) and is_numeric(v.raw_value):
            total = total + jnp.sum(v.raw_value.astype(jnp.float32))
    return total


def program(steps: Sequence[MutationStep]) -> Callable[[Any], Any]:
    """The function run eagerly and under each transform: mutate, then report."""

    def run(root: Any) -> Any:
        log = apply_mutations(root, steps)
        return log, root, objects_of(root), numeric_total(root)

    return run


# -- the transforms, each given the program and the caller's root ------------------------------

Runner = Callable[[Callable[[Any], Any], Any], Any]


def _cond(f: Callable[[Any], Any], root: Any) -> Any:
    # Both branches run the program; which one is taken varies with the graph.
    pred = jnp.asarray(len(objects_of(root)) % 2 == 0)
    return nnx.cond(pred, f, f, root)


TRANSFORMS: dict[str, Runner] = {
    "jit": lambda f, root: nnx.jit(f)(root),
    "cond": _cond,
    "remat": lambda f, root: nnx.remat(f)(root),
    "vmap_broadcast": lambda f, root: nnx.vmap(f, in_axes=None, out_axes=None, axis_size=2)(root),
}


def assert_same_outcome(
    root: Any, out: Any, eager_root: Any, eager_out: Any, log: Sequence[str]
) -> None:
    assert out[1] is root, "the returned root is not the caller's object"
    context = "program:\n  " + "\n  ".join(log)
    try:
        assert_graphs_equal((root, out), (eager_root, eager_out))
    except AssertionError as e:
        raise AssertionError(f"{e}\n{context}") from None


@pytest.mark.parametrize("name", list(TRANSFORMS))
@given(graph=SMALL_GRAPHS, steps=PROGRAMS)
def test_a_program_under_a_transform_matches_it_run_eagerly(
    name: str, graph: Any, steps: list[MutationStep]
) -> None:
    eager = nnx.clone(graph)
    eager_out = program(steps)(eager)
    out = TRANSFORMS[name](program(steps), graph)
    assert_same_outcome(graph, out, eager, eager_out, eager_out[0])


# -- value_and_grad: a loss summing Params, then the program ------------------------------------


def float_param(path: Any, value: Any) -> bool:
    return (
        isinstance(value, nnx.Param)
        and is_numeric(value.raw_value)
        and jnp.issubdtype(value.raw_value.dtype, jnp.floating)
    )


def resolve(root: Any, path: Sequence[Any]) -> Any:
    """The value at a State path, walked with plain attribute and item access."""
    x = root
    for key in path:
        x = getattr(x, key) if isinstance(key, str) and isinstance(x, nnx.Pytree) else x[key]
    return x


@given(graph=SMALL_GRAPHS, steps=PROGRAMS)
def test_a_program_under_value_and_grad_matches_it_run_eagerly(
    graph: Any, steps: list[MutationStep]
) -> None:
    def loss(root: Any) -> Any:
        params = [v for v in objects_of(root) if float_param((), v)]
        total = sum((jnp.sum(p.raw_value) for p in params), jnp.zeros((), jnp.float32))
        return total, program(steps)(root)

    before = nnx.clone(graph)
    eager = nnx.clone(graph)
    eager_loss, eager_out = loss(eager)
    (value, out), grads = nnx.value_and_grad(
        loss, argnums=nnx.DiffState(0, float_param), has_aux=True
    )(graph)

    assert np.asarray(value) == np.asarray(eager_loss)
    assert_same_outcome(graph, out, eager, eager_out, eager_out[0])
    # d(sum of all float Params)/d(each Param) = ones, one entry per Param (shared once).
    flat = grads.flat_state()
    expected = [v for v in objects_of(before) if float_param((), v)]
    assert len(flat) == len(expected)
    seen = []
    for path, g in flat:
        param = resolve(before, path)
        assert float_param(path, param), f"grads has an entry at {path} that is not a float Param"
        seen.append(id(param))
        assert type(g) is nnx.Param
        np.testing.assert_array_equal(np.asarray(g.raw_value), np.ones_like(param.raw_value))
    assert sorted(seen) == sorted(id(p) for p in expected)


# -- a program that raises midway leaves the caller's objects exactly unchanged ---------------


class Boom(Exception):
    pass


def snapshot(root: Any) -> list[tuple[Any, ...]]:
    """Everything reachable, by path: objects and arrays by identity, Variable values
    and metadata by identity, containers by type, static values by type and value."""
    entries: list[tuple[Any, ...]] = []
    for path, v in nnx.iter_graph(root):
        if isinstance(v, nnx.Variable):
            entries.append((path, "variable", v, v.raw_value, v._var_metadata))
        elif is_node_or_variable(v) or isinstance(v, (jax.Array, np.ndarray)):
            entries.append((path, "object", v))
        elif type(v) in (list, tuple, dict):
            entries.append((path, type(v), len(v)))
        else:
            entries.append((path, type(v), v))
    return entries


def assert_unchanged(before: list[tuple[Any, ...]], root: Any) -> None:
    after = snapshot(root)
    assert [e[:2] for e in after] == [e[:2] for e in before], "the graph's layout changed"
    for old, new in zip(before, after):
        if old[1] in ("variable", "object"):
            for a, b in zip(old[2:], new[2:]):
                assert a is b, f"{old[0]}: {a!r} was replaced by {b!r}"
        else:
            assert type(old[2]) is type(new[2]) and old[2] == new[2], f"{old[0]} changed"


def raising(steps: Sequence[MutationStep], at: int) -> Callable[..., Any]:
    def run(root: Any) -> Any:
        apply_mutations(root, steps[:at])
        raise Boom("midway")

    return run


RAISING: dict[str, Runner] = {
    **TRANSFORMS,
    "value_and_grad": lambda f, root: nnx.value_and_grad(f, nnx.DiffState(0, float_param))(root),
    "eval_shape": lambda f, root: nnx.eval_shape(f, root),
}


@pytest.mark.parametrize("name", list(RAISING))
@given(graph=SMALL_GRAPHS, steps=PROGRAMS, data=st.data())
def test_a_program_that_raises_midway_leaves_the_objects_unchanged(
    name: str, graph: Any, steps: list[MutationStep], data: Any
) -> None:
    at = data.draw(st.integers(0, len(steps)), label="raise after step")
    before = snapshot(graph)
    copy = nnx.clone(graph)
    with pytest.raises(Boom):
        RAISING[name](raising(steps, at), graph)
    assert_unchanged(before, graph)
    assert_graphs_equal(graph, copy)
