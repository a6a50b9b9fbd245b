"""grad, value_and_grad, vjp, jvp, remat over objects.

Gradients are checked against ``jax.grad``/``jax.vjp``/``jax.jvp`` of the same
computation written on explicit arrays.
"""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_unchanged, snapshot

import flaxgraph as nnx
from flaxgraph.testing import Block, Node, assert_graphs_equal


class Model(nnx.Module):
    def __init__(self, seed: int = 0):
        k1, k2 = jax.random.split(jax.random.key(seed))
        self.w = nnx.Param(jax.random.normal(k1, (3,)))
        self.b = nnx.Param(jax.random.normal(k2, ()))
        self.mean = nnx.BatchStat(jnp.zeros(()))
        self.rngs = nnx.Rngs(seed)


X = jnp.array([0.5, -1.0, 2.0])


def pure_loss(w: jax.Array, b: jax.Array, x: jax.Array) -> jax.Array:
    return jnp.sum(jnp.tanh(w * x) + b**2)


def loss(m: Model, x: jax.Array) -> jax.Array:
    m.mean.value = m.mean.value + jnp.mean(x)
    m.rngs.default()  # advances an RNG counter (not differentiated)
    return pure_loss(m.w.value, m.b.value, x)


# -- grad / value_and_grad --------------------------------------------------------------------


def test_grad_differentiates_params_and_updates_other_state():
    m = Model()
    eager = nnx.clone(m)
    w, b = m.w.value, m.b.value
    grads = nnx.grad(loss)(m, X)
    gw, gb = jax.grad(pure_loss, argnums=(0, 1))(w, b, X)
    assert isinstance(grads, nnx.State)
    assert set(grads) == {"w", "b"}  # Params only: no BatchStat, no RNG state
    assert type(grads["w"]) is nnx.Param and type(grads["b"]) is nnx.Param
    np.testing.assert_allclose(grads["w"].value, gw, rtol=1e-6)
    np.testing.assert_allclose(grads["b"].value, gb, rtol=1e-6)
    # non-differentiated state is updated in place, as the eager call does
    loss(eager, X)
    assert_graphs_equal(m, eager)
    assert float(m.mean.value) == pytest.approx(float(jnp.mean(X)))
    assert int(m.rngs.default.count.value) == 1


def test_value_and_grad_matches_jax():
    m = Model()
    w, b = m.w.value, m.b.value
    value, grads = nnx.value_and_grad(loss)(m, X)
    v_ref, (gw, gb) = jax.value_and_grad(pure_loss, argnums=(0, 1))(w, b, X)
    np.testing.assert_allclose(value, v_ref, rtol=1e-6)
    np.testing.assert_allclose(grads["w"].value, gw, rtol=1e-6)
    np.testing.assert_allclose(grads["b"].value, gb, rtol=1e-6)


def test_argnums_tuple_gives_state_for_objects_and_arrays_for_arrays():
    m = Model()
    w, b = m.w.value, m.b.value
    g_m, g_x = nnx.grad(loss, argnums=(0, 1))(m, X)
    gw, gx = jax.grad(pure_loss, argnums=(0, 2))(w, b, X)
    np.testing.assert_allclose(g_m["w"].value, gw, rtol=1e-6)
    assert isinstance(g_x, jax.Array)
    np.testing.assert_allclose(g_x, gx, rtol=1e-6)
    only_x = nnx.grad(loss, argnums=1)(m, X)
    np.testing.assert_allclose(only_x, gx, rtol=1e-6)


def test_gradient_structure_follows_the_argument():
    m, other = Model(0), Model(1)

    def f(d):
        return loss(d["m"], d["x"]) + jnp.sum(d["l"][0] ** 2) + jnp.sum(d["l"][1].w.value)

    d = {"m": m, "x": X, "l": [jnp.array(2.0), other]}
    g = nnx.grad(f)(d)
    assert set(g) == {"m", "x", "l"}
    assert isinstance(g["m"], nnx.State) and isinstance(g["l"][1], nnx.State)
    gw, gx = jax.grad(pure_loss, argnums=(0, 2))(m.w.value, m.b.value, X)
    np.testing.assert_allclose(g["m"]["w"].value, gw, rtol=1e-6)
    np.testing.assert_allclose(g["x"], gx, rtol=1e-6)
    np.testing.assert_allclose(g["l"][0], 4.0)
    np.testing.assert_allclose(g["l"][1]["w"].value, jnp.ones(3))


