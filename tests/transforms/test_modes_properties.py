"""Property tests of the traversal modes, with oracles written here.

* Tree mode (``graph=False``) rejects the arguments iff some Variable is reachable
  along two paths (a shared Module without Variables is fine), and the error lists
  every path of every such Variable; graph mode accepts them all.
* Without graph updates, a random mutation program run inside a transform leaves the
  caller's graph with its structure exactly as before (same objects at the same
  places, raw arrays untouched) and every Variable holding the value it holds after
  the program runs eagerly on a clone.
* In every mode, a program that raises midway leaves the caller's graph unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import structures
from hypothesis import event, given
from test_aliasing_properties import pools
from test_mutation_differential import (
    SMALL_GRAPHS,
    Boom,
    assert_unchanged,
    objects_of,
    raising,
    snapshot,
)

import flaxgraph as nnx
from flaxgraph.testing import apply_mutations, assert_graphs_equal, graphs, mutations
from flaxgraph.testing.strategies import MODES

TREE_GRAPHS = graphs(max_nodes=4, max_depth=2, max_attributes=3, sharing=False, cycles=False)
PROGRAMS = mutations(max_steps=4)


def nothing(*args: Any, **kwargs: Any) -> Any:
    return jnp.zeros(())


# Each calls a function of (args, kwargs) that changes nothing, in a mode (vmap maps
# keyword arguments on axis 0, as JAX does, and cond takes none: both get none here).
CALLS: dict[str, Callable[..., Any]] = {
    "jit": lambda mode, args, kwargs: nnx.jit(nothing, **mode)(*args, **kwargs),
    "eval_shape": lambda mode, args, kwargs: nnx.eval_shape(nothing, *args, **mode, **kwargs),
    "vmap": lambda mode, args, kwargs: nnx.vmap(
        nothing, in_axes=None, out_axes=None, axis_size=1, **mode
    )(*args, **kwargs),
    "remat": lambda mode, args, kwargs: nnx.remat(nothing, **mode)(*args, **kwargs),
    "cond": lambda mode, args, kwargs: nnx.cond(True, nothing, nothing, *args, **mode),
}


def variable_paths(value: Any, path: str, attrs: dict[int, Any], out: dict[int, list[str]]) -> None:
    """Every path of every Variable below ``value`` (the pool graphs are acyclic)."""
    if isinstance(value, nnx.Variable):
        out.setdefault(id(value), []).append(path)
    elif id(value) in attrs:
        for name, child in attrs[id(value)]:
            variable_paths(child, f"{path}.{name}", attrs, out)
    elif type(value) in (tuple, list):
        for i, child in enumerate(value):
            variable_paths(child, f"{path}[{i}]", attrs, out)
    elif type(value) is dict:
        for k, child in value.items():
            variable_paths(child, f"{path}[{k!r}]", attrs, out)


@pytest.mark.parametrize("name", list(CALLS))
@given(st.data())
def test_tree_mode_rejects_exactly_the_arguments_sharing_a_variable(name: str, data: Any) -> None:
    pool = data.draw(pools(kinds=(nnx.Param, nnx.BatchStat)), label="pool")
    n_args = data.draw(st.integers(1, 3), label="n_args")
    args = tuple(
        data.draw(structures(pool, none_at_top=False), label=f"args[{i}]") for i in range(n_args)
    )
    kwargs = (
        {}
        if name in ("cond", "vmap")
        else data.draw(
            st.dictionaries(st.sampled_from(["p", "q"]), structures(pool), max_size=1),
            label="kwargs",
        )
    )
    paths: dict[int, list[str]] = {}
    for i, a in enumerate(args):
        variable_paths(a, f"args[{i}]", pool.attrs, paths)
    for k, v in kwargs.items():
        variable_paths(v, f"kwargs[{k!r}]", pool.attrs, paths)
    shared = [p for p in paths.values() if len(p) > 1]
    event("rejected" if shared else "accepted")

    CALLS[name]({"graph": True, "graph_updates": False}, args, kwargs)  # graph mode: fine
    if not shared:
        CALLS[name]({"graph": False}, args, kwargs)
        return
    with pytest.raises(nnx.SharedReferenceError) as info:
        CALLS[name]({"graph": False}, args, kwargs)
    listed = {line.strip() for line in str(info.value).splitlines()}
    for record in shared:
        for path in record:
            assert path in listed, f"the error does not list {path}:\n{info.value}"


RUNNERS: dict[str, Callable[..., Any]] = {
    "jit": lambda f, root, mode: nnx.jit(f, **mode)(root),
    "cond": lambda f, root, mode: nnx.cond(True, f, f, root, **mode),
    "remat": lambda f, root, mode: nnx.remat(f, **mode)(root),
    "vmap_broadcast": lambda f, root, mode: nnx.vmap(
        f, in_axes=None, out_axes=None, axis_size=2, **mode
    )(root),
}
NO_UPDATES = [m for m in MODES if not m["graph_updates"]]


def mutate(steps: Any) -> Callable[[Any], None]:
    def run(root: Any) -> None:
        apply_mutations(root, steps)

    return run


# A program may write an RNG counter of a broadcast Rngs as data (SetValue): a value
# written back, not a draw of the same random numbers per instance.
@pytest.mark.filterwarnings("ignore::flaxgraph.transforms.rng_broadcast.RngBroadcastWarning")
@pytest.mark.parametrize("mode", NO_UPDATES, ids=["graph_updates=False", "tree"])
@pytest.mark.parametrize("name", list(RUNNERS))
@given(data=st.data())
def test_without_graph_updates_only_the_values_of_a_program_come_back(
    name: str, mode: dict[str, bool], data: Any
) -> None:
    graph = data.draw(SMALL_GRAPHS if mode["graph"] else TREE_GRAPHS, label="graph")
    steps = data.draw(PROGRAMS, label="steps")
    # The oracle: run the program eagerly on a clone; the clone's original Variables,
    # found by identity afterwards, hold the values the caller's must end up with.
    eager = nnx.clone(graph)
    eager_variables = [v for v in objects_of(eager) if isinstance(v, nnx.Variable)]
    apply_mutations(eager, steps)
    expected = [v.raw_value for v in eager_variables]

    before = snapshot(graph)
    variables = [v for v in objects_of(graph) if isinstance(v, nnx.Variable)]
    RUNNERS[name](mutate(steps), graph, mode)

    after = snapshot(graph)
    assert [e[:3] for e in after if e[1] != "variable"] == [
        e[:3] for e in before if e[1] != "variable"
    ], "the caller's structure changed"
    assert [e[2] for e in after if e[1] == "variable"] == variables
    for v, want in zip(variables, expected):  # a Variable may hold a pytree (sow)
        assert jax.tree.structure(v.raw_value) == jax.tree.structure(want)
        for a, b in zip(jax.tree.leaves(v.raw_value), jax.tree.leaves(want)):
            np.testing.assert_array_equal(as_numpy(a), as_numpy(b))


def as_numpy(x: Any) -> Any:
    if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):
        return np.asarray(jax.random.key_data(x))
    return np.asarray(x)


@pytest.mark.parametrize("mode", MODES, ids=["default", "graph_updates=False", "tree"])
@pytest.mark.parametrize("name", list(RUNNERS))
@given(data=st.data())
def test_a_program_that_raises_midway_leaves_the_objects_unchanged_in_every_mode(
    name: str, mode: dict[str, bool], data: Any
) -> None:
    graph = data.draw(SMALL_GRAPHS if mode["graph"] else TREE_GRAPHS, label="graph")
    steps = data.draw(PROGRAMS, label="steps")
    at = data.draw(st.integers(0, len(steps)), label="raise after step")
    before = snapshot(graph)
    copy = nnx.clone(graph)
    with pytest.raises(Boom):
        RUNNERS[name](raising(steps, at), graph, mode)
    assert_unchanged(before, graph)
    assert_graphs_equal(graph, copy)
