"""The traversal modes on every transform (Flax NNX 0.12 ``graph``/``graph_updates``).

* default (graph mode, graph updates): covered by the rest of the suite;
* ``graph_updates=False``: Variable values come back, structure and raw attributes
  do not, input objects may not be returned, lift types are rejected;
* tree mode (``graph=False``): the same, and a Variable reachable twice (among the
  inputs, among the outputs) is a ``SharedReferenceError`` naming every path.

The expectations are Flax NNX 0.12.8's observed behaviour, restated here.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

import flaxgraph as nnx
from flaxgraph.transforms.scan import BroadcastChangeWarning

MESH = Mesh(np.array(jax.devices()[:1]), ("x",))

NO_UPDATES = [
    pytest.param({"graph": True, "graph_updates": False}, id="graph_updates=False"),
    pytest.param({"graph": False}, id="tree"),
]
ALL = [pytest.param({}, id="default"), *NO_UPDATES]


class Counter(nnx.Module):
    def __init__(self) -> None:
        self.w = nnx.Param(jnp.ones(2))
        self.count = nnx.BatchStat(jnp.zeros(()))
        self.raw = jnp.zeros(2)


def bump(m: Counter) -> None:
    m.count[...] += 1


def restructure(m: Counter) -> None:
    m.count[...] += 1
    m.extra = nnx.Param(jnp.ones(1))  # a new attribute
    m.w = nnx.Param(m.w[...] * 10)  # a replaced Variable
    m.raw = m.raw + 1  # a raw array attribute


# Each runs ``fun(model)`` under one transform in a mode.
RUNNERS: dict[str, Any] = {
    "jit": lambda fun, m, mode: nnx.jit(fun, **mode)(m),
    "vmap": lambda fun, m, mode: nnx.vmap(fun, in_axes=None, axis_size=2, out_axes=None, **mode)(m),
    "cond": lambda fun, m, mode: nnx.cond(True, fun, fun, m, **mode),
    "remat": lambda fun, m, mode: nnx.remat(fun, **mode)(m),
    "grad": lambda fun, m, mode: nnx.grad(
        lambda m: (fun(m), jnp.sum(m.w[...]))[1], allow_int=True, **mode
    )(m),
    "scan": lambda fun, m, mode: _scan(fun, m, mode),
    "shard_map": lambda fun, m, mode: nnx.shard_map(
        lambda m: (fun(m), None)[1], mesh=MESH, in_specs=(P(),), out_specs=P(), **mode
    )(m),
}


def _scan(fun: Any, m: Any, mode: dict[str, Any]) -> Any:
    if mode:  # without graph updates a changed broadcast object is carried (Flax 0.12)
        return nnx.scan(lambda m, x: (fun(m), x)[1], in_axes=(None, 0), out_axes=0, **mode)(
            m, jnp.zeros(1)
        )

    def body(c: Any, x: Any) -> Any:
        fun(c)
        return c, x

    return nnx.scan(body, **mode)(m, jnp.zeros(1))


@pytest.mark.parametrize("mode", ALL)
@pytest.mark.parametrize("name", list(RUNNERS))
def test_variable_values_come_back_in_every_mode(name: str, mode: dict[str, Any]) -> None:
    m = Counter()
    RUNNERS[name](bump, m, mode)
    assert float(m.count[...]) == 1.0


@pytest.mark.parametrize("mode", NO_UPDATES)
@pytest.mark.parametrize("name", list(RUNNERS))
def test_without_graph_updates_structure_and_raw_attributes_stay(
    name: str, mode: dict[str, Any]
) -> None:
    m = Counter()
    w, raw = m.w, m.raw
    RUNNERS[name](restructure, m, mode)
    assert float(m.count[...]) == 1.0  # the value change came back
    assert not hasattr(m, "extra")
    assert m.w is w and np.array_equal(m.w[...], np.ones(2))  # the replacement did not
    assert m.raw is raw


def test_with_graph_updates_the_structure_comes_back() -> None:
    m = Counter()
    nnx.jit(restructure)(m)
    assert hasattr(m, "extra") and np.array_equal(m.w[...], 10 * np.ones(2))


@pytest.mark.parametrize("name", ["jit", "vmap", "cond", "remat", "grad", "shard_map"])
def test_tree_mode_rejects_a_shared_variable_naming_every_path(name: str) -> None:
    m = Counter()
    m.alias = m.count
    with pytest.raises(nnx.SharedReferenceError) as info:
        RUNNERS[name](bump, m, {"graph": False})
    message = str(info.value)
    assert "args[0].count" in message and "args[0].alias" in message
    assert "graph=True" in message  # the fix
    assert float(m.count[...]) == 0.0


@pytest.mark.parametrize("name", ["jit", "vmap", "cond", "remat", "grad", "shard_map"])
def test_graph_mode_without_updates_accepts_shared_variables(name: str) -> None:
    m = Counter()
    m.alias = m.count
    RUNNERS[name](bump, m, {"graph_updates": False})
    assert float(m.count[...]) == 1.0 and m.alias is m.count


def test_tree_mode_rejects_the_same_object_passed_twice() -> None:
    m = Counter()
    with pytest.raises(nnx.SharedReferenceError, match=r"args\[1\]\.count"):
        nnx.jit(lambda a, b: None, graph=False)(m, m)


def test_tree_mode_accepts_a_shared_object_without_variables() -> None:
    m = Counter()
    m.empty = nnx.Module()
    m.again = m.empty
    nnx.jit(bump, graph=False)(m)
    assert float(m.count[...]) == 1.0


@pytest.mark.parametrize("mode", NO_UPDATES)
def test_returning_an_input_object_is_rejected_with_both_paths(mode: dict[str, Any]) -> None:
    m = Counter()
    with pytest.raises(nnx.SharedReferenceError) as info:
        nnx.jit(lambda m: m.count, **mode)(m)
    assert "output" in str(info.value) and "args[0].count" in str(info.value)


def test_tree_mode_rejects_one_new_variable_returned_twice() -> None:
    def twice() -> Any:
        v = nnx.Param(jnp.ones(1))
        return v, v

    with pytest.raises(nnx.SharedReferenceError, match=r"output\[1\]"):
        nnx.jit(twice, graph=False)()
    a, b = nnx.jit(twice, graph_updates=False)()  # graph mode keeps the sharing
    assert a is b


@pytest.mark.parametrize("mode", NO_UPDATES)
def test_new_objects_are_returned_as_new_objects(mode: dict[str, Any]) -> None:
    out = nnx.jit(lambda: Counter(), **mode)()
    assert isinstance(out, Counter) and np.array_equal(out.w[...], np.ones(2))


@pytest.mark.parametrize(
    "make",
    [
        lambda mode: nnx.vmap(lambda m: None, in_axes=nnx.StateAxes({...: 0}), **mode),
        lambda mode: nnx.scan(lambda m: None, in_axes=nnx.StateAxes({...: nnx.Carry}), **mode),
        lambda mode: nnx.grad(lambda m: 0.0, argnums=nnx.DiffState(0, nnx.Param), **mode),
        lambda mode: nnx.jit(lambda m: None, in_shardings=nnx.StateSharding({...: None}), **mode),
        lambda mode: nnx.shard_map(
            lambda m: None,
            mesh=MESH,
            in_specs=nnx.StateSharding({...: P()}),
            out_specs=P(),
            **mode,
        ),
    ],
    ids=["vmap", "scan", "grad", "jit", "shard_map"],
)
@pytest.mark.parametrize("mode", NO_UPDATES)
def test_lift_types_are_rejected_when_the_transform_is_created(make: Any, mode: Any) -> None:
    with pytest.raises(ValueError, match="lift types need graph updates") as info:
        make(mode)
    assert "nnx.compat." in str(info.value)


@pytest.mark.parametrize("mode", NO_UPDATES)
def test_grad_differentiates_every_array_and_returns_the_arguments_type(mode: Any) -> None:
    m = Counter()
    grads = nnx.grad(lambda m: jnp.sum(m.w[...] ** 2) + 3 * m.count[...], **mode)(m)
    assert type(grads) is Counter and grads is not m
    assert np.array_equal(grads.w[...], 2 * np.ones(2))
    assert float(grads.count[...]) == 3.0  # not only Params: the pytree's every leaf
    assert np.array_equal(grads.raw, np.zeros(2))
    # Same as jax.grad on the equivalent pytree of arrays.
    ref = jax.grad(lambda t: jnp.sum(t["w"] ** 2) + 3 * t["count"])(
        {"w": jnp.ones(2), "count": jnp.zeros(())}
    )
    assert np.array_equal(grads.w[...], ref["w"])


def test_grad_with_graph_updates_returns_a_state_of_params() -> None:
    grads = nnx.grad(lambda m: jnp.sum(m.w[...] ** 2))(Counter())
    assert isinstance(grads, nnx.State) and set(grads) == {"w"}


@pytest.mark.parametrize("mode", NO_UPDATES)
def test_scan_returns_a_new_carry_and_updates_the_callers(mode: Any) -> None:
    class C(nnx.Module):
        def __init__(self) -> None:
            self.total = nnx.BatchStat(jnp.zeros(()))

    def body(c: C, x: Any) -> Any:
        c.total[...] += x
        return c, 2 * x

    c = C()
    out, ys = nnx.scan(body, **mode)(c, jnp.arange(3.0))
    assert out is not c and float(out.total[...]) == 3.0 and float(c.total[...]) == 3.0
    assert np.array_equal(ys, [0.0, 2.0, 4.0])


@pytest.mark.parametrize("mode", NO_UPDATES)
def test_scan_carries_a_changed_broadcast_variable(mode: Any) -> None:
    c = Counter()

    def body(m: Counter, x: Any) -> Any:
        m.count[...] += x
        return x

    nnx.scan(body, in_axes=(None, 0), out_axes=0, **mode)(c, jnp.arange(4.0))
    assert float(c.count[...]) == 6.0


def test_scan_with_graph_updates_discards_a_changed_broadcast_variable() -> None:
    # As in Flax NNX 0.12: each step sees the value passed in, the change is dropped
    # (flaxgraph warns, naming the Variable).
    def body(m: Counter, x: Any) -> Any:
        m.count[...] += x
        return m.count[...]

    c = Counter()
    with pytest.warns(BroadcastChangeWarning, match=r"broadcast \(None\) \w+ at args\[0\]\.count"):
        ys = nnx.scan(body, in_axes=(None, 0), out_axes=0)(c, jnp.arange(4.0))
    np.testing.assert_allclose(ys, jnp.arange(4.0) + float(Counter().count[...]))
    assert float(c.count[...]) == float(Counter().count[...])


@pytest.mark.parametrize("mode", NO_UPDATES)
def test_loops_return_a_new_carry_and_update_the_callers(mode: Any) -> None:
    def body(i: Any, m: Counter) -> Counter:
        m.count[...] += 1
        return m

    m = Counter()
    out = nnx.fori_loop(0, 3, body, m, **mode)
    assert out is not m and float(m.count[...]) == 3.0 and float(out.count[...]) == 3.0
    w = nnx.while_loop(lambda m: m.count[...] < 5, lambda m: (bump(m), m)[1], m, **mode)
    assert w is not m and float(m.count[...]) == 5.0


@pytest.mark.parametrize("mode", ALL)
def test_jit_train_step_takes_the_fast_path_in_every_mode(mode: Any) -> None:
    @nnx.jit(**mode)
    def step(m: Counter) -> Any:
        grads = nnx.grad(lambda m: jnp.sum(m.w[...] ** 2), **mode)(m)
        g = grads["w"] if isinstance(grads, nnx.State) else grads.w
        m.w[...] -= 0.1 * g[...]
        m.count[...] += 1
        return jnp.sum(m.w[...])

    m = Counter()
    for _ in range(3):
        step(m)
    assert float(m.count[...]) == 3.0
    np.testing.assert_allclose(m.w[...], 0.8**3 * np.ones(2), rtol=1e-6)
    assert step.cache_info().general_calls == 1


@pytest.mark.parametrize("mode", NO_UPDATES)
def test_a_raising_function_leaves_the_caller_unchanged(mode: Any) -> None:
    def boom(m: Counter) -> None:
        m.count[...] += 1
        m.extra = nnx.Param(jnp.ones(1))
        raise RuntimeError("boom")

    m = Counter()
    count = m.count[...]
    with pytest.raises(RuntimeError, match="boom"):
        nnx.jit(boom, **mode)(m)
    assert m.count[...] is count and not hasattr(m, "extra")


@pytest.mark.parametrize("mode", ALL)
def test_eval_shape_and_custom_vjp_accept_the_modes(mode: Any) -> None:
    out = nnx.eval_shape(lambda: Counter(), **mode)
    assert out.w.value.shape == (2,)

    @nnx.custom_vjp(**mode)
    def f(m: Counter) -> Any:
        return jnp.sum(m.w[...])

    def fwd(m: Counter) -> Any:
        return jnp.sum(m.w[...]), None

    def bwd(res: Any, g: Any) -> Any:
        return ({"w": 7 * jnp.ones(2)},)

    f.defvjp(fwd, bwd)
    grads = nnx.grad(lambda m: f(m), allow_int=True, **mode)(Counter())
    w = grads["w"] if isinstance(grads, nnx.State) else grads.w
    assert np.array_equal(w[...], 7 * np.ones(2))


@pytest.mark.parametrize("mode", ALL)
def test_vjp_and_jvp_accept_the_modes(mode: Any) -> None:
    m = Counter()
    out, vjp_fn = nnx.vjp(lambda m: jnp.sum(m.w[...] * 2), m, **mode)
    (cot,) = vjp_fn(jnp.ones(()))
    w = cot["w"] if isinstance(cot, nnx.State) else cot.w
    assert float(out) == 4.0 and np.array_equal(w[...], 2 * np.ones(2))
    tangent = nnx.clone(m) if mode else {"w": nnx.Param(jnp.ones(2))}
    _, t = nnx.jvp(lambda m: jnp.sum(m.w[...] * 2), (m,), (tangent,), **mode)
    assert float(t) == 4.0