def test_diff_state_selects_a_sub_state():
    m = Model()
    w, b = m.w.value, m.b.value
    g = nnx.grad(loss, argnums=nnx.DiffState(0, nnx.PathContains("w")))(m, X)
    assert set(g) == {"w"}
    np.testing.assert_allclose(g["w"].value, jax.grad(pure_loss)(w, b, X), rtol=1e-6)
    # another kind: differentiate the BatchStat
    h = nnx.grad(
        lambda m: m.mean.value * 3 + jnp.sum(m.w.value), argnums=nnx.DiffState(0, nnx.BatchStat)
    )
    g = h(m)
    assert set(g) == {"mean"} and type(g["mean"]) is nnx.BatchStat
    assert float(g["mean"].value) == 3.0


def test_diff_state_and_int_mixed_in_argnums():
    m, other = Model(0), Model(1)

    def f(a, b):
        return pure_loss(a.w.value, a.b.value, X) + pure_loss(b.w.value, b.b.value, X)

    ga, gb = nnx.grad(f, argnums=(nnx.DiffState(0, nnx.PathContains("b")), 1))(m, other)
    assert set(ga) == {"b"} and set(gb) == {"w", "b"}
    np.testing.assert_allclose(
        ga["b"].value, jax.grad(pure_loss, argnums=1)(m.w.value, m.b.value, X), rtol=1e-6
    )


def test_has_aux_returns_objects_by_identity():
    m = Model()

    def f(m, x):
        return loss(m, x), {"m": m, "new": nnx.Param(x * 2), "w": m.w}

    grads, aux = nnx.grad(f, has_aux=True)(m, X)
    assert aux["m"] is m and aux["w"] is m.w
    assert isinstance(aux["new"], nnx.Param)
    np.testing.assert_allclose(aux["new"].value, X * 2)
    (_, aux2), grads2 = nnx.value_and_grad(f, has_aux=True)(m, X)
    assert aux2["m"] is m
    np.testing.assert_allclose(grads2["w"].value, grads["w"].value, rtol=1e-6)
    assert int(m.rngs.default.count.value) == 2


def test_has_aux_needs_a_pair():
    with pytest.raises(TypeError, match=r"has_aux=True the function must return a pair"):
        nnx.grad(lambda m: jnp.sum(m.w.value), has_aux=True)(Model())


def test_holomorphic():
    m = Node(z=nnx.Param(jnp.array(1.0 + 2.0j)))
    g = nnx.grad(lambda m: m.z.value**2, holomorphic=True)(m)
    expected = jax.grad(lambda z: z**2, holomorphic=True)(jnp.array(1.0 + 2.0j))
    np.testing.assert_allclose(g["z"].value, expected)
    with pytest.raises(TypeError, match="holomorphic"):
        nnx.grad(lambda m: m.z.value**2)(m)


def test_allow_int():
    m = Node(w=nnx.Param(jnp.ones(2)), i=nnx.Param(jnp.array(3)))
    with pytest.raises(TypeError, match="allow_int"):
        nnx.grad(lambda m: jnp.sum(m.w.value))(m)
    g = nnx.grad(lambda m: jnp.sum(m.w.value * m.i.value), allow_int=True)(m)
    ref = jax.grad(lambda w, i: jnp.sum(w * i), argnums=(0, 1), allow_int=True)(
        jnp.ones(2), jnp.array(3)
    )
    np.testing.assert_allclose(g["w"].value, ref[0])
    assert g["i"].value.dtype == ref[1].dtype  # float0, as jax gives


