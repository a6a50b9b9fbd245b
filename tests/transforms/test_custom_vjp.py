"""nnx.custom_vjp: custom backward rules for functions of objects.

The backward rules here deliberately differ from the true derivative (scaled by
10), so a test can tell the custom rule ran; expected values are computed with
plain ``jax.numpy`` on the explicit arrays.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx
from flaxgraph.testing import Node


def make() -> Node:
    return Node(w=nnx.Param(jnp.array([0.5, 1.0, 2.0])), s=nnx.BatchStat(jnp.zeros(())))


X = jnp.array([3.0, 4.0, -1.0])


@nnx.custom_vjp
def f(m, x):
    return jnp.sin(m.w.value) * x


def f_fwd(m, x):
    return f(m, x), (jnp.cos(m.w.value), jnp.sin(m.w.value), x)


def f_bwd(res, g):
    cos_w, sin_w, x = res
    return nnx.State({"w": nnx.Param(10 * cos_w * x * g)}), sin_w * g


f.defvjp(f_fwd, f_bwd)


def test_primal_value():
    m = make()
    np.testing.assert_allclose(f(m, X), jnp.sin(m.w.value) * X, rtol=1e-6)


def test_the_custom_rule_gives_the_gradients():
    m = make()
    w = m.w.value
    g_m, g_x = nnx.grad(lambda m, x: jnp.sum(f(m, x)), argnums=(0, 1))(m, X)
    assert isinstance(g_m, nnx.State) and set(g_m) == {"w"}
    np.testing.assert_allclose(g_m["w"].value, 10 * jnp.cos(w) * X, rtol=1e-6)
    np.testing.assert_allclose(g_x, jnp.sin(w), rtol=1e-6)
    # under plain jax.grad too (the object is captured and only read)
    np.testing.assert_allclose(jax.grad(lambda x: jnp.sum(f(m, x)))(X), jnp.sin(w), rtol=1e-6)


def test_under_jit():
    m = make()
    g = nnx.jit(nnx.grad(lambda m, x: jnp.sum(f(m, x))))(m, X)
    np.testing.assert_allclose(g["w"].value, 10 * jnp.cos(m.w.value) * X, rtol=1e-6)


@functools.partial(nnx.custom_vjp, nondiff_argnums=(0,))
def power(n, m, x):
    return m.w.value**n * x


def power_fwd(n, m, x):
    return power(n, m, x), (m.w.value, x)


def power_bwd(n, res, g):
    w, x = res
    assert isinstance(n, int)  # nondiff arguments arrive unchanged
    return nnx.State({"w": nnx.Param(10 * n * w ** (n - 1) * x * g)}), w**n * g


power.defvjp(power_fwd, power_bwd)


def test_nondiff_argnums():
    m = make()
    w = m.w.value
    g = nnx.grad(lambda m, x: jnp.sum(power(3, m, x)))(m, X)
    np.testing.assert_allclose(g["w"].value, 10 * 3 * w**2 * X, rtol=1e-5)
    gx = nnx.grad(lambda m, x: jnp.sum(power(2, m, x)), argnums=1)(m, X)
    np.testing.assert_allclose(gx, w**2, rtol=1e-6)


def test_missing_cotangent_entries_count_as_zero():
    @nnx.custom_vjp
    def two(m, x):
        return jnp.sum(m.a.value * x + m.b.value)

    def fwd(m, x):
        return two(m, x), x

    def bwd(x, g):
        return nnx.State({"a": nnx.Param(x * g)}), jnp.zeros_like(x)

    two.defvjp(fwd, bwd)
    m = Node(a=nnx.Param(jnp.ones(3)), b=nnx.Param(jnp.ones(3)))
    g = nnx.grad(two)(m, X)
    np.testing.assert_allclose(g["a"].value, X)
    np.testing.assert_allclose(g["b"].value, jnp.zeros(3))


def test_state_updates_in_the_function_are_applied():
    @nnx.custom_vjp
    def counted(m, x):
        m.s.value = m.s.value + 1
        return m.w.value * x

    def fwd(m, x):
        m.s.value = m.s.value + 1
        return m.w.value * x, x

    def bwd(x, g):
        return nnx.State({"w": nnx.Param(x * g)}), g

    counted.defvjp(fwd, bwd)
    m = make()
    np.testing.assert_allclose(counted(m, X), m.w.value * X)
    assert float(m.s.value) == 1.0
    g = nnx.grad(lambda m, x: jnp.sum(counted(m, x)))(m, X)
    np.testing.assert_allclose(g["w"].value, X)
    assert float(m.s.value) == 2.0  # fwd ran once under grad


def test_wrong_number_of_cotangents():
    @nnx.custom_vjp
    def g(m, x):
        return jnp.sum(m.w.value * x)

    g.defvjp(lambda m, x: (g(m, x), None), lambda res, ct: (nnx.State({}),))
    with pytest.raises(
        ValueError, match=r"one cotangent per differentiable argument \(2\), got tuple of length 1"
    ):
        nnx.grad(g)(make(), X)


def test_calling_before_defvjp():
    @nnx.custom_vjp
    def h(m):
        return jnp.sum(m.w.value)

    with pytest.raises(TypeError, match=r"call defvjp\(fwd, bwd\)"):
        h(make())


def test_as_a_method():
    class Layer(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.array([1.0, 2.0]))

        @nnx.custom_vjp
        def __call__(self, x):
            return self.w.value * x

    def fwd(self, x):
        return self.w.value * x, x

    def bwd(x, g):
        return nnx.State({"w": nnx.Param(10 * x * g)}), g

    Layer.__call__.defvjp(fwd, bwd)
    layer = Layer()
    x = jnp.array([3.0, 5.0])
    np.testing.assert_allclose(layer(x), layer.w.value * x)
    g = nnx.grad(lambda layer, x: jnp.sum(layer(x)))(layer, x)
    np.testing.assert_allclose(g["w"].value, 10 * x)


def test_a_failing_forward_leaves_objects_unchanged():
    @nnx.custom_vjp
    def bad(m, x):
        m.s.value = m.s.value + 1
        m.extra = nnx.Param(x)
        raise RuntimeError("boom")

    bad.defvjp(lambda m, x: (bad(m, x), None), lambda res, g: (nnx.State({}), g))
    m = make()
    s, v = m.s, m.s.value
    with pytest.raises(RuntimeError, match="boom"):
        bad(m, X)
    assert m.s is s and m.s.value is v and not hasattr(m, "extra")


def test_objects_in_residuals():
    @nnx.custom_vjp
    def g(m, x):
        return jnp.sin(m.w.value) * x

    def fwd(m, x):
        return g(m, x), (m, x)  # the object itself is a residual

    def bwd(res, ct):
        m, x = res
        return nnx.State({"w": nnx.Param(10 * jnp.cos(m.w.value) * x * ct)}), jnp.sin(
            m.w.value
        ) * ct

    g.defvjp(fwd, bwd)
    m = make()
    grads = nnx.grad(lambda m, x: jnp.sum(g(m, x)), argnums=(0, 1))(m, X)
    np.testing.assert_allclose(grads[0]["w"].value, 10 * jnp.cos(m.w.value) * X, rtol=1e-6)
    np.testing.assert_allclose(grads[1], jnp.sin(m.w.value), rtol=1e-6)


# -- Flax NNX 0.12 details (transforms_test.py::TestCustomVJP) ----------------------------------------


def test_bwd_declaring_updates_g_gets_the_cotangents_of_the_changes():
    # The function doubles m.s; the loss depends on the new m.s, so its cotangent
    # (d loss / d new s = 3) reaches bwd as updates_g; unchanged leaves are None.
    seen = {}

    @nnx.custom_vjp(graph_updates=False)
    def g(m, x):
        m.s.value = m.s.value * 2 + 1
        return jnp.sum(m.w.value * x)

    def g_fwd(m, x):
        return g(m, x), (x,)

    def g_bwd(res, out_g, updates_g):
        (x,) = res
        m_up, x_up = updates_g
        seen["s"], seen["w"], seen["x"] = m_up.s, m_up.w, x_up
        m_g = jax.tree.map(lambda v: v, nnx.clone(make()))
        m_g.w.value = out_g * x
        m_g.s.value = jnp.zeros(())
        return m_g, jnp.zeros_like(x)

    g.defvjp(g_fwd, g_bwd)

    def loss(m):
        y = g(m, X)
        return y + 3 * m.s.value

    grads = nnx.grad(loss, graph=False)(make())
    np.testing.assert_allclose(grads.w.value, X)
    assert isinstance(seen["s"], nnx.BatchStat) and float(seen["s"].value) == 3.0
    assert seen["w"] is None and seen["x"] is None


def test_a_bwd_without_updates_g_keeps_jax_signature():
    calls = []

    @nnx.custom_vjp(graph_updates=False)
    def g(m):
        m.s.value = m.s.value + 1
        return jnp.sum(m.w.value)

    g.defvjp(lambda m: (g(m), ()), lambda res, out_g: calls.append(out_g) or (make(),))
    nnx.grad(lambda m: g(m), graph=False)(make())
    assert len(calls) == 1


def test_diffstate_in_nondiff_argnums_picks_the_differentiable_substate():
    m = nnx.Dict(x=nnx.Param(jnp.array(1.0)), y=nnx.Param(jnp.array(2.0)))
    only_x = nnx.DiffState(0, nnx.PathContains("x"))

    @nnx.custom_vjp(nondiff_argnums=(only_x,))
    def g(m):
        return jnp.sin(m.x.value) * m.y.value

    def g_bwd(res, out_g):
        cos_x, y = res
        return (nnx.State({"x": nnx.Param(10 * cos_x * y * out_g)}),)

    g.defvjp(lambda m: (g(m), (jnp.cos(m.x.value), m.y.value)), g_bwd)
    grads = nnx.grad(g, argnums=nnx.DiffState(0, ...))(m)
    np.testing.assert_allclose(grads["x"].value, 10 * jnp.cos(1.0) * 2.0)
    np.testing.assert_allclose(grads["y"].value, 0.0)  # y is not differentiated


def test_diffstate_in_nondiff_argnums_needs_graph_updates():
    with pytest.raises(ValueError, match="`nondiff_argnums` cannot contain `DiffState` objects"):
        nnx.custom_vjp(lambda m: m, nondiff_argnums=(nnx.DiffState(0, ...),), graph=False)


def test_a_variable_both_nondiff_and_differentiated_is_an_error():
    v = nnx.Param(jnp.array(1.0))
    box = nnx.Dict(v=v)

    @nnx.custom_vjp(nondiff_argnums=(1,), graph_updates=False)
    def g(a, b):
        return a.v.value + b.value

    g.defvjp(lambda a, b: (g(a, b), ()), lambda b, res, out_g: (out_g,))
    with pytest.raises(ValueError, match=r"(?s)Duplicate Param.*args\[1\].*args\[0\]\.v.*Fix"):
        g(box, v)
    assert float(v.value) == 1.0
