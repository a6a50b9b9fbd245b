"""Property tests of nnx.vmap, each with an oracle written here.

1. **Consistent aliasing.** Random pools of Modules with shared Variables and
   sub-Modules are placed at random positions in the arguments, with random
   ``in_axes`` (ints, ``None``, ``StateAxes`` at objects, per-entry prefixes),
   and returned at random places with random ``out_axes``. The oracle walks the
   argument structure from the attributes it built and records, for every leaf
   (a Variable by identity, a raw array by owner and attribute), the axis it
   receives along every path. vmap must accept the call iff every leaf receives
   one axis (a ``StateAxes`` given to a container is a ``PrefixError``); a
   rejection lists every path of every offending leaf with its axis; an accepted
   call increments every Variable exactly once, in place, with the right layout.
2. **vmap equals a Python loop over the slices** (differential), for random
   graphs (``flaxgraph.testing.graphs``) and random mutation programs (value
   updates, new/deleted/shared/swapped attributes): vmapping the program over a
   stack of N graphs gives the stack of the N graphs each mutated eagerly, for
   stacking axes 0 and -1 and with a broadcast (``None``) sub-state.
3. **Axis metadata round trips**: ``add_axis`` then ``remove_axis`` (and the
   reverse, with the removed name) is the identity, for Variables with
   ``out_sharding`` metadata and for ``Partitioned`` boxes.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Hashable
from typing import Any

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import structures
from hypothesis import event, given

import flaxgraph as nnx
from flaxgraph.testing import Node, apply_mutations, assert_graphs_equal, graphs, mutations

# Generated programs may write the counter of a broadcast Rngs as data (SetValue): a value
# written back, not a draw of the same random numbers per instance (RngBroadcastWarning).
pytestmark = pytest.mark.filterwarnings(
    "ignore::flaxgraph.transforms.rng_broadcast.RngBroadcastWarning"
)

# -- 1. consistent aliasing ----------------------------------------------------------------------------

SIZE = 2  # every array is (SIZE, SIZE), so axes 0, 1 and None are all valid


@dataclasses.dataclass(frozen=True)
class Axes:
    """A StateAxes in the oracle's terms: Params on ``param``, everything else on ``rest``."""

    param: int | None
    rest: int | None

    def build(self) -> nnx.StateAxes:
        return nnx.StateAxes({nnx.Param: self.param, ...: self.rest})


@dataclasses.dataclass
class Pool:
    """Objects to place in arguments, the attributes of every Module built here (so
    the oracle never asks flaxgraph what a Module holds) and each Variable's start value."""

    objects: list[Any]
    attrs: dict[int, list[tuple[str, Any]]]
    variables: list[nnx.Variable[Any]]
    start: dict[int, np.ndarray]


@st.composite
def pools(draw: Any) -> Pool:
    variables: list[Any] = []
    modules: list[Any] = []
    attrs: dict[int, list[tuple[str, Any]]] = {}
    start: dict[int, np.ndarray] = {}
    for _ in range(draw(st.integers(1, 3))):
        items: list[tuple[str, Any]] = []
        earlier = list(variables)
        for j in range(draw(st.integers(1, 2))):
            value = np.arange(SIZE * SIZE, dtype=np.float32).reshape(SIZE, SIZE) + 10 * len(
                variables
            )
            v = draw(st.sampled_from([nnx.Param, nnx.BatchStat]))(jnp.asarray(value))
            start[id(v)] = value
            variables.append(v)
            items.append((f"v{j}", v))
        if draw(st.booleans()):
            items.append(("raw", jnp.ones((SIZE, SIZE))))
        if earlier and draw(st.booleans()):
            items.append(("shared", draw(st.sampled_from(earlier))))
        if modules and draw(st.booleans()):
            items.append(("sub", draw(st.sampled_from(modules))))
        m = Node(**dict(items))
        attrs[id(m)] = items
        modules.append(m)
    return Pool(modules + variables, attrs, variables, start)


AXES = st.sampled_from([0, 1, None])


@st.composite
def axis_trees(draw: Any, value: Any) -> Any:
    """An in_axes/out_axes tree for ``value``: one axis, a StateAxes, or per entry."""
    if type(value) in (tuple, list, dict) and draw(st.booleans()):
        if type(value) is dict:
            return {k: draw(axis_trees(v)) for k, v in value.items()}
        return type(value)(draw(axis_trees(v)) for v in value)
    if draw(st.integers(0, 3)) == 0:
        return Axes(draw(AXES), draw(AXES))
    return draw(AXES)