def test_grad_of_a_method_and_a_bound_method_is_refused():
    class Lin(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.array([1.0, 2.0]))

        def energy(self, x):
            return jnp.sum(self.w.value * x) ** 2

    lin = Lin()
    x = jnp.array([3.0, 4.0])
    ref = jax.grad(lambda w: jnp.sum(w * x) ** 2)(lin.w.value)
    np.testing.assert_allclose(nnx.grad(Lin.energy)(lin, x)["w"].value, ref)
    # bound: refused in every mode, as in Flax NNX 0.12 (the error shows the fixes)
    for graph in (True, False):
        for transform in (nnx.grad, nnx.value_and_grad):
            with pytest.raises(ValueError, match=r"(?s)bound methods.*nnx.\w+\(Lin.energy\)"):
                transform(lin.energy, graph=graph)
    with pytest.raises(ValueError, match=r"nnx\.vjp does not support bound methods"):
        nnx.vjp(lin.energy, x)
    with pytest.raises(ValueError, match=r"nnx\.jvp does not support bound methods"):
        nnx.jvp(lin.energy, (x,), (x,))
    with pytest.raises(ValueError, match=r"nnx\.remat does not support bound methods"):
        nnx.remat(lin.energy)


def test_negative_argnums_of_a_module_instance_count_from_the_end():
    # Regression: negative argnums were shifted past `self` like positive ones, so
    # argnums=-1 of nnx.grad(instance) differentiated the Module.
    class Lin(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.array([1.0, 2.0]))

        def __call__(self, x, y):
            return jnp.sum(self.w.value * x * y)

    lin, x, y = Lin(), jnp.array([3.0, 4.0]), jnp.array([5.0, 7.0])
    np.testing.assert_allclose(nnx.grad(lin, argnums=-1)(x, y), lin.w.value * x)
    np.testing.assert_allclose(nnx.grad(lin, argnums=-2)(x, y), lin.w.value * y)
    gx, gy = nnx.grad(lin, argnums=(0, -1))(x, y)
    np.testing.assert_allclose(gx, lin.w.value * y)
    np.testing.assert_allclose(gy, lin.w.value * x)
    # unbound: -3 is the module itself
    g = nnx.grad(Lin.__call__, argnums=nnx.DiffState(-3, nnx.Param))(lin, x, y)
    np.testing.assert_allclose(g["w"].value, x * y)


def test_decorator_forms():
    @nnx.grad
    def a(m):
        return jnp.sum(m.w.value**2)

    @nnx.value_and_grad(argnums=1)
    def b(m, x):
        return jnp.sum(m.w.value * x)

    m = Model()
    np.testing.assert_allclose(a(m)["w"].value, 2 * m.w.value, rtol=1e-6)
    _, g = b(m, X)
    np.testing.assert_allclose(g, m.w.value)


def test_argnums_errors():
    with pytest.raises(ValueError, match="argnums 2 is out of range"):
        nnx.grad(loss, argnums=2)(Model(), X)
    with pytest.raises(TypeError, match=r"argnums entries must be ints or nnx\.DiffState"):
        nnx.grad(loss, argnums=("a",))(Model(), X)


# -- aliasing with DiffState ------------------------------------------------------------------


def test_diff_state_aliasing_conflict_lists_every_path():
    shared = Block(w=nnx.Param(jnp.ones(2)))
    a, b = Node(s=shared), Node(s=[shared])
    before, clone = snapshot(a), nnx.clone(a)

    def f(a, b):
        a.s.w.value = a.s.w.value + 1  # never happens: the check comes first
        return jnp.sum(a.s.w.value)

    with pytest.raises(nnx.InconsistentAliasingError, match="argnums") as e:
        nnx.grad(f, argnums=(nnx.DiffState(0, nnx.Param), nnx.DiffState(1, nnx.Nothing)))(a, b)
    msg = str(e.value)
    assert re.search(r"args\[0\]\.s\.w: True", msg), msg
    assert re.search(r"args\[1\]\.s\[0\]\.w: False", msg), msg
    assert_unchanged(a, before, clone)


def test_an_object_passed_twice_with_one_argnum_is_a_conflict():
    m = Model()
    with pytest.raises(ValueError, match=r"args\[0\]\.w: True(.|\n)*args\[1\]\.w: False"):
        nnx.grad(lambda a, b: loss(a, X) + loss(b, X), argnums=0)(m, m)


