"""Sharded initialisation and training on a (data=2, model=4) mesh of 8 CPU devices.

The main pytest process has one CPU device (the count is fixed when JAX starts),
so everything runs in one subprocess started with
``XLA_FLAGS=--xla_force_host_platform_device_count=8``. The model is a small MLP
of flaxgraph Modules whose Params carry sharding names (``kernel`` sharded
``(None, 'model')`` then ``('model', None)``). The subprocess:

* initialises it sharded inside ``nnx.jit`` (constrained with
  ``get_partition_spec`` + ``with_sharding_constraint`` under the mesh, or with
  ``get_named_sharding`` shardings), and with ``jax.jit(out_shardings=...)`` from
  ``get_named_sharding``; checks every Param is placed with its NamedSharding;
* trains it for a few steps with ``nnx.jit`` + ``nnx.value_and_grad`` + hand-written
  SGD on data sharded over ``'data'``, and compares the losses and final weights with
  the same run unsharded and with a plain-JAX run on a dict of arrays;
* checks ``vmap(spmd_axis_name=...)`` lays the batch axis out like ``jax.vmap``.

Each check reports ``ok`` or its traceback; the test lists every failing one.
"""

from __future__ import annotations

import textwrap

from helpers import assert_checks_passed, run_device_checks

SCRIPT = textwrap.dedent(
    r'''
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import flaxgraph as nnx

    jax.config.update("jax_numpy_rank_promotion", "raise")

    MESH = Mesh(np.array(jax.devices()).reshape(2, 4), ("data", "model"))
    NAMES = {
        ("l1", "kernel"): (None, "model"),
        ("l1", "bias"): ("model",),
        ("l2", "kernel"): ("model", None),
        ("l2", "bias"): (None,),
    }
    LR, STEPS = 0.1, 4

    class Linear(nnx.Module):
        def __init__(self, din, dout, rngs, kernel_names, bias_names):
            init = nnx.with_partitioning(jax.nn.initializers.lecun_normal(), kernel_names)
            self.kernel = nnx.Param(init(rngs.params(), (din, dout)))
            self.bias = nnx.Param(jnp.zeros((dout,)), out_sharding=bias_names)

        def __call__(self, x):
            return x @ self.kernel + self.bias[None]

    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.l1 = Linear(4, 16, rngs, NAMES["l1", "kernel"], NAMES["l1", "bias"])
            self.l2 = Linear(16, 2, rngs, NAMES["l2", "kernel"], NAMES["l2", "bias"])

        def __call__(self, x):
            return self.l2(jax.nn.relu(self.l1(x)))

    X = jax.random.normal(jax.random.key(1), (16, 4))
    Y = jax.random.normal(jax.random.key(2), (16, 2))

    def params_of(model):
        return {
            (layer, name): getattr(getattr(model, layer), name)
            for layer, name in NAMES
        }

    def assert_placed(model):
        for where, param in params_of(model).items():
            assert param.out_sharding == NAMES[where], (where, param.out_sharding)
            expected = NamedSharding(MESH, P(*NAMES[where]))
            got = param.value.sharding
            assert got.is_equivalent_to(expected, param.value.ndim), (where, got, expected)
            assert len(param.value.addressable_shards) == 8
        # a sharded kernel really is split: each device holds a quarter of it
        shard = model.l1.kernel.value.addressable_shards[0].data
        assert shard.shape == (4, 4), shard.shape

    def unsharded_model():
        return MLP(nnx.Rngs(0))

    @nnx.jit
    def create_with_partition_specs():
        model = MLP(nnx.Rngs(0))
        state = nnx.state(model)
        nnx.update(model, nnx.with_sharding_constraint(state, nnx.get_partition_spec(state)))
        return model

    @nnx.jit
    def create_with_named_shardings():
        model = MLP(nnx.Rngs(0))
        state = nnx.state(model)
        shardings = nnx.get_named_sharding(state, MESH)
        nnx.update(model, nnx.with_sharding_constraint(state, shardings))
        return model

    def create_with_out_shardings():
        abstract = nnx.eval_shape(lambda: MLP(nnx.Rngs(0)))
        graphdef, abstract_state = nnx.split(abstract)
        shardings = nnx.get_named_sharding(abstract_state, MESH)
        state = jax.jit(lambda: nnx.split(MLP(nnx.Rngs(0)))[1], out_shardings=shardings)()
        return nnx.merge(graphdef, state)

    def same_values(a, b):
        for where, p in params_of(a).items():
            np.testing.assert_array_equal(np.asarray(p.value), np.asarray(params_of(b)[where].value))

    @check
    def init_with_partition_specs_under_the_mesh():
        with jax.set_mesh(MESH):
            model = create_with_partition_specs()
        assert_placed(model)
        same_values(model, unsharded_model())

    @check
    def init_with_named_shardings():
        model = create_with_named_shardings()
        assert_placed(model)
        same_values(model, unsharded_model())

    @check
    def init_with_jit_out_shardings():
        model = create_with_out_shardings()
        assert type(model) is MLP
        assert_placed(model)
        same_values(model, unsharded_model())

    def loss_fn(model, x, y):
        return jnp.mean((model(x) - y) ** 2)

    @nnx.jit
    def train_step(model, x, y):
        loss, grads = nnx.value_and_grad(loss_fn)(model, x, y)
        params = nnx.state(model, nnx.Param)
        nnx.update(model, jax.tree.map(lambda p, g: p - LR * g, params, grads))
        return loss

    def train(model, x, y):
        return [float(train_step(model, x, y)) for _ in range(STEPS)]

    def plain_jax_losses():
        """The same run with no flaxgraph: a dict of arrays and jax.value_and_grad."""
        model = unsharded_model()
        p = {k: jnp.asarray(v.value) for k, v in params_of(model).items()}

        def loss(p, x, y):
            h = jax.nn.relu(x @ p["l1", "kernel"] + p["l1", "bias"][None])
            out = h @ p["l2", "kernel"] + p["l2", "bias"][None]
            return jnp.mean((out - y) ** 2)

        step = jax.jit(jax.value_and_grad(loss))
        losses = []
        for _ in range(STEPS):
            value, g = step(p, X, Y)
            p = {k: p[k] - LR * g[k] for k in p}
            losses.append(float(value))
        return losses, p

    @check
    def sharded_training_matches_unsharded_and_plain_jax():
        with jax.set_mesh(MESH):
            model = create_with_partition_specs()
        x = jax.device_put(X, NamedSharding(MESH, P("data", None)))
        y = jax.device_put(Y, NamedSharding(MESH, P("data", None)))
        sharded = train(model, x, y)
        assert_placed(model)  # the updated Params keep their placement

        reference = unsharded_model()
        unsharded = train(reference, X, Y)
        np.testing.assert_allclose(sharded, unsharded, rtol=1e-5, atol=1e-6)
        for where, p in params_of(model).items():
            np.testing.assert_allclose(
                np.asarray(p.value), np.asarray(params_of(reference)[where].value),
                rtol=1e-5, atol=1e-6,
            )
        assert unsharded[-1] < unsharded[0], unsharded  # it did train

        plain, plain_params = plain_jax_losses()
        np.testing.assert_allclose(sharded, plain, rtol=1e-5, atol=1e-6)
        for where, p in params_of(model).items():
            np.testing.assert_allclose(
                np.asarray(p.value), np.asarray(plain_params[where]), rtol=1e-5, atol=1e-6
            )

    @check
    def vmap_spmd_axis_name_matches_jax_vmap():
        x = jnp.arange(32.0).reshape(4, 8)

        def f(v):
            return jax.lax.with_sharding_constraint(v * 2, P("model"))

        class Holder(nnx.Module):
            def __init__(self, w):
                self.w = nnx.Param(w)

        with jax.set_mesh(MESH):
            expected = jax.jit(jax.vmap(f, spmd_axis_name="data"))(x)
            h = Holder(x)

            def g(h):
                h.w.value = f(h.w.value)
                return f(h.w.value)

            out = nnx.jit(nnx.vmap(g, spmd_axis_name="data"))(h)
        assert expected.sharding.spec == P("data", "model"), expected.sharding
        assert out.sharding.is_equivalent_to(expected.sharding, 2), out.sharding
        assert h.w.value.sharding.is_equivalent_to(expected.sharding, 2), h.w.value.sharding
        np.testing.assert_array_equal(h.w.value, np.asarray(expected))
        np.testing.assert_array_equal(out, np.asarray(expected) * 2)

    '''
)

CHECKS = [
    "init_with_partition_specs_under_the_mesh",
    "init_with_named_shardings",
    "init_with_jit_out_shardings",
    "sharded_training_matches_unsharded_and_plain_jax",
    "vmap_spmd_axis_name_matches_jax_vmap",
]


def test_sharded_checks() -> None:
    # One test, so that one subprocess runs however pytest-xdist distributes tests;
    # the message lists every failing check with its traceback.
    assert_checks_passed(run_device_checks(SCRIPT), CHECKS)
