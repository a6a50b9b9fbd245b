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