def test_an_object_passed_twice_with_the_same_diff_state_is_fine():
    m = Model()
    w = m.w.value
    ga, gb = nnx.grad(lambda a, b: jnp.sum(a.w.value * b.w.value), argnums=(0, 1))(m, m)
    # One Variable is one leaf: its total gradient is reported once, at its first
    # path (as nnx.state reports a shared Variable once; Flax NNX does the same).
    np.testing.assert_allclose(ga["w"].value, 2 * w, rtol=1e-6)
    assert dict(gb) == {}


# -- captured objects -----------------------------------------------------------------------


def test_grad_mutating_a_captured_object_raises():
    captured = Model()
    before, clone = snapshot(captured), nnx.clone(captured)

    def f(x):
        captured.mean.value = captured.mean.value + 1
        return jnp.sum(x)

    with pytest.raises(nnx.TraceContextError, match="argument"):
        nnx.grad(f)(X)
    assert_unchanged(captured, before, clone)


def test_grad_reading_a_captured_object_is_fine():
    captured = Model()
    g = nnx.grad(lambda x: jnp.sum(captured.w.value * x))(X)
    np.testing.assert_allclose(g, captured.w.value)


def test_grad_returning_a_captured_object_in_aux_raises():
    captured = Model()
    with pytest.raises(nnx.TraceContextError, match=re.escape("at output")):
        nnx.grad(lambda x: (jnp.sum(x), captured), has_aux=True)(X)


# -- vjp / jvp ----------------------------------------------------------------------------


def test_vjp_matches_jax():
    m = Model()
    w, b = m.w.value, m.b.value

    def f(m, x):
        m.mean.value = m.mean.value + 1
        return jnp.sin(m.w.value) * x + m.b.value

    out, vjp_fn = nnx.vjp(f, m, X)
    ref_out, ref_vjp = jax.vjp(lambda w, b, x: jnp.sin(w) * x + b, w, b, X)
    np.testing.assert_allclose(out, ref_out, rtol=1e-6)
    ct = jnp.array([1.0, 2.0, 3.0])
    g_m, g_x = vjp_fn(ct)
    gw, gb, gx = ref_vjp(ct)
    np.testing.assert_allclose(g_m["w"].value, gw, rtol=1e-6)
    np.testing.assert_allclose(g_m["b"].value, gb, rtol=1e-6)
    np.testing.assert_allclose(g_x, gx, rtol=1e-6)
    assert float(m.mean.value) == 1.0  # the update is applied


def test_vjp_has_aux_returns_objects_by_identity():
    m = Model()
    _, vjp_fn, aux = nnx.vjp(lambda m: (jnp.sum(m.w.value), (m, m.w)), m, has_aux=True)
    assert aux[0] is m and aux[1] is m.w
    np.testing.assert_allclose(vjp_fn(jnp.array(1.0))[0]["w"].value, jnp.ones(3))


def test_jvp_matches_jax():
    m = Model()
    w, b = m.w.value, m.b.value
    tw = jnp.array([1.0, 0.0, -1.0])

    def f(m, x):
        return jnp.sin(m.w.value) * x + m.b.value

    out, t_out = nnx.jvp(f, (m, X), (nnx.State({"w": nnx.Param(tw)}), jnp.ones(3)))
    ref_out, ref_t = jax.jvp(
        lambda w, b, x: jnp.sin(w) * x + b, (w, b, X), (tw, jnp.zeros(()), jnp.ones(3))
    )
    np.testing.assert_allclose(out, ref_out, rtol=1e-6)
    np.testing.assert_allclose(t_out, ref_t, rtol=1e-6)


