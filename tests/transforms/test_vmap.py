"""nnx.vmap: objects as pytrees of their arrays, StateAxes, outputs, lifting guarantees.

Differential where possible: the vmapped call over objects must equal a plain
``jax.vmap`` over the objects' arrays, or a Python loop over the slices, with
the reference computed from the arrays alone (no flaxgraph in it).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_unchanged, snapshot

import flaxgraph as nnx
from flaxgraph.testing import Node, assert_graphs_equal


class Count(nnx.Variable):
    pass


class Linear(nnx.Module):
    def __init__(self, w: Any, b: Any):
        self.w, self.b = nnx.Param(w), nnx.Param(b)

    def __call__(self, x: jax.Array) -> jax.Array:
        return x @ self.w + self.b


W = jnp.arange(24.0).reshape(4, 2, 3) / 10
B = jnp.arange(12.0).reshape(4, 3) / 7
X = jnp.arange(8.0).reshape(4, 2) - 3


def stacked() -> Linear:
    return Linear(W, B)


def apply(m: Linear, x: jax.Array) -> jax.Array:
    assert m.w.ndim == 2 and x.ndim == 1
    return m(x)


def reference(w: Any, b: Any, x: Any) -> jax.Array:
    return jax.vmap(lambda w, b, x: x @ w + b)(w, b, x)


# -- the call forms ---------------------------------------------------------------------------------


def test_function_form_decorator_without_and_with_arguments() -> None:
    expected = reference(W, B, X)

    np.testing.assert_allclose(nnx.vmap(apply)(stacked(), X), expected, rtol=1e-6)

    @nnx.vmap
    def bare(m: Linear, x: jax.Array) -> jax.Array:
        return apply(m, x)

    np.testing.assert_allclose(bare(stacked(), X), expected, rtol=1e-6)

    @nnx.vmap(in_axes=(0, 0), out_axes=1)
    def with_args(m: Linear, x: jax.Array) -> jax.Array:
        return apply(m, x)

    np.testing.assert_allclose(with_args(stacked(), X), expected.T, rtol=1e-6)


def test_method_decorated_and_module_instance_and_bound_method() -> None:
    class Stack(Linear):
        @nnx.vmap(in_axes=(0, None))
        def shared_input(self, x: jax.Array) -> jax.Array:
            return x @ self.w + self.b

    m = Stack(W, B)
    x0 = X[0]
    np.testing.assert_allclose(
        m.shared_input(x0), reference(W, B, jnp.broadcast_to(x0, (4, 2))), rtol=1e-6
    )
    # nnx.vmap(instance): the instance is mapped on axis 0; in_axes covers the rest.
    np.testing.assert_allclose(nnx.vmap(m)(X), reference(W, B, X), rtol=1e-6)
    np.testing.assert_allclose(
        nnx.vmap(m, in_axes=(None,))(x0),
        reference(W, B, jnp.broadcast_to(x0, (4, 2))),
        rtol=1e-6,
    )
    # A bound method is refused (Flax NNX 0.12); the unbound method takes the instance.
    with pytest.raises(ValueError, match=r"nnx\.vmap does not support bound methods"):
        nnx.vmap(m.__call__)
    np.testing.assert_allclose(nnx.vmap(Stack.__call__)(m, X), reference(W, B, X), rtol=1e-6)


# -- objects as pytrees of their arrays --------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_object_in_axes_maps_every_array_on_that_axis(axis: int) -> None:
    w = jnp.moveaxis(W, 0, axis)  # the batch of 4 now sits at `axis`
    b = jnp.moveaxis(B, 0, axis)
    m = Linear(w, b)
    y = nnx.vmap(apply, in_axes=(axis, 0))(m, X)
    np.testing.assert_allclose(y, reference(W, B, X), rtol=1e-6)
    assert m.w.value is w and m.b.value is b  # unchanged: not even rewritten


def test_prefix_patterns_over_containers_of_objects_match_jax_vmap() -> None:
    a, b = Linear(W, B), Linear(W[0], B[0])
    xs = {"x": X, "scale": jnp.arange(4.0)}

    def f(pair: Any, xs: Any) -> Any:
        m, shared = pair
        return {"y": m(xs["x"]) * xs["scale"], "z": shared(xs["x"])}

    in_axes = ((0, None), {"x": 0, "scale": 0})
    out = nnx.vmap(f, in_axes=in_axes, out_axes={"y": 0, "z": 1})((a, b), xs)

    def pure(pair: Any, xs: Any) -> Any:
        (w, bb), (w0, b0) = pair
        return {"y": (xs["x"] @ w + bb) * xs["scale"], "z": xs["x"] @ w0 + b0}

    expected = jax.vmap(pure, in_axes=in_axes, out_axes={"y": 0, "z": 1})(
        ((W, B), (W[0], B[0])), xs
    )
    np.testing.assert_allclose(out["y"], expected["y"], rtol=1e-6)
    np.testing.assert_allclose(out["z"], expected["z"], rtol=1e-6)


def test_a_variable_can_be_an_argument_and_an_output() -> None:
    v = nnx.Param(jnp.arange(6.0).reshape(3, 2))

    def double(v: nnx.Param) -> nnx.Param:
        v.value = v.value * 2
        return v

    out = nnx.vmap(double)(v)
    assert out is v
    np.testing.assert_array_equal(v.value, np.arange(6.0).reshape(3, 2) * 2)


def test_keyword_arguments_are_mapped_on_axis_0() -> None:
    m = stacked()
    y = nnx.vmap(lambda x, *, m: m(x))(X, m=m)
    np.testing.assert_allclose(y, reference(W, B, X), rtol=1e-6)


def test_in_axes_tuple_with_the_wrong_length_is_an_error() -> None:
    with pytest.raises(ValueError, match="in_axes has 3 entries"):
        nnx.vmap(apply, in_axes=(0, 0, 0))(stacked(), X)


# -- StateAxes ----------------------------------------------------------------------------------------


def test_state_axes_give_each_sub_state_its_own_axis() -> None:
    m = Node(
        w=nnx.Param(W.transpose(1, 0, 2)), c=Count(jnp.arange(4)), s=nnx.BatchStat(jnp.ones(3))
    )
    axes = nnx.StateAxes({nnx.Param: 1, Count: 0, nnx.BatchStat: None})

    def f(m: Node, x: jax.Array) -> jax.Array:
        m.c += 10
        return x @ m.w + m.s

    y = nnx.vmap(f, in_axes=(axes, 0))(m, X)
    expected = jax.vmap(lambda w, x: x @ w + 1.0, in_axes=(1, 0))(W.transpose(1, 0, 2), X)
    np.testing.assert_allclose(y, expected, rtol=1e-6)
    np.testing.assert_array_equal(m.c.value, np.arange(4) + 10)
    assert m.w.shape == (2, 4, 3) and m.s.shape == (3,)


def test_state_axes_on_outputs_place_each_sub_state() -> None:
    @nnx.vmap(
        in_axes=0,
        out_axes=nnx.StateAxes({nnx.Param: 1, nnx.BatchStat: None}),
    )
    def make(seed: jax.Array) -> Node:
        return Node(w=nnx.Param(jnp.full((2,), seed, jnp.float32)), s=nnx.BatchStat(jnp.zeros(())))

    m = make(jnp.arange(5))
    assert m.w.shape == (2, 5) and m.s.shape == ()
    np.testing.assert_array_equal(m.w.value, np.tile(np.arange(5.0), (2, 1)))


def test_state_axes_filter_that_matches_nothing_is_a_prefix_error() -> None:
    m = Node(w=nnx.Param(W), c=Count(jnp.zeros(4)))
    before = snapshot(m)
    with pytest.raises(nnx.PrefixError, match=r"args\[0\]\.c matches none of the filters"):
        nnx.vmap(lambda m: None, in_axes=(nnx.StateAxes({nnx.Param: 0}),))(m)
    # A StateAxes as the whole in_axes stands for the argument tuple: also an error.
    with pytest.raises(nnx.PrefixError, match="StateAxes can only be used for an object"):
        nnx.vmap(lambda m: None, in_axes=nnx.StateAxes({...: 0}))(m)
    assert_unchanged(m, before)


@pytest.mark.parametrize("bad", [nnx.Carry, "x", 1.5])
def test_an_invalid_axis_inside_state_axes_is_a_prefix_error(bad: Any) -> None:
    # Regression: it used to fail later with "Internal error: prefix ... is not among
    # the groups" (Carry is a scan marker, not a vmap axis).
    m = Node(w=nnx.Param(W))
    axes = nnx.StateAxes({nnx.Param: bad})
    with pytest.raises(nnx.PrefixError, match=r"Node at args\[0\].*is not a valid in_axes value"):
        nnx.vmap(lambda m: None, in_axes=(axes,))(m)
    with pytest.raises(nnx.PrefixError, match=r"Node at output.*is not a valid out_axes value"):
        nnx.vmap(lambda m: m, out_axes=axes)(m)


def test_state_axes_for_a_container_is_a_prefix_error_naming_it() -> None:
    m = stacked()
    axes = nnx.StateAxes({...: 0})
    with pytest.raises(nnx.PrefixError, match=r"tuple at args\[0\]"):
        nnx.vmap(lambda ms: None, in_axes=(axes,))((m, m))
    with pytest.raises(nnx.PrefixError, match=r"list at args\[0\]\['k'\]"):
        nnx.vmap(lambda d: None, in_axes=({"k": axes},))({"k": [m]})


# -- objects as outputs ----------------------------------------------------------------------------------


def test_axis_size_with_no_mapped_input_builds_a_stack() -> None:
    @nnx.vmap(in_axes=None, axis_size=3)
    def make(scale: float) -> Linear:
        return Linear(jnp.ones((2, 2)) * scale, jnp.zeros(2))

    m = make(2.0)
    assert type(m) is Linear
    assert m.w.shape == (3, 2, 2) and m.b.shape == (3, 2)
    np.testing.assert_array_equal(m.w.value, np.full((3, 2, 2), 2.0))


def test_output_that_is_an_input_is_the_callers_object() -> None:
    m, other = stacked(), stacked()

    @nnx.vmap(in_axes=(0, 0))
    def f(m: Linear, other: Linear) -> Any:
        m.b.value = m.b.value + 1
        return {"m": m, "w": other.w, "new": Node(inner=m)}

    out = f(m, other)
    assert out["m"] is m and out["w"] is other.w
    assert type(out["new"]) is Node and out["new"].inner is m
    np.testing.assert_allclose(m.b.value, B + 1, rtol=1e-6)


def test_aliases_given_the_same_axes_in_and_out_are_accepted() -> None:
    # @nnx.vmap(in_axes=(m1_axes, m2_axes, m1_axes), out_axes=m2_axes)
    m1 = Node(w=nnx.Param(W), c=Count(jnp.zeros((), jnp.int32)))
    m2 = Node(w=nnx.Param(jnp.moveaxis(W, 0, 1)))
    m1_axes = nnx.StateAxes({nnx.Param: 0, Count: None})
    m2_axes = 1

    def body(m1: Node, m2: Node, m1_alias: Node) -> Node:
        assert m1 is m1_alias
        m1_alias.c += 1
        m2.w.value = m2.w.value + m1.w.value
        return m2

    f = nnx.vmap(body, in_axes=(m1_axes, m2_axes, m1_axes), out_axes=m2_axes)
    assert f(m1, m2, m1) is m2
    assert int(m1.c.value) == 1
    np.testing.assert_allclose(m2.w.value, np.moveaxis(np.asarray(W) * 2, 0, 1), rtol=1e-6)
    # ...and the same program with m2 returned on another axis is rejected
    g = nnx.vmap(body, in_axes=(m1_axes, m2_axes, m1_axes), out_axes=0)
    before = m2.w.value
    with pytest.raises(nnx.InconsistentAliasingError, match=r"output\.w: 0"):
        g(m1, m2, m1)
    assert m2.w.value is before and int(m1.c.value) == 1


def test_shared_variable_across_arguments_with_the_same_axes_is_updated_once() -> None:
    shared = Count(jnp.zeros(4, jnp.int32))
    a, b = Node(c=shared), Node(c=shared, w=nnx.Param(W))

    def f(a: Node, b: Node) -> None:
        assert a.c is b.c
        a.c += 1
        b.c += 1

    nnx.vmap(f)(a, b)
    assert a.c is shared and b.c is shared
    np.testing.assert_array_equal(shared.value, np.full(4, 2))


# -- update propagation ---------------------------------------------------------------------------------


def test_updates_equal_a_python_loop_over_the_slices() -> None:
    m = Node(w=nnx.Param(W), c=Count(jnp.arange(4)), t=nnx.BatchStat(jnp.zeros((4, 3))))

    def step(m: Node, x: jax.Array) -> jax.Array:
        y = x @ m.w
        m.t.value = m.t.value + y
        m.c += 1
        m.last = nnx.Param(y * 2)  # a new attribute, created per example
        return jnp.sum(y)

    expected_t, expected_last, expected_out = [], [], []
    for i in range(4):
        y = np.asarray(X[i] @ W[i])
        expected_t.append(y)
        expected_last.append(y * 2)
        expected_out.append(y.sum())
    out = nnx.vmap(step)(m, X)
    np.testing.assert_allclose(out, expected_out, rtol=1e-6)
    np.testing.assert_allclose(m.t.value, np.stack(expected_t), rtol=1e-6)
    np.testing.assert_allclose(m.last.value, np.stack(expected_last), rtol=1e-6)
    np.testing.assert_array_equal(m.c.value, np.arange(1, 5))
    assert isinstance(m.last, nnx.Param)


def test_structural_updates_propagate_and_keep_sharing() -> None:
    m = Node(a=nnx.Param(jnp.ones((3, 2))), b=nnx.Param(jnp.zeros((3, 2))), sub=Node())
    a = m.a

    def f(m: Node) -> None:
        del m.b
        m.sub.link = m.a  # a new shared reference to an existing Variable
        m.sub.flag = "set"
        m.alias = m.sub

    nnx.vmap(f)(m)
    assert not hasattr(m, "b")
    assert m.sub.link is a and m.a is a and m.alias is m.sub
    assert m.sub.flag == "set"


# -- captured objects and exception safety -----------------------------------------------------------


def test_captured_objects_may_be_read_but_not_mutated_or_returned() -> None:
    captured = Linear(W[0], B[0])
    y = nnx.vmap(lambda x: captured(x))(X)
    np.testing.assert_allclose(y, X @ W[0] + B[0][None], rtol=1e-6)

    def mutate(x: jax.Array) -> jax.Array:
        captured.b.value = x
        return x

    before = snapshot(captured)
    with pytest.raises(nnx.TraceContextError, match="captured by closure"):
        nnx.vmap(mutate)(jnp.zeros((4, 3)))
    with pytest.raises(nnx.TraceContextError, match=r"Linear at output.*captured by closure"):
        nnx.vmap(lambda x: captured, axis_size=2, in_axes=None)(None)
    assert_unchanged(captured, before)


@pytest.mark.parametrize("failure", ["raise", "alias", "capture"])
def test_callers_objects_are_unchanged_when_the_call_fails(failure: str) -> None:
    m = Node(w=nnx.Param(W), c=Count(jnp.arange(4)), sub=Node(s=nnx.BatchStat(jnp.ones(4))))
    clone = nnx.clone(m)
    before = snapshot(m)
    outsider = Node(v=nnx.Param(jnp.zeros(())))

    def f(m: Node) -> Any:
        m.c += 1
        m.sub.s.value = m.sub.s.value * 3
        m.new = nnx.Param(jnp.ones(()))
        del m.w
        if failure == "raise":
            raise RuntimeError("boom")
        if failure == "capture":
            m.stolen = outsider  # storing a captured object into an argument
        return m

    out_axes = 1 if failure == "alias" else 0
    expected = {
        "raise": RuntimeError,
        "alias": nnx.InconsistentAliasingError,
        "capture": nnx.TraceContextError,
    }[failure]
    with pytest.raises(expected):
        nnx.vmap(f, out_axes=out_axes)(m)
    assert_unchanged(m, before)
    assert_graphs_equal(m, clone)


# -- jax options -------------------------------------------------------------------------------------------


def test_axis_name_collectives_over_objects() -> None:
    m = stacked()

    def centered(m: Linear) -> jax.Array:
        return m.b - jax.lax.pmean(m.b, "batch")

    out = nnx.vmap(centered, axis_name="batch")(m)
    np.testing.assert_allclose(out, B - B.mean(0, keepdims=True), rtol=1e-5, atol=1e-6)


# -- composition -------------------------------------------------------------------------------------------


def test_nested_vmap_over_objects_equals_jnp() -> None:
    grid = Node(w=nnx.Param(jnp.arange(12.0).reshape(3, 4)))

    @nnx.vmap
    @nnx.vmap
    def f(g: Node) -> jax.Array:
        assert g.w.ndim == 0
        g.w.value = g.w.value**2
        return g.w.value + 1

    out = f(grid)
    np.testing.assert_array_equal(grid.w.value, np.arange(12.0).reshape(3, 4) ** 2)
    np.testing.assert_array_equal(out, np.arange(12.0).reshape(3, 4) ** 2 + 1)


def test_grad_of_jit_of_vmap_matches_jax() -> None:
    m = stacked()

    @nnx.jit
    def loss(m: Linear, x: jax.Array) -> jax.Array:
        return jnp.sum(nnx.vmap(apply)(m, x) ** 2)

    grads = nnx.grad(loss)(m, X)
    gw, gb = jax.grad(lambda w, b: jnp.sum(reference(w, b, X) ** 2), argnums=(0, 1))(W, B)
    np.testing.assert_allclose(grads["w"].value, gw, rtol=1e-5)
    np.testing.assert_allclose(grads["b"].value, gb, rtol=1e-5)
