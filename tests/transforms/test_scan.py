"""nnx.scan: Carry, StateAxes with carried sub-states, scan over layers, errors.

Differential: every scan is compared with ``jax.lax.scan`` on the raw arrays or
with a Python loop over the slices of the stacked arrays, computed without
flaxgraph.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx
from flaxgraph.testing import Node, assert_graphs_equal
from flaxgraph.transforms.scan import BroadcastChangeWarning

# -- plain carries -----------------------------------------------------------------------------------


def cumulative(c: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    c = c * 0.5 + x
    return c, c * 2


XS = jnp.arange(15.0).reshape(5, 3) / 4


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("unroll", [1, 2])
def test_arrays_only_equals_jax_lax_scan(reverse: bool, unroll: int) -> None:
    c, ys = nnx.scan(cumulative, reverse=reverse, unroll=unroll)(jnp.zeros(3), XS)
    ec, eys = jax.lax.scan(cumulative, jnp.zeros(3), XS, reverse=reverse)
    np.testing.assert_allclose(c, ec, rtol=1e-6)
    np.testing.assert_allclose(ys, eys, rtol=1e-6)


def test_decorator_forms_and_axes() -> None:
    @nnx.scan
    def bare(c: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        return cumulative(c, x)

    ec, eys = jax.lax.scan(cumulative, jnp.zeros(3), XS)
    c, ys = bare(jnp.zeros(3), XS)
    np.testing.assert_allclose(ys, eys, rtol=1e-6)

    # in_axes=1 scans over the columns of XS.T; out_axes=1 stacks ys on axis 1.
    @nnx.scan(in_axes=(nnx.Carry, 1), out_axes=(nnx.Carry, 1))
    def columns(c: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        return cumulative(c, x)

    c, ys = columns(jnp.zeros(3), XS.T)
    np.testing.assert_allclose(c, ec, rtol=1e-6)
    np.testing.assert_allclose(ys, eys.T, rtol=1e-6)


def test_length_with_nothing_scanned_and_broadcast_keyword_arguments() -> None:
    @nnx.scan(in_axes=(nnx.Carry, None), length=4)
    def f(c: jax.Array, step: float, *, scale: float) -> tuple[jax.Array, jax.Array]:
        return c + step, c * scale

    c, ys = f(jnp.zeros(()), 1.5, scale=2.0)
    assert float(c) == 6.0
    np.testing.assert_array_equal(ys, [0.0, 3.0, 6.0, 9.0])


# -- objects in the carry -----------------------------------------------------------------------------


class Accumulator(nnx.Module):
    def __init__(self) -> None:
        self.total = nnx.BatchStat(jnp.zeros(3))
        self.steps = nnx.BatchStat(jnp.array(0))


def test_module_carry_is_updated_in_place_and_returned_as_the_same_object() -> None:
    acc = Accumulator()
    total = acc.total

    @nnx.scan
    def body(acc: Accumulator, x: jax.Array) -> tuple[Accumulator, jax.Array]:
        acc.total.value = acc.total.value + x
        acc.steps += 1
        return acc, jnp.sum(acc.total.value)

    out, ys = body(acc, XS)
    assert out is acc and acc.total is total
    np.testing.assert_allclose(acc.total.value, XS.sum(0), rtol=1e-6)
    assert int(acc.steps.value) == 5
    np.testing.assert_allclose(ys, np.cumsum(XS, 0).sum(1), rtol=1e-6)


def test_scanned_objects_updates_come_back_stacked() -> None:
    m = Node(w=nnx.Param(jnp.arange(6.0).reshape(3, 2)))

    def body(c: jax.Array, m: Node) -> tuple[jax.Array, None]:
        m.w.value = m.w.value + c
        return c + 1, None

    c, _ = nnx.scan(body)(jnp.zeros(()), m)
    assert float(c) == 3.0
    np.testing.assert_array_equal(m.w.value, np.arange(6.0).reshape(3, 2) + np.arange(3.0)[:, None])


# -- scan over layers -----------------------------------------------------------------------------------

LAYERS, D = 5, 4


class Block(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.w = nnx.Param(jax.random.normal(rngs.params(), (D, D)) / 2)
        self.b = nnx.Param(jax.random.normal(rngs.params(), (D,)))
        self.calls = nnx.BatchStat(jnp.array(0))
        self.mean = nnx.BatchStat(jnp.zeros(D))

    def __call__(self, x: jax.Array) -> jax.Array:
        self.calls += 1
        y = jnp.tanh(x @ self.w + self.b[None])
        self.mean.value = 0.5 * self.mean.value + 0.5 * y.mean(0)
        return y


class BlockStack(Block):
    """LAYERS Blocks in one object: ``__init__`` itself is vmapped (the
    WeightStack of Flax NNX's "Transformations" guide), with one split RNG key per layer; the BatchStats are not stacked."""

    @nnx.split_rngs(splits=LAYERS)
    @nnx.vmap(in_axes=(nnx.StateAxes({nnx.Param: 0, nnx.BatchStat: None}), 0))
    def __init__(self, rngs: nnx.Rngs):
        super().__init__(rngs)


def make_stack(seed: int = 0) -> BlockStack:
    rngs = nnx.Rngs(seed)
    stack = BlockStack(rngs)
    assert int(rngs.default.count.value) == 1  # one key drawn to split, then restored
    assert rngs.default.key.value.shape == ()
    return stack


CARRY_STATS = nnx.StateAxes({nnx.Param: 0, nnx.BatchStat: nnx.Carry})


def loop(w: Any, b: Any, x: Any, reverse: bool = False) -> tuple[Any, Any]:
    """The reference: a Python loop over the layer slices of the raw arrays."""
    mean = jnp.zeros(D)
    order = range(LAYERS - 1, -1, -1) if reverse else range(LAYERS)
    for i in order:
        x = jnp.tanh(x @ w[i] + b[i][None])
        mean = 0.5 * mean + 0.5 * x.mean(0)
    return x, mean


def test_layers_created_with_vmap_and_split_rngs_are_distinct() -> None:
    stack = make_stack()
    assert type(stack) is BlockStack
    assert stack.w.shape == (LAYERS, D, D) and stack.calls.shape == ()
    # Independent keys: layer i draws from fold_in(split(fold_in(key(0), 0), L)[i], n).
    keys = jax.random.split(jax.random.fold_in(jax.random.key(0), 0), LAYERS)
    for i in range(LAYERS):
        k = keys[i]
        np.testing.assert_allclose(
            stack.w.value[i], jax.random.normal(jax.random.fold_in(k, 0), (D, D)) / 2, rtol=1e-6
        )
        np.testing.assert_allclose(
            stack.b.value[i], jax.random.normal(jax.random.fold_in(k, 1), (D,)), rtol=1e-6
        )
    assert len({np.asarray(stack.w.value[i]).tobytes() for i in range(LAYERS)}) == LAYERS


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_over_layers_with_remat_equals_a_python_loop(reverse: bool) -> None:
    stack = make_stack()
    w, b = stack.w.value, stack.b.value
    x = jnp.linspace(-1, 1, 3 * D).reshape(3, D)

    @nnx.scan(in_axes=(nnx.Carry, CARRY_STATS), out_axes=nnx.Carry, reverse=reverse)
    @nnx.remat
    def forward(x: jax.Array, layer: Block) -> jax.Array:
        assert layer.w.shape == (D, D) and layer.calls.shape == ()
        return layer(x)

    y = forward(x, stack)
    ey, emean = loop(w, b, x, reverse)
    np.testing.assert_allclose(y, ey, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stack.mean.value, emean, rtol=1e-5, atol=1e-6)
    assert int(stack.calls.value) == LAYERS  # carried: one counter through all layers
    assert stack.w.value is w  # scanned Params unchanged: not rewritten


def test_grad_through_scan_over_layers_equals_jax_grad_of_the_loop() -> None:
    stack = make_stack()
    w, b = stack.w.value, stack.b.value
    x = jnp.linspace(-1, 1, 3 * D).reshape(3, D)

    @nnx.scan(in_axes=(nnx.Carry, CARRY_STATS), out_axes=nnx.Carry)
    @nnx.remat
    def forward(x: jax.Array, layer: Block) -> jax.Array:
        return layer(x)

    def loss(stack: Block, x: jax.Array) -> jax.Array:
        return jnp.sum(forward(x, stack) ** 2)

    value, grads = nnx.jit(nnx.value_and_grad(loss))(stack, x)
    ev, (gw, gb) = jax.value_and_grad(lambda w, b: jnp.sum(loop(w, b, x)[0] ** 2), argnums=(0, 1))(
        w, b
    )
    np.testing.assert_allclose(value, ev, rtol=1e-5)
    np.testing.assert_allclose(grads["w"].value, gw, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(grads["b"].value, gb, rtol=1e-4, atol=1e-6)
    assert int(stack.calls.value) == LAYERS  # the BatchStat update came out of grad


def test_scan_collects_per_layer_outputs_and_metadata() -> None:
    stack = make_stack()
    stack.w.set_metadata("out_sharding", ("layers", None, "model"))
    x = jnp.ones((2, D))
    seen: list[Any] = []

    @nnx.scan(
        in_axes=(nnx.Carry, CARRY_STATS),
        out_axes=(nnx.Carry, 0),
        transform_metadata={nnx.PARTITION_NAME: "layers"},
    )
    def forward(x: jax.Array, layer: Block) -> tuple[jax.Array, jax.Array]:
        seen.append(layer.w.out_sharding)
        y = layer(x)
        return y, y.sum()

    y, sums = forward(x, stack)
    assert seen == [(None, "model")]
    assert stack.w.out_sharding == ("layers", None, "model")
    ref, expected_sums = x, []
    for i in range(LAYERS):
        ref = jnp.tanh(ref @ stack.w.value[i] + stack.b.value[i][None])
        expected_sums.append(ref.sum())
    np.testing.assert_allclose(y, ref, rtol=1e-5)
    np.testing.assert_allclose(sums, expected_sums, rtol=1e-5)


# -- structure rules ---------------------------------------------------------------------------------------


def test_a_carry_whose_structure_changes_names_the_path() -> None:
    acc = Accumulator()
    before = nnx.clone(acc)

    @nnx.scan
    def grows(acc: Accumulator, x: jax.Array) -> tuple[Accumulator, jax.Array]:
        acc.extra = nnx.Param(x)
        return acc, x

    with pytest.raises(nnx.CarryStructureError, match=r"carry\[0\]\.extra") as info:
        grows(acc, XS)
    assert isinstance(info.value, ValueError)
    assert_graphs_equal(acc, before)

    @nnx.scan
    def new_key(c: dict[str, Any], x: jax.Array) -> tuple[dict[str, Any], jax.Array]:
        return {"a": c["a"], "b": x}, x

    with pytest.raises(nnx.CarryStructureError, match=r"carry\[0\]\['b'\]"):
        new_key({"a": jnp.zeros(3)}, XS)


def test_a_carry_whose_shape_changes_names_the_path() -> None:
    # Regression: JAX's own error named only the flat position of the leaf.
    acc = Accumulator()

    @nnx.scan
    def widens(acc: Accumulator, x: jax.Array) -> tuple[Accumulator, jax.Array]:
        acc.total.value = jnp.concatenate([acc.total.value, x])
        return acc, x

    with pytest.raises(
        nnx.CarryStructureError, match=r"carry\[0\]\.total from float32\[3\] to float32\[6\]"
    ):
        widens(acc, XS)

    m = Node(w=nnx.Param(jnp.ones((5, 2))), s=nnx.BatchStat(jnp.zeros(2)))
    axes = nnx.StateAxes({nnx.Param: 0, nnx.BatchStat: nnx.Carry})

    @nnx.scan(in_axes=(axes,), out_axes=0)
    def cast(m: Node) -> None:
        m.s.value = m.s.value.astype(jnp.int32)

    with pytest.raises(
        nnx.CarryStructureError, match=r"args\[0\]\.s from float32\[2\] to int32\[2\]"
    ):
        cast(m)
    np.testing.assert_array_equal(m.s.value, np.zeros(2, np.float32))


def test_a_carried_sub_state_must_keep_its_variables() -> None:
    m = Node(w=nnx.Param(jnp.ones((3, 2))), s=nnx.BatchStat(jnp.zeros(2)))
    axes = nnx.StateAxes({nnx.Param: 0, nnx.BatchStat: nnx.Carry})

    @nnx.scan(in_axes=(axes,), out_axes=0)
    def adds(m: Node) -> None:
        m.t = nnx.BatchStat(jnp.zeros(()))

    with pytest.raises(nnx.CarryStructureError, match="changed which sub-states are carried"):
        adds(m)
    assert not hasattr(m, "t")


def test_a_modified_broadcast_sub_state_is_discarded_with_a_warning() -> None:
    m = Node(w=nnx.Param(jnp.ones((3, 2))), s=nnx.BatchStat(jnp.full(2, 2.0)))
    axes = nnx.StateAxes({nnx.Param: 0, nnx.BatchStat: None})

    @nnx.scan(in_axes=(nnx.Carry, axes), out_axes=nnx.Carry)
    def reads(c: jax.Array, m: Node) -> jax.Array:
        return c + m.w * m.s

    np.testing.assert_array_equal(reads(jnp.zeros(2), m), np.full(2, 6.0))

    @nnx.scan(in_axes=(nnx.Carry, axes), out_axes=nnx.Carry)
    def writes(c: jax.Array, m: Node) -> jax.Array:
        m.s += 1
        return c + m.w * m.s

    # As in Flax NNX 0.12 (TestScan.test_complex: BatchNorm stats broadcast): every
    # step sees the value passed in and the change is discarded; flaxgraph warns.
    with pytest.warns(
        BroadcastChangeWarning, match=r"broadcast \(None\) BatchStat at args\[1\]\.s"
    ):
        out = writes(jnp.zeros(2), m)
    np.testing.assert_array_equal(out, np.full(2, 9.0))
    np.testing.assert_array_equal(m.s.value, np.full(2, 2.0))


def test_broadcast_rng_streams_give_every_step_the_same_keys() -> None:
    # Flax NNX 0.12 (TestScan.test_scan_broadcast_keys): a broadcast stream is not
    # advanced; a scanned one gives each step its own keys.
    rngs = nnx.Rngs(params=jax.random.split(jax.random.key(0), 3), dropout=1)
    axes = nnx.StateAxes({"params": 0, ...: None})

    @nnx.scan(in_axes=(nnx.Carry, axes), length=3)
    def keys(c: tuple[()], rngs: nnx.Rngs) -> tuple[tuple[()], tuple[jax.Array, jax.Array]]:
        return c, (rngs.params(), rngs.dropout())

    # flaxgraph says so (flax#4195), naming the broadcast stream only.
    with pytest.warns(nnx.RngBroadcastWarning, match=r"at args\[1\]\.dropout was drawn") as caught:
        _, (params, dropout) = keys((), rngs)
    assert len(caught) == 1 and "params" not in str(caught[0].message)
    assert len(set(np.asarray(jax.random.key_data(params)).reshape(3, -1).sum(1))) == 3
    assert len(set(np.asarray(jax.random.key_data(dropout)).reshape(3, -1).sum(1))) == 1
    assert int(rngs.dropout.count.value) == 0


def test_an_invalid_value_inside_state_axes_is_a_prefix_error() -> None:
    m = Node(w=nnx.Param(jnp.ones((3, 2))))
    axes = nnx.StateAxes({nnx.Param: "layers"})
    with pytest.raises(nnx.PrefixError, match=r"'layers' is not a valid in_axes value"):
        nnx.scan(lambda c, m: (c, None), in_axes=(nnx.Carry, axes))(jnp.zeros(()), m)


def test_an_object_both_carried_and_scanned_is_rejected() -> None:
    m = Node(w=nnx.Param(jnp.ones((3, 2))))
    with pytest.raises(nnx.CarryStructureError, match="both in scan's carry and in a scanned"):
        nnx.scan(lambda c, x: (c, None))(m, m)


def test_callers_objects_are_unchanged_when_the_body_raises() -> None:
    acc = Accumulator()
    m = Node(w=nnx.Param(jnp.ones((5, 3))))
    before_acc, before_m = nnx.clone(acc), nnx.clone(m)
    total = acc.total.value

    @nnx.scan
    def body(acc: Accumulator, m: Node) -> tuple[Accumulator, None]:
        acc.total.value = acc.total.value + m.w
        m.w.value = m.w.value * 2
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        body(acc, m)
    assert acc.total.value is total
    assert_graphs_equal(acc, before_acc)
    assert_graphs_equal(m, before_m)


def test_captured_objects_may_not_be_mutated() -> None:
    acc = Accumulator()

    def body(c: jax.Array, x: jax.Array) -> tuple[jax.Array, None]:
        acc.total.value = x
        return c, None

    with pytest.raises(nnx.TraceContextError):
        nnx.scan(body)(jnp.zeros(()), XS)
    np.testing.assert_array_equal(acc.total.value, np.zeros(3))


def test_eager_scan_runs_compiled_and_step_by_step_under_disable_jit():
    # An eager nnx.scan runs as one compiled call (its body traced once, as
    # jax.lax.scan does); under jax.disable_jit() the body runs on concrete values,
    # once per step, as jax.lax.scan's does.
    layers = nnx.vmap(lambda key: nnx.Linear(2, 2, rngs=nnx.Rngs(key)))(jnp.arange(3))
    seen = []

    def body(x, layer):
        seen.append(isinstance(x, jax.core.Tracer))
        return layer(x)

    scanned = nnx.scan(body, in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
    compiled = [scanned(jnp.ones(2), layers) for _ in range(3)]
    assert seen == [True]
    with jax.disable_jit():
        stepwise = scanned(jnp.ones(2), layers)
    assert seen == [True, False, False, False]
    np.testing.assert_allclose(stepwise, compiled[0], rtol=1e-6)