def test_jvp_tangents_as_objects_or_nested_states():
    m = Node(w=nnx.Param(jnp.array([1.0, 2.0])), c=Block(b=nnx.Param(jnp.array(3.0))))
    w, b = m.w.value, m.c.b.value

    def f(m):
        return jnp.sum(jnp.sin(m.w.value)) * m.c.b.value

    def ref(tw, tb):
        return jax.jvp(lambda w, b: jnp.sum(jnp.sin(w)) * b, (w, b), (tw, tb))[1]

    as_object = Node(w=nnx.Param(jnp.array([1.0, 0.0])), c=Block(b=nnx.Param(jnp.array(1.0))))
    np.testing.assert_allclose(
        nnx.jvp(f, (m,), (as_object,))[1], ref(jnp.array([1.0, 0.0]), 1.0), rtol=1e-6
    )
    nested = nnx.State({"c": {"b": nnx.Param(jnp.array(1.0))}})  # w missing: zero tangent
    np.testing.assert_allclose(nnx.jvp(f, (m,), (nested,))[1], ref(jnp.zeros(2), 1.0), rtol=1e-6)
    # a gradient is a valid tangent
    g = nnx.grad(f)(m)
    np.testing.assert_allclose(
        nnx.jvp(f, (m,), (g,))[1], ref(g["w"].value, g["c"]["b"].value), rtol=1e-6
    )


def test_jvp_has_aux_and_tangent_count():
    m = Model()
    _, t, aux = nnx.jvp(lambda m: (jnp.sum(m.w.value), m), (m,), (nnx.State({}),), has_aux=True)
    assert aux is m and float(t) == 0.0
    with pytest.raises(ValueError, match="jvp got 1 primals but 2 tangents"):
        nnx.jvp(lambda m: 0.0, (m,), (nnx.State({}), nnx.State({})))


# -- remat ---------------------------------------------------------------------------------


def remat_loss(m: Model, x: jax.Array) -> jax.Array:
    m.mean.value = m.mean.value + 1
    return jnp.sum(jnp.sin(m.w.value) * x)


@pytest.mark.parametrize(
    "transform",
    [
        nnx.remat,
        nnx.checkpoint,
        lambda f: nnx.remat(f, prevent_cse=False),
        lambda f: nnx.remat(f, policy=jax.checkpoint_policies.nothing_saveable),
    ],
    ids=["remat", "checkpoint", "prevent_cse", "policy"],
)
def test_remat_gradients_and_updates(transform):
    m = Model()
    w = m.w.value
    g = nnx.grad(transform(remat_loss))(m, X)
    np.testing.assert_allclose(g["w"].value, jnp.cos(w) * X, rtol=1e-6)
    assert float(m.mean.value) == 1.0


def test_checkpoint_is_remat():
    assert nnx.checkpoint is nnx.remat


@pytest.mark.parametrize("policy", [None, jax.checkpoint_policies.nothing_saveable])
@pytest.mark.parametrize("prevent_cse", [True, False])
def test_remat_passes_policy_and_prevent_cse_to_jax(policy, prevent_cse):
    m = Model()
    f = nnx.remat(lambda m: jnp.sum(jnp.sin(m.w.value)), policy=policy, prevent_cse=prevent_cse)
    jaxpr = jax.make_jaxpr(lambda: f(m))()
    (eqn,) = [e for e in jaxpr.jaxpr.eqns if e.primitive.name.startswith(("remat", "checkpoint"))]
    assert eqn.params["policy"] is policy
    assert eqn.params["prevent_cse"] is prevent_cse


def test_remat_static_argnums():
    seen = []

    def f(m, n, x):
        seen.append(type(n))
        return jnp.sum(m.w.value**n * x)

    m = Model()
    out = nnx.remat(f, static_argnums=1)(m, 3, X)
    np.testing.assert_allclose(out, jnp.sum(m.w.value**3 * X), rtol=1e-5)
    assert seen == [int]  # the static argument arrives as a Python int


def test_remat_identity_and_new_objects():
    m = Model()
    assert nnx.remat(lambda m: m)(m) is m
    out = nnx.remat(lambda m: Node(w=m.w, new=nnx.Param(m.w.value + 1)))(m)
    assert out.w is m.w
    np.testing.assert_allclose(out.new.value, m.w.value + 1)


# -- exception safety -----------------------------------------------------------------------