def build(tree: Any) -> Any:
    """The oracle's axis tree as vmap's in_axes (Axes -> StateAxes)."""
    if isinstance(tree, Axes):
        return tree.build()
    if type(tree) is dict:
        return {k: build(v) for k, v in tree.items()}
    if type(tree) in (tuple, list):
        return type(tree)(build(v) for v in tree)
    return tree


Records = dict[Hashable, list[tuple[str, Any]]]


class PrefixProblem(Exception):
    """The oracle found a StateAxes given to a container."""


def record(records: Records, value: Any, path: str, axes: Any, attrs: dict[int, Any]) -> None:
    """Appends ``(path, axis)`` for every leaf under ``value``, along every path."""

    def resolve(leaf: Any) -> Any:
        if isinstance(axes, Axes):
            return axes.param if isinstance(leaf, nnx.Param) else axes.rest
        return axes

    if isinstance(value, nnx.Variable):
        records.setdefault(("variable", id(value)), []).append((path, resolve(value)))
    elif id(value) in attrs:
        for name, child in attrs[id(value)]:
            if isinstance(child, jax.Array):  # a raw array attribute: keyed by its owner
                key = ("attribute", id(value), name)
                records.setdefault(key, []).append((f"{path}.{name}", resolve(child)))
            else:
                record(records, child, f"{path}.{name}", axes, attrs)
    elif type(value) in (tuple, list, dict):
        if isinstance(axes, Axes):
            raise PrefixProblem(path)
        keys = list(value) if type(value) is dict else range(len(value))
        for k in keys:
            sub = axes[k] if type(axes) is type(value) else axes
            label = f"[{k!r}]" if type(value) is dict else f"[{k}]"
            record(records, value[k], f"{path}{label}", sub, attrs)


def inconsistent(records: Records) -> Records:
    return {k: r for k, r in records.items() if len({a for _, a in r}) > 1}


ENTRY = re.compile(r"^\s+(\S.*?): (.+)$")


def listed(message: str) -> set[tuple[str, str]]:
    return {(m[1], m[2]) for line in message.splitlines() if (m := ENTRY.match(line))}


def increment_all(args: Any, kwargs: Any) -> None:
    seen: set[int] = set()
    for _, v in nnx.iter_graph((args, kwargs)):
        if isinstance(v, nnx.Variable) and id(v) not in seen:
            seen.add(id(v))
            v.value = v.value + 1


def check_rejection(error: Exception, bad: Records) -> None:
    entries = listed(str(error))
    for rec in bad.values():
        for path, axis in rec:
            assert (path, repr(axis)) in entries, (
                f"the error does not list the alias {path} with axis {axis!r}:\n{error}"
            )


def check_unchanged(pool: Pool) -> None:
    for v in pool.variables:
        np.testing.assert_array_equal(v.value, pool.start[id(v)])


@st.composite
def calls(draw: Any) -> tuple[Pool, tuple[Any, ...], dict[str, Any], Any, Records, str | None]:
    """A pool, positional and keyword arguments, in_axes, the oracle's records and
    the path of a StateAxes given to a container (or None)."""
    pool = draw(pools())
    n_args = draw(st.integers(1, 3))
    args = tuple(draw(structures(pool)) for _ in range(n_args))
    kwargs = draw(st.dictionaries(st.sampled_from(["p", "q"]), structures(pool), max_size=1))
    axes = tuple(draw(axis_trees(a)) for a in args)
    records: Records = {}
    problem = None
    try:
        for i, a in enumerate(args):
            record(records, a, f"args[{i}]", axes[i], pool.attrs)
        for k, v in kwargs.items():  # keyword arguments are mapped on axis 0
            record(records, v, f"kwargs[{k!r}]", 0, pool.attrs)
    except PrefixProblem as e:
        problem = str(e)
    return pool, args, kwargs, axes, records, problem


