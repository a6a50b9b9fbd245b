"""nnx.pmap on 8 simulated CPU devices.

The main pytest process has one CPU device, and the device count is fixed when
JAX initialises, so the checks run in one subprocess started with
``XLA_FLAGS=--xla_force_host_platform_device_count=8`` (set before importing
jax). The subprocess runs every check below, each computing the flaxgraph result
and an independent reference (plain ``jax.numpy``/``jax.pmap`` on the arrays),
and reports ``ok`` or the traceback per check; the test lists every failing one.
"""

from __future__ import annotations

import textwrap

from helpers import assert_checks_passed, run_device_checks

SCRIPT = textwrap.dedent(
    r"""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import flaxgraph as nnx
    from flaxgraph.testing import Node

    jax.config.update("jax_numpy_rank_promotion", "raise")

    class Count(nnx.Variable):
        pass

    W = jnp.arange(24.0).reshape(8, 3)
    X = jnp.arange(8.0 * 3).reshape(8, 3) / 5

    @check
    def devices():
        assert jax.device_count() == 8, jax.devices()

    @check
    def objects_collectives_and_updates():
        m = Node(w=nnx.Param(W), c=Count(jnp.zeros(8, jnp.int32)))

        @nnx.pmap(axis_name="i")
        def f(m, x):
            assert m.w.shape == (3,) and x.shape == (3,)
            m.c += 1
            m.w.value = m.w.value - jax.lax.pmean(m.w.value, "i")
            return jax.lax.psum(jnp.sum(m.w.value * x), "i")

        y = f(m, X)
        centered = W - W.mean(0, keepdims=True)
        np.testing.assert_allclose(m.w.value, centered, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(y, np.full(8, float(jnp.sum(centered * X))), rtol=1e-5)
        np.testing.assert_array_equal(m.c.value, np.ones(8))
        # a second call on the (now device-sharded) state works and keeps updating
        f(m, X)
        np.testing.assert_array_equal(m.c.value, np.full(8, 2))

    @check
    def as_many_leaves_as_arguments():
        # Regression: jax.pmap (0.10) reads in_axes (None, 0) as one axis per *leaf*
        # when the leaf count equals the argument count; flaxgraph's leafless Static
        # argument made that happen for an object with two arrays, silently
        # broadcasting the first one (or failing on already-sharded inputs).
        m = Node(a=nnx.Param(W), b=nnx.Param(W + 1))
        y = nnx.pmap(lambda m: jnp.sum(m.a.value) + 0 * jnp.sum(m.b.value))(m)
        np.testing.assert_allclose(y, W.sum(1), rtol=1e-6)
        m.a.value = jax.pmap(lambda x: x + 0, axis_name="i")(W)
        np.testing.assert_allclose(nnx.pmap(lambda m: m.a * 2)(m), W * 2, rtol=1e-6)

    @check
    def decorator_forms_and_methods():
        class Lin(nnx.Module):
            def __init__(self):
                self.w = nnx.Param(W)

            @nnx.pmap
            def __call__(self, x):
                return self.w * x

        lin = Lin()
        np.testing.assert_allclose(lin(X), W * X, rtol=1e-6)
        np.testing.assert_allclose(nnx.pmap(lambda m, x: m.w + x)(lin, X), W + X, rtol=1e-6)

        @nnx.pmap(in_axes=(0, None))
        def shared_x(m, x):
            return m.w * x

        np.testing.assert_allclose(shared_x(lin, X[0]), W * X[0][None], rtol=1e-6)

    @check
    def pmap_builds_objects_as_outputs():
        @nnx.pmap(devices=jax.devices()[:4], backend="cpu")
        def create(seed):
            return Node(w=nnx.Param(jnp.full((2,), seed)), c=Count(jnp.array(0)))

        m = create(jnp.arange(4.0))
        assert type(m) is Node and m.w.shape == (4, 2) and m.c.shape == (4,)
        np.testing.assert_array_equal(m.w.value, np.repeat(np.arange(4.0)[:, None], 2, 1))

    @check
    def state_axes_broadcast_sub_state():
        m = Node(w=nnx.Param(jnp.arange(3.0)), c=Count(jnp.arange(8)))
        axes = nnx.StateAxes({nnx.Param: None, Count: 0})

        @nnx.pmap(in_axes=(axes, 0))
        def f(m, x):
            m.c += 10
            return m.w * x

        y = f(m, X)
        np.testing.assert_allclose(y, jnp.arange(3.0)[None] * X, rtol=1e-6)
        np.testing.assert_array_equal(m.c.value, np.arange(8) + 10)
        assert m.w.shape == (3,)

    @check
    def static_broadcasted_argnums():
        m = Node(w=nnx.Param(W))
        traces = []

        @nnx.pmap(static_broadcasted_argnums=(1,))
        def f(m, mode, x):
            traces.append(mode)
            if mode == "double":  # Python control flow on the static argument
                return m.w * 2 + x
            return m.w - x

        np.testing.assert_allclose(f(m, "double", X), W * 2 + X, rtol=1e-6)
        np.testing.assert_allclose(f(m, "minus", X), W - X, rtol=1e-6)
        np.testing.assert_allclose(f(m, "double", X + 1), W * 2 + X + 1, rtol=1e-6)
        assert traces.count("double") == 1 and traces.count("minus") == 1, traces

        @nnx.pmap(in_axes=(0, None), static_broadcasted_argnums=1)
        def scaled(m, k):
            m.w.value = m.w.value * k
            return m.w.value

        scaled(m, 3.0)
        np.testing.assert_allclose(m.w.value, W * 3, rtol=1e-6)

    @check
    def donate_argnums():
        m = Node(w=nnx.Param(W), c=Count(jnp.zeros(8)))
        placed = jax.pmap(lambda x: x + 0)(X)  # already laid out on the 8 devices
        kept = jax.pmap(lambda x: x + 0)(X)

        @nnx.pmap(donate_argnums=(1,))
        def f(m, donated, kept):
            m.c += donated[0]
            return donated * 2 + kept

        y = f(m, placed, kept)
        np.testing.assert_allclose(y, X * 3, rtol=1e-6)
        np.testing.assert_allclose(m.c.value, X[:, 0], rtol=1e-6)
        assert placed.is_deleted(), "the donated buffer was not donated"
        assert not kept.is_deleted()

        # Donating an object: its Variables get their new values; it stays usable.
        m.w.value = jax.pmap(lambda x: x + 0)(W)
        old = m.w.value

        @nnx.pmap(donate_argnums=0)
        def g(m):
            m.w.value = m.w.value + 1

        g(m)
        assert old.is_deleted()
        np.testing.assert_allclose(m.w.value, W + 1, rtol=1e-6)

    @check
    def axis_metadata():
        m = Node(p=nnx.Param(jnp.ones((3, 8)), out_sharding=("model", "data")))
        seen = []

        @nnx.pmap(in_axes=1, transform_metadata={nnx.PARTITION_NAME: "data"})
        def f(m):
            seen.append((m.p.shape, m.p.out_sharding))
            m.p.value = m.p.value * 2

        f(m)
        assert seen == [((3,), ("model",))], seen
        assert m.p.shape == (3, 8) and m.p.out_sharding == ("model", "data")
        np.testing.assert_array_equal(m.p.value, np.full((3, 8), 2.0))

    @check
    def aliasing_and_exception_safety():
        m = Node(w=nnx.Param(W))
        w = m.w.value
        try:
            nnx.pmap(lambda a, b: None, in_axes=(0, 1))(m, {"k": m})
        except nnx.InconsistentAliasingError as e:
            assert "args[0].w: 0" in str(e) and "args[1]['k'].w: 1" in str(e), str(e)
        else:
            raise AssertionError("no aliasing error")

        def boom(m):
            m.w.value = m.w.value * 0
            m.extra = nnx.Param(jnp.ones(()))
            raise RuntimeError("boom")

        try:
            nnx.pmap(boom)(m)
        except RuntimeError:
            pass
        assert m.w.value is w and not hasattr(m, "extra")

    @check
    def node_prefix_in_graph_mode():
        # Flax NNX 0.12 (TestPmap.test_basic_single_functional): an nnx.prefix result
        # as in_axes; pmap hashes its static data, which holds the prefix.
        m = Node(w=nnx.Param(W), s=Count(jnp.ones(())))
        axes = nnx.prefix(m, {nnx.Param: 0, ...: None}, graph=True)
        f = nnx.pmap(lambda m, x: m.w * m.s + x, in_axes=(axes, 0), graph_updates=False)
        for _ in range(2):  # the second call reuses the compiled function
            np.testing.assert_allclose(f(m, X), W + X)

    """
)

CHECKS = [
    "devices",
    "objects_collectives_and_updates",
    "as_many_leaves_as_arguments",
    "decorator_forms_and_methods",
    "pmap_builds_objects_as_outputs",
    "state_axes_broadcast_sub_state",
    "static_broadcasted_argnums",
    "donate_argnums",
    "axis_metadata",
    "aliasing_and_exception_safety",
    "node_prefix_in_graph_mode",
]


def test_pmap_checks() -> None:
    # One test, so that one subprocess runs however pytest-xdist distributes tests;
    # the message lists every failing check with its traceback.
    assert_checks_passed(run_device_checks(SCRIPT), CHECKS)
