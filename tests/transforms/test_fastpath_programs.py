"""The fast path, tested by generated programs: repeated calls on the same objects.

A training loop calls one transformed function again and again on the same
objects, and flaxgraph's transforms answer such calls from a plan made by the
first one (``transforms/fastpath.py``) instead of walking the graph. These
properties check the plan against eager execution: a random object graph
(sharing, lists, dicts, nested nodes), a random mutation program
(``flaxgraph.testing``: in-place writes, new and replaced attributes, deleted and
swapped children, shared sub-objects) run several times through ``nnx.jit`` (and
``nnx.vmap``, and ``nnx.grad`` inside ``nnx.jit``) on the same objects, with random
changes made to the objects from outside between calls, must leave the objects
and return the values that the same sequence leaves and returns when run
eagerly on a copy, in every traversal mode.

And the plan must really be used: when neither the program nor the outside
changes touch the structure, every call after the first takes the fast path
(``cache_info().general_calls`` stays 1), so the comparison above is a
comparison of the fast path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import hypothesis.strategies as st
import jax.numpy as jnp
import pytest
from hypothesis import given, settings

import flaxgraph as nnx
from flaxgraph.graphlib.registry import is_node_or_variable
from flaxgraph.testing import (
    MutationStep,
    SetValue,
    ShareAttribute,
    apply_mutations,
    assert_graphs_equal,
    graphs,
    mutations,
)
from flaxgraph.testing.strategies import MODES

CALLS = 4


def objects_of(root: Any) -> list[Any]:
    return [v for _, v in nnx.iter_graph(root) if is_node_or_variable(v)]


def is_float(value: Any) -> bool:
    dtype = getattr(value, "dtype", None)
    return dtype is not None and bool(jnp.issubdtype(dtype, jnp.floating))


def numeric_total(root: Any) -> Any:
    """The sum of every numeric Variable value."""
    total = jnp.zeros((), jnp.float32)
    for v in objects_of(root):
        if isinstance(v, nnx.Variable):
            value = v.raw_value
            dtype = getattr(value, "dtype", None)
            if dtype is not None and (
                jnp.issubdtype(dtype, jnp.integer) or jnp.issubdtype(dtype, jnp.floating)
            ):
                total = total + jnp.sum(value.astype(jnp.float32))
    return total


def float_param(path: Any, value: Any) -> bool:
    return isinstance(value, nnx.Param) and is_float(value.raw_value)


def program(steps: Sequence[MutationStep]) -> Callable[[Any], Any]:
    def run(root: Any) -> Any:
        apply_mutations(root, steps)
        return numeric_total(root)

    return run


def under_jit(run: Callable[[Any], Any], mode: dict[str, bool]) -> Callable[[Any], Any]:
    return nnx.jit(run, **mode)


def under_vmap(run: Callable[[Any], Any], mode: dict[str, bool]) -> Callable[[Any], Any]:
    return nnx.vmap(run, in_axes=None, out_axes=None, axis_size=2, **mode)


def vmap_in_jit(run: Callable[[Any], Any], mode: dict[str, bool]) -> Callable[[Any], Any]:
    mapped = under_vmap(run, mode)
    return nnx.jit(lambda root: mapped(root), **mode)


def grad_in_jit(run: Callable[[Any], Any], mode: dict[str, bool]) -> Callable[[Any], Any]:
    """The program runs inside the loss (its updates are the loss's aux effects)."""

    def loss(root: Any) -> Any:
        params = [v for v in objects_of(root) if float_param((), v)]
        total = sum((jnp.sum(p.raw_value) for p in params), jnp.zeros((), jnp.float32))
        return total, run(root)

    def step(root: Any) -> Any:
        # Without graph updates every array of the argument is differentiated
        # (lift types such as DiffState need graph updates): integers included.
        argnums = nnx.DiffState(0, float_param) if mode["graph_updates"] else 0
        grad = nnx.grad(loss, argnums=argnums, has_aux=True, allow_int=True, **mode)
        _, aux = grad(root)
        return aux

    return nnx.jit(step, **mode)


TRANSFORMS = {
    "jit": under_jit,
    "vmap": under_vmap,
    "vmap_in_jit": vmap_in_jit,
    "grad_in_jit": grad_in_jit,
}


def value_only(steps: Sequence[MutationStep] | None) -> bool:
    return not steps or all(type(s) is SetValue for s in steps)


def no_sharing(steps: list[MutationStep]) -> list[MutationStep]:
    return [s for s in steps if type(s) is not ShareAttribute]


@st.composite
def cases(draw: Any, mode: dict[str, bool]) -> tuple[Any, list[Any], list[Any]]:
    """A graph, the program run by each call, and the outside changes before calls
    2, 3, ... (``None``: no change). Tree mode gets no sharing; without graph
    updates the program only writes values (structural changes inside do not come
    back, by design)."""
    tree = not mode["graph"]
    graph = draw(
        graphs(max_nodes=4, max_depth=2, max_attributes=3, sharing=not tree, cycles=not tree)
    )
    steps = draw(mutations(max_steps=3, cycles=not tree))
    if not mode["graph_updates"]:
        steps = [s for s in steps if type(s) is SetValue]
    elif tree:
        steps = no_sharing(steps)
    outside = draw(
        st.lists(
            st.none() | mutations(max_steps=2, cycles=not tree),
            min_size=CALLS - 1,
            max_size=CALLS - 1,
        )
    )
    if tree:
        outside = [None if o is None else no_sharing(o) for o in outside]
    # Most examples write values only, so most calls can take the fast path.
    if draw(st.booleans()):
        steps = [s for s in steps if type(s) is SetValue]
        outside = [None if o is None else [s for s in o if type(s) is SetValue] for o in outside]
    return graph, steps, outside


# A program may write an RNG counter of a broadcast Rngs as data (SetValue): that is
# a write-back to check here, not a draw of the same random numbers per instance.
@pytest.mark.filterwarnings("ignore::flaxgraph.transforms.rng_broadcast.RngBroadcastWarning")
@pytest.mark.parametrize("mode", MODES, ids=["graph", "graph_no_updates", "tree"])
@pytest.mark.parametrize("transform", list(TRANSFORMS))
@settings(max_examples=20)  # 12 combinations, each compiling a few functions per example
@given(data=st.data())
def test_repeated_calls_match_eager_and_take_the_fast_path(
    transform: str, mode: dict[str, bool], data: st.DataObject
) -> None:
    graph, steps, outside = data.draw(cases(mode))
    eager = nnx.clone(graph)
    run = program(steps)
    f = TRANSFORMS[transform](run, mode)
    structural_outside = 0
    for i in range(CALLS):
        if i and outside[i - 1] is not None:
            apply_mutations(graph, outside[i - 1])
            apply_mutations(eager, outside[i - 1])
            structural_outside += not value_only(outside[i - 1])
        out = f(graph)
        eager_out = run(eager)
        try:
            assert_graphs_equal((graph, out), (eager, eager_out))
        except AssertionError as e:
            raise AssertionError(f"call {i + 1}: {e}") from None
    if value_only(steps):
        info = f.cache_info()  # type: ignore[attr-defined]
        assert info.general_calls <= 1 + structural_outside, (
            f"{info.general_calls} of {CALLS} calls took the general path "
            f"({structural_outside} structural changes from outside)"
        )


class Holder(nnx.Module):
    """A Param and two arrays (or two Params) held in a container of ``kind``."""

    def __init__(self, kind: str) -> None:
        self.w = nnx.Param(jnp.ones(2))
        one, zero = jnp.ones(2), jnp.zeros(2)
        if kind == "nnx.List":
            self.xs = nnx.List([one, zero])
        elif kind == "list":
            self.xs = [one, zero]
        elif kind == "tuple":
            self.xs = (one, zero, None)
        elif kind == "dict":
            self.xs = {0: one, 1: zero}
        elif kind == "nnx.Dict":
            self.xs = nnx.Dict({"0": one, "1": zero})
        elif kind == "nested":  # a tuple in a list in a dict, and a tuple in a tuple
            self.xs = {0: [(one, "static"), ((zero,), 1)]}
        else:
            self.xs = nnx.List([nnx.Param(one), nnx.Param(zero)])

    def bump(self, kind: str) -> None:
        """Adds one to the first array (or Param) of the container, as a program
        inside a transform would: a new value, no new structure."""
        if kind == "variables":
            self.xs[0][...] += 1
        elif kind == "tuple":
            self.xs = (self.xs[0] + 1, *self.xs[1:])
        elif kind == "nested":
            (a, s), _ = self.xs[0]
            self.xs[0][0] = (a + 1, s)
        else:
            key = "0" if kind == "nnx.Dict" else 0
            self.xs[key] = self.xs[key] + 1


KINDS = ["nnx.List", "list", "tuple", "dict", "nnx.Dict", "nested", "variables"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("donate", [None, 0])
@pytest.mark.parametrize("update", [True, False])
def test_arrays_in_containers_stay_on_the_fast_path(kind: str, donate: Any, update: bool) -> None:
    # Arrays held in lists, tuples and dicts (nnx.List, plain list, dict, nested...)
    # updated inside nnx.jit, or just held (with donation): every call after the
    # first is fast.
    model, eager = Holder(kind), Holder(kind)

    def step(m: Holder) -> Any:
        if update:
            m.bump(kind)
        m.w[...] += 1
        return m.w[...].sum()

    jitted = nnx.jit(step, donate_argnums=donate)
    for _ in range(5):
        assert float(jitted(model)) == float(step(eager))
    assert_graphs_equal(model, eager)
    assert jitted.cache_info().general_calls == 1


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", MODES[:2], ids=["graph", "graph_no_updates"])
@pytest.mark.parametrize("transform", ["jit", "vmap"])
def test_every_container_kind_takes_the_fast_path(
    kind: str, mode: dict[str, bool], transform: str
) -> None:
    # The hit rate on every container kind, in both graph modes, under nnx.jit and
    # eager nnx.vmap: one general call, then the plan. Without graph updates only the
    # Variables' new values come back (raw arrays stay as they were), as eagerly
    # with the inputs' structure put back.
    model, eager = Holder(kind), Holder(kind)

    def step(m: Holder) -> Any:
        m.bump(kind)
        m.w[...] += 1
        return m.w[...].sum()

    f = TRANSFORMS[transform](step, mode) if transform == "vmap" else nnx.jit(step, **mode)
    for _ in range(4):
        f(model)
        if mode["graph_updates"] or kind == "variables":
            eager.bump(kind)
        eager.w[...] += 1
    assert_graphs_equal(model, eager)
    assert f.cache_info().general_calls == 1  # type: ignore[attr-defined]