@given(calls())
def test_vmap_accepts_exactly_the_consistent_in_axes(call: Any) -> None:
    pool, args, kwargs, axes, records, problem = call
    f = nnx.vmap(lambda *a, **k: increment_all(a, k), in_axes=build(axes), axis_size=SIZE)
    if problem is not None:
        event("PrefixError")
        with pytest.raises(nnx.PrefixError, match=re.escape(problem)):
            f(*args, **kwargs)
        check_unchanged(pool)
        return
    bad = inconsistent(records)
    event("rejected" if bad else "accepted")
    if bad:
        with pytest.raises(nnx.InconsistentAliasingError) as info:
            f(*args, **kwargs)
        check_rejection(info.value, bad)
        check_unchanged(pool)
        return
    f(*args, **kwargs)
    reached = {key[1] for key in records if key[0] == "variable"}
    for v in pool.variables:
        expected = pool.start[id(v)] + (1 if id(v) in reached else 0)
        np.testing.assert_array_equal(v.value, expected)


@st.composite
def output_calls(draw: Any) -> Any:
    pool, args, kwargs, axes, records, problem = draw(calls())
    places = object_places(args, ())
    n_out = draw(st.integers(1, 3)) if places else 0
    chosen = [draw(st.sampled_from(places)) for _ in range(n_out)]
    out_axes = tuple(draw(st.one_of(AXES, st.builds(Axes, AXES, AXES))) for _ in chosen)
    return pool, args, kwargs, axes, records, problem, chosen, out_axes