def mutate_then_fail(m: Node, *_: Any) -> Any:
    m.s.value = m.s.value + 1
    m.w.value = m.w.value * 3
    m.new = nnx.Param(jnp.ones(2))
    del m.child
    raise RuntimeError("boom")


@pytest.mark.parametrize(
    "call",
    [
        lambda m: nnx.grad(mutate_then_fail)(m),
        lambda m: nnx.value_and_grad(mutate_then_fail)(m),
        lambda m: nnx.grad(mutate_then_fail, has_aux=True)(m),
        lambda m: nnx.remat(mutate_then_fail)(m),
        lambda m: nnx.grad(nnx.remat(mutate_then_fail))(m),
        lambda m: nnx.vjp(mutate_then_fail, m),
        lambda m: nnx.jvp(mutate_then_fail, (m,), (nnx.State({}),)),
    ],
    ids=["grad", "value_and_grad", "grad-has_aux", "remat", "grad-of-remat", "vjp", "jvp"],
)
def test_a_failing_function_leaves_the_callers_objects_exactly_as_before(call):
    m = Node(
        w=nnx.Param(jnp.ones(2)),
        s=nnx.BatchStat(jnp.zeros(())),
        child=Block(b=nnx.Param(jnp.ones(1))),
    )
    before, clone = snapshot(m), nnx.clone(m)
    with pytest.raises(RuntimeError, match="boom"):
        call(m)
    assert_unchanged(m, before, clone)


# -- Flax NNX 0.12 details of argnums (transforms_test.py::TestGrad) ----------------------------------


def test_an_object_as_argnums_is_an_error_naming_the_fix():
    m = nnx.Dict(a=nnx.Param(jnp.array(1.0)))
    with pytest.raises(ValueError, match=r"(?s)Graph nodes are not allowed as prefixes.*DiffState"):
        nnx.grad(lambda x: x, argnums=m)
    with pytest.raises(ValueError, match=r"argnums\[1\]"):
        nnx.value_and_grad(lambda x, y: x, argnums=(0, m))
    with pytest.raises(TypeError, match=r"argnums entries must be ints.*is a bool"):
        nnx.grad(lambda x: x, argnums=True)


def test_a_state_argument_is_differentiated_whole():
    # A State (or a Variable) reached through containers only is a pytree of
    # Variables: every Variable is differentiated, not only Params.
    m = nnx.Dict(a=nnx.Param(jnp.array(1.0)), s=nnx.BatchStat(jnp.array(3.0)))
    graphdef, stats, rest = nnx.split(m, nnx.BatchStat, ...)

    def f(stats, rest):
        inner = nnx.merge(graphdef, stats, rest)
        return inner.a.value * inner.s.value

    g = nnx.grad(f)(stats, rest)
    assert isinstance(g["s"], nnx.BatchStat) and float(g["s"].value) == 1.0
    g_list = nnx.grad(lambda vs: vs[0].value * vs[1].value)([m.s, nnx.Variable(jnp.array(2.0))])
    assert float(g_list[0].value) == 2.0 and float(g_list[1].value) == 3.0


def test_a_variable_seen_twice_gets_an_empty_state_the_second_time():
    p = nnx.Param(jnp.array(10.0))
    grads = nnx.grad(lambda d: d["a"][0].value + d["b"].value)({"a": [p], "b": p})
    assert float(grads["a"][0].value) == 2.0
    assert isinstance(grads["b"], nnx.State) and len(grads["b"]) == 0


def test_int_argnum_differentiates_every_variable_outside_objects():
    # As in Flax NNX 0.12.8: the Param default applies inside objects; a Variable of
    # any kind reached directly (here in a State) is differentiated.
    state = nnx.State({"p": nnx.Perturbation(jnp.array(2.0))})
    model = nnx.Dict(w=nnx.Param(jnp.array(3.0)), s=nnx.BatchStat(jnp.array(5.0)))

    def loss(model, state):
        return model.w[...] * model.s[...] * state["p"][...]

    g_model, g_state = nnx.grad(loss, argnums=(0, 1))(model, state)
    assert float(g_state["p"][...]) == 15.0
    assert float(g_model["w"][...]) == 10.0 and "s" not in g_model
