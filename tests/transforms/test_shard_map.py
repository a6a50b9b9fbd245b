"""nnx.shard_map on 8 simulated CPU devices (a 4 x 2 mesh ``('data', 'model')``).

As in ``test_pmap.py``, the checks run in one subprocess started with
``XLA_FLAGS=--xla_force_host_platform_device_count=8``; each computes the flaxgraph
result and an independent NumPy reference, and the subprocess reports ``ok`` or the
traceback per check. Property tests of aliasing and updates run in-process on a
one-device mesh (``test_shard_map_properties.py``).
"""

from __future__ import annotations

import textwrap

from helpers import assert_checks_passed, run_device_checks

SCRIPT = textwrap.dedent(
    r"""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import PartitionSpec as P
    import flaxgraph as nnx
    from flaxgraph.testing import Node

    jax.config.update("jax_numpy_rank_promotion", "raise")

    def raises(error_type, fn, *args):
        try:
            fn(*args)
        except error_type as e:
            return str(e)
        raise AssertionError(f"{error_type.__name__} not raised")

    MESH = jax.sharding.Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "model"))
    RNG = np.random.default_rng(0)
    X = RNG.normal(size=(8, 6)).astype(np.float32)
    K1 = RNG.normal(size=(6, 4)).astype(np.float32)
    K2 = RNG.normal(size=(4, 3)).astype(np.float32)

    class MLP(nnx.Module):
        def __init__(self):
            self.l1 = Node(kernel=nnx.Param(jnp.asarray(K1), out_sharding=(None, "model")))
            self.l2 = Node(kernel=nnx.Param(jnp.asarray(K2), out_sharding=("model", None)))
            self.calls = nnx.BatchStat(jnp.zeros((), jnp.int32))

        def __call__(self, x):
            self.calls.value += 1
            h = jnp.tanh(x @ self.l1.kernel.value)
            # tensor parallel: each 'model' shard holds half of the hidden units
            return jax.lax.psum(h @ self.l2.kernel.value, "model")

    def reference(x):
        return np.tanh(x @ K1) @ K2

    TP = nnx.StateSharding({
        nnx.PathContains("l1"): P(None, "model"),
        nnx.PathContains("l2"): P("model", None),
        ...: P(),
    })

    @check
    def devices():
        assert jax.device_count() == 8, jax.devices()

    @check
    def values_equal_a_reference_data_and_tensor_parallel():
        m = MLP()
        f = nnx.shard_map(
            lambda m, x: m(x), mesh=MESH, in_specs=(TP, P("data")), out_specs=P("data")
        )
        y = f(m, jnp.asarray(X))
        assert y.shape == (8, 3)
        np.testing.assert_allclose(y, reference(X), rtol=1e-5, atol=1e-5)
        # the same through nnx.jit, twice (the second call takes jit's fast path)
        g = nnx.jit(f)
        for _ in range(2):
            np.testing.assert_allclose(g(m, jnp.asarray(X)), reference(X), rtol=1e-5, atol=1e-5)
        assert int(m.calls.value) == 3

    @check
    def local_shapes_inside():
        m = MLP()
        seen = {}

        def body(m, x):
            seen["x"] = x.shape
            seen["k1"] = m.l1.kernel.value.shape
            seen["k2"] = m.l2.kernel.value.shape
            seen["calls"] = m.calls.value.shape
            return x

        nnx.shard_map(body, mesh=MESH, in_specs=(TP, P("data", None)), out_specs=P("data"))(
            m, jnp.asarray(X)
        )
        assert seen == {"x": (2, 6), "k1": (6, 2), "k2": (2, 3), "calls": ()}, seen

    @check
    def updates_reach_the_caller():
        w0 = np.arange(32.0, dtype=np.float32).reshape(8, 4)
        m = Node(w=nnx.Param(jnp.asarray(w0)), count=nnx.BatchStat(jnp.zeros((), jnp.int32)))
        spec = nnx.StateSharding({nnx.Param: P("data", "model"), ...: P()})

        @nnx.shard_map(mesh=MESH, in_specs=(spec,), out_specs=P())
        def step(m):
            m.count.value += 1
            # each shard adds its own device coordinates to its block
            i, j = jax.lax.axis_index("data"), jax.lax.axis_index("model")
            m.w.value = m.w.value + 10 * i + j
            m.extra = nnx.BatchStat(jnp.ones(()))  # a structural update
            return jax.lax.psum(jnp.sum(m.w.value), ("data", "model"))

        total = step(m)
        rows = np.repeat(np.arange(4), 2)[:, None] * 10
        cols = np.repeat(np.arange(2), 2)[None, :]
        expected = w0 + rows + cols
        np.testing.assert_allclose(m.w.value, expected)
        np.testing.assert_allclose(total, expected.sum())
        assert int(m.count.value) == 1
        assert isinstance(m.extra, nnx.BatchStat) and float(m.extra.value) == 1.0
        step(m)
        np.testing.assert_allclose(m.w.value, expected + rows + cols)
        assert int(m.count.value) == 2

    @check
    def fast_path_on_repeated_calls():
        m = Node(w=nnx.Param(jnp.ones((8, 2))), count=nnx.BatchStat(jnp.zeros((), jnp.int32)))

        @nnx.shard_map(mesh=MESH, in_specs=(nnx.StateSharding({nnx.Param: P("data"), ...: P()}),),
                       out_specs=P())
        def step(m):
            m.count.value += 1
            return jax.lax.psum(jnp.sum(m.w.value), "data")

        for k in range(1, 4):
            assert float(step(m)) == 16.0
            assert int(m.count.value) == k
        assert step.cache_info().general_calls == 1, step.cache_info()

    @check
    def sharding_names_show_the_local_view_inside_and_come_back():
        m = Node(
            w=nnx.Param(jnp.ones((8, 4)), out_sharding=("data", "model")),
            v=nnx.Param(jnp.ones((8, 4)), out_sharding=(("data", "model"), None)),
            u=nnx.Param(jnp.ones(4), out_sharding=(None,), tag="a"),
        )
        seen = {}

        def body(m):
            seen.update(w=m.w.out_sharding, v=m.v.out_sharding, u=m.u.get_metadata(exclude_required=True))
            return None

        spec = nnx.StateSharding({nnx.PathContains("w"): P("data", "model"), ...: P()})
        nnx.shard_map(body, mesh=MESH, in_specs=(spec,), out_specs=P())(m)
        assert seen == {"w": (None, None), "v": (None, None),
                        "u": {"out_sharding": (None,), "tag": "a"}}, seen
        assert m.w.out_sharding == ("data", "model") and m.v.out_sharding == (("data", "model"), None)
        # partially manual: the automatic axis keeps its name
        seen.clear()
        nnx.shard_map(body, mesh=MESH, in_specs=(P(),), out_specs=P(), axis_names={"data"})(m)
        assert seen["w"] == (None, "model") and seen["v"] == ("model", None), seen

    @check
    def aliasing_error_names_every_path():
        w = nnx.Param(jnp.ones((8, 2)))
        a, b = Node(w=w), Node(inner=Node(p=w))
        f = nnx.shard_map(lambda a, b: None, mesh=MESH, in_specs=(P("data"), P()), out_specs=P())
        message = raises(nnx.InconsistentAliasingError, f, a, b)
        for path in ("args[0].w", "args[1].inner.p"):
            assert path in message, message
        assert "in_specs" in message, message

    @check
    def collectives_inside_a_method():
        class Stats(nnx.Module):
            def __init__(self):
                self.mean = nnx.BatchStat(jnp.zeros(6))

            def __call__(self, x):
                self.mean.value = jax.lax.pmean(jnp.mean(x, 0), "data")
                return jax.lax.all_gather(jnp.sum(x), "data")  # (4,) on every shard

        s = Stats()
        gathered = nnx.shard_map(
            lambda s, x: s(x), mesh=MESH, in_specs=(P(), P("data")), out_specs=P("data")
        )(s, jnp.asarray(X))
        np.testing.assert_allclose(s.mean.value, X.mean(0), rtol=1e-5, atol=1e-6)
        # out_specs P("data") concatenates the 4 'data' shards' copies
        np.testing.assert_allclose(gathered, np.tile(X.reshape(4, 2, 6).sum((1, 2)), 4), rtol=1e-5)

    @check
    def decorated_method_and_bound_instance():
        class Scale(nnx.Module):
            def __init__(self):
                self.k = nnx.Param(jnp.full((6,), 2.0))

            @nnx.shard_map(mesh=MESH, in_specs=(P(), P("data")), out_specs=P("data"))
            def apply(self, x):
                return x * self.k.value[None, :]

            def __call__(self, x):
                return x * self.k.value[None, :]

        s = Scale()
        np.testing.assert_allclose(s.apply(jnp.asarray(X)), X * 2)
        bound = nnx.shard_map(s, mesh=MESH, in_specs=(P("data"),), out_specs=P("data"))
        np.testing.assert_allclose(bound(jnp.asarray(X)), X * 2)

    @check
    def outputs_objects_and_input_aliases():
        m = Node(w=nnx.Param(jnp.ones((8, 2))))
        f = nnx.shard_map(lambda m: (m, Node(w=nnx.Param(jnp.ones(3)))), mesh=MESH,
                          in_specs=(P(),), out_specs=(P(), P("data")))
        same, new = f(m)
        assert same is m
        # a new object's shards are concatenated per out_specs: 4 'data' shards of 3
        assert new.w.value.shape == (12,)

    @check
    def bad_specs_name_the_variable_path():
        m = MLP()
        x = jnp.asarray(X)

        def bad(spec, *, axis_names=frozenset()):
            f = nnx.shard_map(lambda m, x: None, mesh=MESH, in_specs=(spec, P()),
                              out_specs=P(), axis_names=axis_names)
            return raises(nnx.PrefixError, f, m, x)

        message = bad(P("nope"))
        assert "args[0].calls" in message or "args[0].l1.kernel" in message, message
        assert "'nope'" in message and "mesh" in message, message
        message = bad(nnx.StateSharding({nnx.PathContains("l2"): P(None, None, "data"), ...: P()}))
        assert "args[0].l2.kernel" in message and "rank 2" in message, message
        message = bad(nnx.StateSharding({nnx.PathContains("l2"): P(None, "model"), ...: P()}))
        assert "args[0].l2.kernel" in message and "divide" in message, message
        message = bad(nnx.StateSharding({nnx.PathContains("l1"): P("model"), ...: P()}), axis_names={"data"})
        assert "args[0].l1.kernel" in message and "axis_names" in message, message
        # out_specs longer than the returned value's rank
        f = nnx.shard_map(lambda m: Node(k=nnx.Param(m.l1.kernel.value)), mesh=MESH, in_specs=(P(),),
                          out_specs=P(None, None, "data"))
        message = raises(nnx.PrefixError, f, m)
        assert "output.k" in message and "out_specs" in message, message
        # the objects are untouched after every error
        assert int(m.calls.value) == 0
        np.testing.assert_array_equal(m.l1.kernel.value, K1)

    @check
    def errors_from_jax_name_the_leaves_of_the_group():
        m = Node(w=nnx.Param(jnp.ones((8, 2))))
        # the sum of a 'data' shard differs between shards: out_specs P() is wrong
        f = nnx.shard_map(lambda m: {"s": jnp.sum(m.w.value), "w": m.w}, mesh=MESH,
                          in_specs=(P("data"),), out_specs={"s": P(), "w": P("data")})
        try:
            f(m)
        except ValueError as e:
            notes = "\n".join(getattr(e, "__notes__", []))
        else:
            raise AssertionError("no error")
        assert "output['s']" in notes and "P()" in notes, notes

    @check
    def keyword_arguments_and_wrong_arity_are_rejected():
        f = nnx.shard_map(lambda x, y=None: x, mesh=MESH, in_specs=(P(),), out_specs=P())
        raises(TypeError, lambda: f(jnp.ones(2), y=jnp.ones(2)))
        raises(ValueError, lambda: f(jnp.ones(2), jnp.ones(2)))

    @check
    def an_error_inside_leaves_the_caller_unchanged():
        w = jnp.ones((8, 2))
        m = Node(w=nnx.Param(w))

        def boom(m):
            m.w.value = m.w.value * 0
            m.extra = nnx.Param(jnp.ones(()))
            raise RuntimeError("boom")

        raises(RuntimeError, nnx.shard_map(boom, mesh=MESH, in_specs=(P("data"),),
                                           out_specs=P()), m)
        assert m.w.value is w and not hasattr(m, "extra")

    """
)

CHECKS = [
    "devices",
    "values_equal_a_reference_data_and_tensor_parallel",
    "local_shapes_inside",
    "updates_reach_the_caller",
    "fast_path_on_repeated_calls",
    "sharding_names_show_the_local_view_inside_and_come_back",
    "aliasing_error_names_every_path",
    "collectives_inside_a_method",
    "decorated_method_and_bound_instance",
    "outputs_objects_and_input_aliases",
    "bad_specs_name_the_variable_path",
    "errors_from_jax_name_the_leaves_of_the_group",
    "keyword_arguments_and_wrong_arity_are_rejected",
    "an_error_inside_leaves_the_caller_unchanged",
]


def test_shard_map_checks() -> None:
    # One test, so that one subprocess runs however pytest-xdist distributes tests;
    # the message lists every failing check with its traceback.
    assert_checks_passed(run_device_checks(SCRIPT), CHECKS)