def object_places(value: Any, place: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    if isinstance(value, (nnx.Variable, Node)):
        return [place]
    if type(value) in (tuple, list):
        return [p for i, v in enumerate(value) for p in object_places(v, (*place, i))]
    if type(value) is dict:
        return [p for k, v in value.items() for p in object_places(v, (*place, k))]
    return []


def at(args: Any, place: tuple[Any, ...]) -> Any:
    for key in place:
        args = args[key]
    return args


@given(output_calls())
def test_vmap_outputs_must_keep_the_axes_of_their_input_aliases(call: Any) -> None:
    pool, args, kwargs, axes, records, problem, chosen, out_axes = call
    if problem is not None or inconsistent(records):
        event("inputs already rejected")
        return  # covered by the test above: the input check fails first
    for i, (place, oa) in enumerate(zip(chosen, out_axes)):
        record(records, at(args, place), f"output[{i}]", oa, pool.attrs)
    bad = inconsistent(records)
    event("rejected" if bad else "accepted")

    def f(*a: Any, **k: Any) -> tuple[Any, ...]:
        increment_all(a, k)
        return tuple(at(a, place) for place in chosen)

    vf = nnx.vmap(f, in_axes=build(axes), out_axes=build(out_axes), axis_size=SIZE)
    if bad:
        with pytest.raises(nnx.InconsistentAliasingError) as info:
            vf(*args, **kwargs)
        entries = listed(str(info.value))
        for rec in bad.values():
            for path, axis in rec:
                if path.startswith("output"):
                    assert (path, repr(axis)) in entries, f"{path}: {axis!r} not in\n{info.value}"
        check_unchanged(pool)
        return
    out = vf(*args, **kwargs)
    assert len(out) == len(chosen)
    for o, place in zip(out, chosen):
        assert o is at(args, place)  # the caller's same object
    reached = {key[1] for key in records if key[0] == "variable"}
    for v in pool.variables:
        expected = pool.start[id(v)] + (1 if id(v) in reached else 0)
        np.testing.assert_array_equal(v.value, expected)


# -- 2. vmap equals a Python loop over the slices -------------------------------------------------------

N = 3


def numeric(x: Any) -> bool:
    dtype = getattr(x, "dtype", None)
    return dtype is not None and (
        jnp.issubdtype(dtype, jnp.integer) or jnp.issubdtype(dtype, jnp.floating)
    )


def is_leaf(x: Any) -> bool:
    return isinstance(x, nnx.Variable)


def vary(graph: Any, i: int, broadcast: Callable[[Any], bool]) -> Any:
    """A copy of ``graph`` whose numeric values (except broadcast Variables') are shifted by ``i``."""
    graphdef, state = nnx.split(graph)

    def shift(x: Any) -> Any:
        return x + jnp.asarray(i, x.dtype) if numeric(x) else x

    def leaf(x: Any) -> Any:
        if isinstance(x, nnx.Variable):
            return x if broadcast(x) else x.replace(jax.tree.map(shift, x.raw_value))
        return shift(x)

    return nnx.merge(graphdef, jax.tree.map(leaf, state, is_leaf=is_leaf))


def stack(graphs_: list[Any], axis: int, broadcast: Callable[[Any], bool]) -> Any:
    """The graph whose every array stacks the slices' arrays on ``axis`` (broadcast
    Variables keep slice 0's value), with sharding metadata given the new axis."""
    graphdef = nnx.graphdef(graphs_[0])
    states = [nnx.split(g)[1] for g in graphs_]

    def combine(first: Any, *rest: Any) -> Any:
        if isinstance(first, nnx.Variable):
            if broadcast(first):
                for other in rest:
                    jax.tree.map(np.testing.assert_array_equal, first.raw_value, other.raw_value)
                return first
            value = jax.tree.map(
                lambda *xs: jnp.stack(xs, axis), first.raw_value, *(r.raw_value for r in rest)
            )
            new = first.replace(value)
            new.add_axis(axis, {})
            return new
        return jnp.stack((first, *rest), axis)

    return nnx.merge(graphdef, jax.tree.map(combine, *states, is_leaf=is_leaf))


BROADCAST_KINDS = {
    "nothing": lambda v: False,
    "batch_stats": lambda v: isinstance(v, nnx.BatchStat),
}


@given(
    graph=graphs(max_nodes=4, max_attributes=3),
    steps=mutations(max_steps=4),
    axis=st.sampled_from([0, -1]),
    broadcast=st.sampled_from(sorted(BROADCAST_KINDS)),
)
def test_vmap_of_a_mutation_program_equals_a_loop_over_the_slices(
    graph: Any, steps: Any, axis: int, broadcast: str
) -> None:
    is_broadcast = BROADCAST_KINDS[broadcast]
    slices = [vary(graph, i, is_broadcast) for i in range(N)]
    stacked = stack(slices, axis, is_broadcast)
    if broadcast == "nothing":
        in_axes: Any = axis
    else:
        in_axes = nnx.StateAxes({nnx.BatchStat: None, ...: axis})

    nnx.vmap(lambda g: apply_mutations(g, steps) and None, in_axes=(in_axes,), axis_size=N)(stacked)

    for s in slices:
        apply_mutations(s, steps)
    assert_graphs_equal(stacked, stack(slices, axis, is_broadcast))


# -- 3. add_axis and remove_axis are inverses ------------------------------------------------------------

NAMES = st.sampled_from(["data", "model", "layers", None])


@given(
    names=st.lists(NAMES, max_size=4).map(tuple),
    new=NAMES,
    data=st.data(),
)
def test_variable_add_axis_and_remove_axis_are_inverses(
    names: tuple[Any, ...], new: Any, data: Any
) -> None:
    rank = len(names)
    params = {nnx.PARTITION_NAME: new}
    v = nnx.Param(jnp.zeros((1,) * rank), out_sharding=names, tag="t")
    before = v.get_metadata()

    index = data.draw(st.integers(-(rank + 1), rank), label="add index")
    v.add_axis(index, params)
    grown = v.get_metadata("out_sharding")
    assert len(grown) == rank + 1
    assert grown[index] == new  # the name sits where the axis was added
    v.remove_axis(index, params)
    assert v.get_metadata() == before

    if rank:
        index = data.draw(st.integers(-rank, rank - 1), label="remove index")
        removed = names[index]
        v.remove_axis(index, {nnx.PARTITION_NAME: removed})
        assert v.get_metadata("out_sharding") == names[: index % rank] + names[index % rank + 1 :]
        v.add_axis(index, {nnx.PARTITION_NAME: removed})
        assert v.get_metadata() == before


@given(names=st.lists(NAMES, max_size=4).map(tuple), new=NAMES, data=st.data())
def test_partitioned_add_axis_and_remove_axis_are_inverses(
    names: tuple[Any, ...], new: Any, data: Any
) -> None:
    rank = len(names)
    box = nnx.Partitioned(jnp.zeros((1,) * rank), names)
    params = {nnx.PARTITION_NAME: new}
    index = data.draw(st.integers(-(rank + 1), rank), label="add index")
    grown = box.add_axis(index, params)
    assert grown.names[index] == new and len(grown.names) == rank + 1
    assert grown.remove_axis(index, params) == box
    if rank:
        index = data.draw(st.integers(-rank, rank - 1), label="remove index")
        removed = {nnx.PARTITION_NAME: names[index]}
        assert box.remove_axis(index, removed).add_axis(index, removed) == box
