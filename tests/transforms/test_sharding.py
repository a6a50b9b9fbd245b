"""jit with shardings on 8 simulated CPU devices.

The test process has already imported JAX with one CPU device, so the checks
run in one subprocess started with
``XLA_FLAGS=--xla_force_host_platform_device_count=8`` (set before JAX is
imported there). The subprocess runs every check, reports each one's outcome
as JSON, and each test below asserts on one check.
"""

from __future__ import annotations

import textwrap

import pytest
from helpers import run_device_checks

SCRIPT = textwrap.dedent(
    r"""
    import json, os, re, traceback
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import flaxgraph as nnx

    assert len(jax.devices()) == 8, jax.devices()
    mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("data", "model"))

    def ns(*spec):
        return NamedSharding(mesh, P(*spec))

    class MLP(nnx.Module):
        def __init__(self, seed=0):
            k1, k2 = jax.random.split(jax.random.key(seed))
            self.w = nnx.Param(jax.random.normal(k1, (8, 16)))
            self.b = nnx.Param(jax.random.normal(k2, (16,)))
            self.count = nnx.BatchStat(jnp.array(0))

    STATE_SHARDING = nnx.StateSharding(
        {nnx.PathContains("w"): ns(None, "model"), nnx.Param: ns("model"), ...: ns()}
    )
    results = {}

    def check(fn):
        try:
            fn()
            results[fn.__name__] = "ok"
        except BaseException:
            results[fn.__name__] = traceback.format_exc()
        return fn

    @check
    def in_shardings_place_params():
        m = MLP()
        w, b = np.asarray(m.w.value), np.asarray(m.b.value)
        x = jax.random.normal(jax.random.key(1), (4, 8))

        def step(m, x):
            m.count.value = m.count.value + 1
            return x @ m.w.value + m.b.value

        f = nnx.jit(step, in_shardings=(STATE_SHARDING, ns("data")), out_shardings=ns("data", "model"))
        y = f(m, x)
        assert m.w.value.sharding == ns(None, "model"), m.w.value.sharding
        assert m.b.value.sharding == ns("model"), m.b.value.sharding
        assert m.count.value.sharding == ns(), m.count.value.sharding
        assert y.sharding == ns("data", "model"), y.sharding
        assert {s.data.shape for s in m.w.value.addressable_shards} == {(8, 4)}
        np.testing.assert_allclose(np.asarray(y), np.asarray(x) @ w + b, rtol=1e-5, atol=1e-5)
        assert int(m.count.value) == 1
        # values are unchanged by the placement
        np.testing.assert_array_equal(np.asarray(m.w.value), w)

    @check
    def out_shardings_place_a_created_model():
        created = nnx.jit(lambda: MLP(3), out_shardings=STATE_SHARDING)()
        ref = MLP(3)
        assert created.w.value.sharding == ns(None, "model")
        assert created.b.value.sharding == ns("model")
        assert created.count.value.sharding == ns()
        np.testing.assert_allclose(np.asarray(created.w.value), np.asarray(ref.w.value), rtol=1e-6)

    @check
    def updated_params_keep_their_sharding():
        m = MLP()
        w0 = np.asarray(m.w.value)
        x = jnp.ones((4, 8))

        @nnx.jit(in_shardings=(STATE_SHARDING, ns("data")))
        def train_step(m, x):
            def loss(m):
                return jnp.sum((x @ m.w.value + m.b.value) ** 2)
            grads = nnx.grad(loss)(m)
            m.w.value = m.w.value - 0.01 * grads["w"].value
            m.b.value = m.b.value - 0.01 * grads["b"].value

        train_step(m, x)
        assert m.w.value.sharding == ns(None, "model"), m.w.value.sharding
        assert m.b.value.sharding == ns("model"), m.b.value.sharding
        b0 = np.asarray(MLP().b.value)
        gw = jax.grad(lambda w: jnp.sum((x @ w + b0) ** 2))(jnp.asarray(w0))
        np.testing.assert_allclose(np.asarray(m.w.value), w0 - 0.01 * np.asarray(gw), rtol=1e-4, atol=1e-4)

    @check
    def inconsistent_shardings_raise():
        m = MLP()
        f = nnx.jit(lambda a, b: None, in_shardings=({"k": ns("model")}, [STATE_SHARDING]))
        try:
            f({"k": m}, [m])
        except nnx.InconsistentAliasingError as e:
            msg = str(e)
        else:
            raise AssertionError("no error")
        for path in ["args[0]['k'].w", "args[1][0].w", "args[0]['k'].count", "args[1][0].count"]:
            assert path + ":" in msg, msg
        assert re.search(re.escape("args[0]['k'].w: ") + r".*spec=P\('model',\)", msg), msg
        assert re.search(re.escape("args[1][0].w: ") + r".*spec=P\(None, 'model'\)", msg), msg
        # b gets P('model') along both paths: consistent, so it is not listed
        assert "args[1][0].b" not in msg, msg

    @check
    def inconsistent_output_sharding_raises():
        m = MLP()
        f = nnx.jit(lambda m: m, in_shardings=(STATE_SHARDING,), out_shardings=ns())
        try:
            f(m)
        except ValueError as e:
            msg = str(e)
        else:
            raise AssertionError("no error")
        assert "output.w:" in msg and "args[0].w:" in msg, msg
        g = nnx.jit(lambda m: m, in_shardings=(STATE_SHARDING,), out_shardings=STATE_SHARDING)
        assert g(m) is m

    @check
    def a_constrained_input_keeps_its_in_sharding():
        # Flax NNX 0.12: the updated state of an input leaves jit on its in_sharding,
        # even when the function constrains it to another one (out_shardings unset).
        m = MLP()

        @nnx.jit(in_shardings=(STATE_SHARDING,))
        def f(m):
            m.w.value = jax.lax.with_sharding_constraint(m.w.value * 2, ns("model", None))

        f(m)
        assert m.w.value.sharding.spec == P(None, "model"), m.w.value.sharding

    print("RESULTS=" + json.dumps(results))
    """
)

CHECKS = [
    "in_shardings_place_params",
    "out_shardings_place_a_created_model",
    "updated_params_keep_their_sharding",
    "inconsistent_shardings_raise",
    "inconsistent_output_sharding_raises",
    "a_constrained_input_keeps_its_in_sharding",
]


@pytest.fixture(scope="module")
def results() -> dict[str, str]:
    return run_device_checks(SCRIPT, timeout=300)


@pytest.mark.parametrize("name", CHECKS)
def test_sharding_check(results, name):
    assert set(results) == set(CHECKS)
    assert results[name] == "ok", results[name]
