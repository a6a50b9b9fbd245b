"""Ref-backed Variables (``ref=True`` / ``hijax=True``) through the flaxgraph
transforms: each program runs on a plain model and on a Ref-backed copy and must
have the same effect (outputs, updated values); the Refs are updated in place and
the aliasing checks and error rules are unchanged."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flaxgraph as nnx
from flaxgraph.transforms.aliasing import InconsistentAliasingError

FLAGS = [dict(ref=True), dict(hijax=True)]


class Model(nnx.Module):
    def __init__(self, w, **flags):
        self.w = nnx.Param(jnp.asarray(w, jnp.float32), **flags)
        self.count = nnx.BatchStat(jnp.zeros((), jnp.float32), **flags)

    def __call__(self, x):
        self.count[...] += 1.0
        return x @ self.w[...]


def pure_values(node):
    return {p: np.asarray(v[...]) for p, v in nnx.state(node).flat_state()}


def refs_of(node):
    return {p: v.get_raw_value() for p, v in nnx.iter_graph(node) if isinstance(v, nnx.Variable)}


def assert_same_effect(program, make, flags):
    """Runs ``program(model)`` on a plain model and a Ref-backed one."""
    plain, backed = make(), make(**flags)
    before = refs_of(backed)
    out_plain, out_backed = program(plain), program(backed)
    jax.tree.map(np.testing.assert_allclose, out_plain, out_backed)
    after = pure_values(backed)
    for path, value in pure_values(plain).items():
        np.testing.assert_allclose(after[path], value, err_msg=str(path))
    # the same Refs, updated in place
    assert refs_of(backed) == before
    assert all(isinstance(r, jax.Ref) for r in before.values())


def model_2x3(**flags):
    return Model(np.arange(6.0).reshape(2, 3) / 6.0, **flags)


# -- jit ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("flags", FLAGS)
def test_jit_train_loop(flags):
    def program(m):
        @nnx.jit
        def step(m, x):
            y = m(x)
            m.w[...] -= 0.1 * y.sum()
            return y

        return [step(m, jnp.ones((1, 2)) * i) for i in range(3)]

    assert_same_effect(program, model_2x3, flags)


@pytest.mark.parametrize("flags", FLAGS)
def test_jit_returning_the_model_gives_the_callers_object(flags):
    m = model_2x3(**flags)
    out = nnx.jit(lambda m: m)(m)
    assert out is m and isinstance(m.w.get_raw_value(), jax.Ref)


@pytest.mark.parametrize("flags", FLAGS)
def test_jit_new_ref_model_comes_out_ref_backed(flags):
    m = nnx.jit(lambda: model_2x3(**flags))()
    assert isinstance(m.w.get_raw_value(), jax.Ref)
    assert (m.w.ref, m.w.hijax) == (bool(flags.get("ref")), bool(flags.get("hijax")))


# -- grad --------------------------------------------------------------------------------------


@pytest.mark.parametrize("flags", FLAGS)
def test_grad_with_side_effects(flags):
    def program(m):
        def loss(m, x):
            return (m(x) ** 2).sum()

        grads = nnx.grad(loss)(m, jnp.ones((1, 2)))
        value, grads2 = nnx.value_and_grad(loss)(m, jnp.ones((1, 2)))
        return grads["w"][...], grads2["w"][...], value

    assert_same_effect(program, model_2x3, flags)


@pytest.mark.parametrize("flags", FLAGS)
def test_grad_matches_numpy(flags):
    m = model_2x3(**flags)
    x = np.array([[1.0, 2.0]], np.float32)
    grads = nnx.grad(lambda m: (m(jnp.asarray(x)) ** 2).sum())(m)
    w = np.arange(6.0).reshape(2, 3) / 6.0
    np.testing.assert_allclose(grads["w"][...], 2 * x.T @ (x @ w), rtol=1e-6)


# -- vmap --------------------------------------------------------------------------------------


@pytest.mark.parametrize("flags", FLAGS)
def test_vmap_over_stacked_models(flags):
    def make_stacked(**f):
        m = Model(np.arange(12.0).reshape(2, 2, 3), **f)
        m.count = nnx.BatchStat(jnp.zeros(2), **f)  # one count per stacked model
        return m

    def program_stacked(m):
        f = nnx.vmap(lambda m, x: m(x), in_axes=(0, 0))
        return [f(m, jnp.ones((2, 1, 2)) * i) for i in range(2)]

    assert_same_effect(program_stacked, make_stacked, flags)


@pytest.mark.parametrize("flags", FLAGS)
def test_vmap_broadcast_model(flags):
    def program(m):
        def f(m, x):
            return x @ m.w[...]

        return nnx.vmap(f, in_axes=(None, 0))(m, jnp.ones((4, 2)))

    assert_same_effect(program, model_2x3, flags)


@pytest.mark.parametrize("flags", FLAGS)
def test_vmap_creates_ref_backed_stack(flags):
    @nnx.vmap(in_axes=0, out_axes=0)
    def create(w):
        return Model(w, **flags)

    m = create(jnp.ones((4, 2, 3)))
    assert m.w.shape == (4, 2, 3) and isinstance(m.w.get_raw_value(), jax.Ref)


# -- scan --------------------------------------------------------------------------------------


@pytest.mark.parametrize("flags", FLAGS)
def test_scan_with_model_as_carry(flags):
    def program(m):
        def body(m, x):
            y = m(x[None])
            m.w[...] += 0.01 * y.sum()
            return m, y

        _, ys = nnx.scan(body)(m, jnp.ones((5, 2)))
        return ys

    assert_same_effect(program, model_2x3, flags)


@pytest.mark.parametrize("flags", FLAGS)
def test_scan_over_layers(flags):
    def make(**f):
        m = Model(np.ones((3, 2, 2)) * 0.5, **f)
        m.count = nnx.BatchStat(jnp.zeros(3), **f)
        return m

    def program(m):
        def body(x, layer):
            return layer(x), None

        y, _ = nnx.scan(body, in_axes=(nnx.Carry, 0), out_axes=(nnx.Carry, 0))(jnp.ones((1, 2)), m)
        return y

    assert_same_effect(program, make, flags)


# -- differential property: random sequences of transformed steps ----------------------------

STEPS = st.lists(st.sampled_from(["jit", "grad", "vmap", "scan"]), min_size=1, max_size=4)


@settings(deadline=None, max_examples=10)
@given(STEPS, st.sampled_from(FLAGS))
def test_random_step_sequences_match_plain(steps, flags):
    def program(m):
        outs = []
        for step in steps:
            if step == "jit":
                outs.append(nnx.jit(lambda m: m(jnp.ones((1, 2))))(m))
            elif step == "grad":
                g = nnx.grad(lambda m: m(jnp.ones((1, 2))).sum())(m)
                m.w[...] -= 0.1 * g["w"][...]
            elif step == "vmap":
                outs.append(nnx.vmap(lambda m, x: m(x), in_axes=(None, 0))(m, jnp.ones((2, 1, 2))))
            else:
                outs.append(nnx.scan(lambda m, x: (m, m(x[None])))(m, jnp.ones((2, 2)))[1])
        return outs

    assert_same_effect(program, model_2x3, flags)


# -- aliasing and errors -----------------------------------------------------------------------


@pytest.mark.parametrize("flags", FLAGS)
def test_inconsistent_aliasing_is_still_detected(flags):
    plain, backed = model_2x3(), model_2x3(**flags)
    messages = []
    for m in (plain, backed):
        with pytest.raises(InconsistentAliasingError) as info:
            nnx.vmap(lambda a, b: a.w[...] * b.w[...], in_axes=(0, None))(m, m)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    assert "args[0].w" in messages[1] and "args[1].w" in messages[1]


@pytest.mark.parametrize("flags", FLAGS)
def test_shape_change_inside_jit_raises_and_changes_nothing(flags):
    m = model_2x3(**flags)
    before = pure_values(m)

    @nnx.jit
    def bad(m):
        m.count[...] = 5.0
        m.w[...] = jnp.ones((4, 4))

    with pytest.raises(ValueError, match=r"Param\(shape=\(2, 3\), dtype=float32\)"):
        bad(m)
    after = pure_values(m)
    for path, value in before.items():
        np.testing.assert_array_equal(after[path], value)


@pytest.mark.parametrize("flags", FLAGS)
def test_captured_ref_written_under_jit_updates_it(flags):
    m = model_2x3(**flags)

    @nnx.jit
    def f(x):
        m.count[...] += x
        return x

    f(2.0)
    f(3.0)
    assert float(m.count[...]) == 5.0


@pytest.mark.parametrize("flags", FLAGS)
@pytest.mark.parametrize("transform", ["vmap", "grad"])
def test_captured_ref_written_under_vmap_or_grad_names_the_variable(flags, transform):
    m = model_2x3(**flags)

    def f(x):
        m.count[...] += x.sum()
        return x.sum()

    wrapped = nnx.vmap(f) if transform == "vmap" else nnx.grad(f)
    with pytest.raises(nnx.TraceContextError) as info:
        wrapped(jnp.ones(3))
    message = str(info.value)
    assert "BatchStat(shape=(), dtype=float32)" in message and "argument" in message
    assert float(m.count[...]) == 0.0


def test_captured_plain_variable_still_raises_under_jit():
    m = model_2x3()

    @nnx.jit
    def f(x):
        m.count[...] += x
        return x

    with pytest.raises(nnx.TraceContextError, match="captured by closure"):
        f(1.0)


@pytest.mark.parametrize("flags", FLAGS)
def test_ref_backed_calls_take_the_fast_path_and_stay_correct(flags):
    # Issue 18: a plan reads the Refs and writes them back (transforms/ref_writes.py).
    m = model_2x3(**flags)
    step = nnx.jit(lambda m: m(jnp.ones((1, 2))))
    for _ in range(10):
        step(m)
    assert float(m.count[...]) == 10.0
    assert step.cache_info() == (1, 1)


@pytest.mark.parametrize("flags", FLAGS)
def test_optimizer_training_loop_matches_plain(flags):
    import optax

    def make(**f):
        with nnx.var_defaults(ref=bool(f.get("ref")), hijax=bool(f.get("hijax"))):
            model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
            model.opt = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
        return model

    def program(model):
        @nnx.jit
        def step(model, x, y):
            loss, grads = nnx.value_and_grad(lambda m: ((m(x) - y) ** 2).mean())(model)
            model.opt.update(model, grads)
            return loss

        x, y = jnp.ones((4, 2)), jnp.zeros((4, 3))
        return [step(model, x, y) for _ in range(3)]

    assert_same_effect(program, make, flags)


@pytest.mark.parametrize("flags", FLAGS)
def test_control_flow_and_remat(flags):
    def program(m):
        def body(i, m):
            m.count[...] += i
            return m

        nnx.fori_loop(0, 4, body, m)
        nnx.cond(True, lambda m: m.count.set_value(m.count[...] * 10), lambda m: None, m)

        def grow(m):
            m.count[...] += 7.0
            return m

        nnx.while_loop(lambda m: m.count[...] < 100.0, grow, m)
        return nnx.remat(lambda m: m(jnp.ones((1, 2))))(m)

    assert_same_effect(program, model_2x3, flags)
