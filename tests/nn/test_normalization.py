"""Tests of flaxgraph/nn/normalization.py against hand-written formulas."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx
from flaxgraph.nn import BatchNorm, GroupNorm, InstanceNorm, LayerNorm, LayerShapeError, RMSNorm

RNG = np.random.default_rng(2)


def rand(*shape, loc=0.0):
    return jnp.asarray(RNG.normal(loc=loc, size=shape), jnp.float32)


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def random_params(layer):
    """Non-trivial scale/bias so the affine part is tested."""
    for name in ("scale", "bias"):
        p = getattr(layer, name, None)
        if p is not None:
            p.value = rand(*p.shape, loc=1.0)
    return layer


class TestLayerNorm:
    def test_formula(self):
        ln = random_params(LayerNorm(6, epsilon=1e-5, rngs=nnx.Rngs(0)))
        x = rand(3, 4, 6, loc=2.0)
        xn = np.asarray(x)
        mean = xn.mean(-1, keepdims=True)
        var = xn.var(-1, keepdims=True)
        expected = (xn - mean) / np.sqrt(var + 1e-5) * np.asarray(ln.scale.value) + np.asarray(
            ln.bias.value
        )
        close(ln(x), expected, 1e-4)
        slow = random_params(LayerNorm(6, epsilon=1e-5, use_fast_variance=False, rngs=nnx.Rngs(0)))
        slow.scale.value, slow.bias.value = ln.scale.value, ln.bias.value
        close(slow(x), expected, 1e-4)

    def test_no_scale_no_bias_and_axes(self):
        ln = LayerNorm(
            12,
            use_scale=False,
            use_bias=False,
            reduction_axes=(-2, -1),
            feature_axes=(-2, -1),
            rngs=nnx.Rngs(0),
        )
        assert ln.scale is None and ln.bias is None
        x = rand(2, 3, 4)
        xn = np.asarray(x)
        expected = (xn - xn.mean((1, 2), keepdims=True)) / np.sqrt(
            xn.var((1, 2), keepdims=True) + 1e-6
        )
        close(ln(x), expected, 1e-4)

    def test_mask(self):
        ln = LayerNorm(4, rngs=nnx.Rngs(0))
        x = rand(2, 4)
        mask = jnp.array([[True, True, True, False], [True, True, True, True]])
        xn = np.asarray(x)
        m, v = xn[0, :3].mean(), xn[0, :3].var()
        close(ln(x, mask=mask)[0], (xn[0] - m) / np.sqrt(v + 1e-6), 1e-4)

    def test_dtype(self):
        ln = LayerNorm(4, rngs=nnx.Rngs(0))
        assert ln(jnp.ones((2, 4), jnp.bfloat16)).dtype == jnp.float32
        ln = LayerNorm(4, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
        assert ln(rand(2, 4)).dtype == jnp.bfloat16

    def test_shape_error(self):
        ln = LayerNorm(4, rngs=nnx.Rngs(0))
        with pytest.raises(
            LayerShapeError,
            match=r"LayerNorm\(num_features=4\) expected inputs with last dimension 4, got shape \(2, 5\)",
        ):
            ln(jnp.ones((2, 5)))


class TestRMSNorm:
    def test_formula(self):
        norm = random_params(RMSNorm(5, rngs=nnx.Rngs(0)))
        assert not hasattr(norm, "bias") or norm.bias is None
        x = rand(3, 5, loc=1.0)
        xn = np.asarray(x)
        expected = (
            xn / np.sqrt((xn**2).mean(-1, keepdims=True) + 1e-6) * np.asarray(norm.scale.value)
        )
        close(norm(x), expected, 1e-4)

    def test_shape_error(self):
        with pytest.raises(LayerShapeError, match=r"RMSNorm\(num_features=5\) expected"):
            RMSNorm(5, rngs=nnx.Rngs(0))(jnp.ones((5, 3)))


class TestGroupNorm:
    def test_formula(self):
        gn = random_params(GroupNorm(6, num_groups=3, epsilon=1e-5, rngs=nnx.Rngs(0)))
        x = rand(2, 4, 6, loc=1.0)
        xn = np.asarray(x).reshape(2, 4, 3, 2)
        mean = xn.mean((1, 3), keepdims=True)
        var = xn.var((1, 3), keepdims=True)
        normalized = ((xn - mean) / np.sqrt(var + 1e-5)).reshape(2, 4, 6)
        expected = normalized * np.asarray(gn.scale.value) + np.asarray(gn.bias.value)
        close(gn(x), expected, 1e-4)

    def test_group_size(self):
        a = GroupNorm(6, num_groups=None, group_size=2, rngs=nnx.Rngs(0))
        b = GroupNorm(6, num_groups=3, rngs=nnx.Rngs(0))
        assert a.num_groups == 3
        x = rand(2, 6)
        close(a(x), b(x))

    def test_errors(self):
        with pytest.raises(ValueError, match="exactly one of num_groups and group_size"):
            GroupNorm(6, group_size=2, rngs=nnx.Rngs(0))
        with pytest.raises(ValueError, match="divide num_features"):
            GroupNorm(6, num_groups=4, rngs=nnx.Rngs(0))
        with pytest.raises(LayerShapeError, match="last dimension 6"):
            GroupNorm(6, num_groups=3, rngs=nnx.Rngs(0))(jnp.ones((2, 4)))


class TestInstanceNorm:
    @pytest.mark.parametrize(
        "shape, feature_axes",
        [((2, 5, 6), -1), ((2, 3, 4, 6), -1), ((3, 4, 5, 6), (1, -1)), ((2, 6, 5), 1)],
    )
    @pytest.mark.parametrize("fast", [True, False])
    def test_formula(self, shape, feature_axes, fast):
        axes = (feature_axes,) if isinstance(feature_axes, int) else feature_axes
        axes = tuple(a % len(shape) for a in axes)
        n = int(np.prod([shape[a] for a in axes]))
        norm = random_params(
            InstanceNorm(
                n, epsilon=1e-5, feature_axes=feature_axes, use_fast_variance=fast, rngs=nnx.Rngs(0)
            )
        )
        x = rand(*shape, loc=1.5)
        xn = np.asarray(x, np.float64)
        reduce = tuple(a for a in range(1, len(shape)) if a not in axes)
        mean = xn.mean(reduce, keepdims=True)
        var = xn.var(reduce, keepdims=True)
        param_shape = tuple(shape[a] if a in axes else 1 for a in range(len(shape)))
        scale = np.asarray(norm.scale.value).reshape(param_shape)
        bias = np.asarray(norm.bias.value).reshape(param_shape)
        close(norm(x), (xn - mean) / np.sqrt(var + 1e-5) * scale + bias, 1e-4)

    def test_params_and_equivalences(self):
        norm = InstanceNorm(5, rngs=nnx.Rngs(0))
        assert norm.scale.shape == norm.bias.shape == (5,)
        assert norm.scale.value.dtype == jnp.float32
        x = rand(2, 3, 4, 5)
        close(norm(x), LayerNorm(5, reduction_axes=(1, 2), rngs=nnx.Rngs(0))(x))
        close(norm(x), GroupNorm(5, num_groups=5, rngs=nnx.Rngs(0))(x))
        bare = InstanceNorm(5, use_scale=False, use_bias=False, rngs=nnx.Rngs(0))
        assert bare.scale is None and bare.bias is None

    def test_mask(self):
        norm = InstanceNorm(2, use_scale=False, use_bias=False, rngs=nnx.Rngs(0))
        x = rand(2, 6, 2)
        mask = np.asarray(RNG.uniform(size=(2, 6, 2)) > 0.3)
        mask[:, 0] = True
        xn = np.asarray(x)
        y = np.asarray(norm(x, mask=jnp.asarray(mask)))
        for b in range(2):
            for f in range(2):
                sel = xn[b, mask[b, :, f], f]
                expected = (xn[b, :, f] - sel.mean()) / np.sqrt(sel.var() + 1e-6)
                close(y[b, :, f], expected, 1e-4)

    def test_dtypes(self):
        norm = InstanceNorm(3, rngs=nnx.Rngs(0))
        assert norm(rand(2, 4, 3).astype(jnp.bfloat16)).dtype == jnp.float32
        half = InstanceNorm(3, dtype=jnp.bfloat16, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
        assert half.scale.value.dtype == jnp.bfloat16
        assert half(rand(2, 4, 3)).dtype == jnp.bfloat16

    def test_shape_errors(self):
        norm = InstanceNorm(4, rngs=nnx.Rngs(0))
        with pytest.raises(
            LayerShapeError,
            match=r"InstanceNorm\(num_features=4\) expected inputs with last dimension 4, "
            r"got shape \(2, 3, 5\)",
        ):
            norm(jnp.ones((2, 3, 5)))
        with pytest.raises(LayerShapeError, match=r"InstanceNorm.*rank >= 2"):
            norm(jnp.ones((4,)))
        with pytest.raises(LayerShapeError, match="InstanceNorm"):
            InstanceNorm(4, feature_axes=5, rngs=nnx.Rngs(0))(jnp.ones((2, 4)))


def test_rms_norm_takes_mask_positionally():
    norm = RMSNorm(3, use_scale=False, rngs=nnx.Rngs(0))
    x = rand(2, 3)
    mask = jnp.array([[True, True, False], [True, False, True]])
    xn, m = np.asarray(x), np.asarray(mask)
    ms = np.array([(xn[i, m[i]] ** 2).mean() for i in range(2)])[:, None]
    close(norm(x, mask), xn / np.sqrt(ms + 1e-6))
    close(norm(x, mask), norm(x, mask=mask))


class TestBatchNorm:
    def test_training_statistics_and_running_update(self):
        bn = random_params(BatchNorm(3, momentum=0.9, epsilon=1e-5, rngs=nnx.Rngs(0)))
        assert isinstance(bn.mean, nnx.BatchStat) and isinstance(bn.var, nnx.BatchStat)
        x = rand(8, 5, 3, loc=2.0)
        xn = np.asarray(x).reshape(-1, 3)
        mean, var = xn.mean(0), xn.var(0)
        expected = (np.asarray(x) - mean) / np.sqrt(var + 1e-5) * np.asarray(
            bn.scale.value
        ) + np.asarray(bn.bias.value)
        close(bn(x), expected, 1e-4)
        close(bn.mean.value, 0.1 * mean, 1e-5)
        close(bn.var.value, 0.9 * 1.0 + 0.1 * var, 1e-5)
        bn(x)
        close(bn.mean.value, 0.9 * 0.1 * mean + 0.1 * mean, 1e-5)

    def test_use_running_average(self):
        bn = BatchNorm(3, use_running_average=True, rngs=nnx.Rngs(0))
        bn.mean.value = jnp.array([1.0, 2.0, 3.0])
        bn.var.value = jnp.array([4.0, 1.0, 0.25])
        x = rand(4, 3)
        expected = (np.asarray(x) - np.array([1.0, 2.0, 3.0])) / np.sqrt(
            np.array([4.0, 1.0, 0.25]) + 1e-5
        )
        close(bn(x), expected, 1e-4)
        close(bn.mean.value, jnp.array([1.0, 2.0, 3.0]))  # not updated
        # call argument overrides the attribute
        bn(x, use_running_average=False)
        assert not np.allclose(bn.mean.value, [1.0, 2.0, 3.0])

    def test_train_eval_toggle(self):
        bn = BatchNorm(3, rngs=nnx.Rngs(0))
        model = nnx.Sequential(bn)
        assert bn.use_running_average is False
        model.eval()
        assert bn.use_running_average is True
        before = bn.mean.value
        model(rand(4, 3, loc=5.0))
        close(bn.mean.value, before)
        model.train()
        assert bn.use_running_average is False
        model(rand(4, 3, loc=5.0))
        assert not np.allclose(bn.mean.value, before)

    def test_none_mode_error(self):
        bn = BatchNorm(3, use_running_average=None, rngs=nnx.Rngs(0))
        with pytest.raises(ValueError, match="use_running_average is None"):
            bn(jnp.ones((2, 3)))

    def test_feature_axis(self):
        bn = BatchNorm(4, axis=1, rngs=nnx.Rngs(0))
        x = rand(3, 4, 5)
        xn = np.asarray(x)
        mean = xn.mean((0, 2), keepdims=True)
        var = xn.var((0, 2), keepdims=True)
        close(bn(x), (xn - mean) / np.sqrt(var + 1e-5), 1e-4)
        with pytest.raises(LayerShapeError, match=r"BatchNorm\(num_features=4, axis=1\)"):
            bn(jnp.ones((4, 3, 5)))

    def test_vmap_axis_name_averages_stats(self):
        bn = BatchNorm(3, momentum=0.5, axis_name="batch", rngs=nnx.Rngs(0))
        x = rand(4, 5, 3, loc=1.0)

        @nnx.vmap(in_axes=(None, 0), out_axes=0, axis_name="batch")
        def apply(bn, x):
            return bn(x)

        y = apply(bn, x)
        xn = np.asarray(x).reshape(-1, 3)
        # statistics are over all 4 * 5 examples, not per vmapped slice
        close(y, (np.asarray(x) - xn.mean(0)) / np.sqrt(xn.var(0) + 1e-5), 1e-4)
        close(bn.mean.value, 0.5 * xn.mean(0), 1e-5)
        close(bn.var.value, 0.5 + 0.5 * xn.var(0), 1e-5)

    def test_jit_and_grad(self):
        bn = BatchNorm(3, rngs=nnx.Rngs(0))
        x = rand(4, 3)

        @nnx.jit
        def step(bn, x):
            return nnx.grad(lambda m: jnp.sum(m(x) ** 2))(bn)

        grads = step(bn, x)
        assert set(grads.keys()) == {"scale", "bias"}  # only Params are differentiated
        assert not np.allclose(bn.mean.value, 0.0)  # BatchStats updated through jit + grad


@pytest.mark.parametrize(
    "make",
    [
        lambda: LayerNorm(4, rngs=nnx.Rngs(0)),
        lambda: RMSNorm(4, rngs=nnx.Rngs(0)),
        lambda: GroupNorm(4, num_groups=2, rngs=nnx.Rngs(0)),
        lambda: InstanceNorm(4, rngs=nnx.Rngs(0)),
    ],
)
def test_jit_and_grad(make):
    layer = make()
    x = rand(3, 4)
    close(nnx.jit(lambda m, x: m(x))(layer, x), layer(x))
    grads = nnx.grad(lambda m, x: jnp.sum(m(x) * x))(layer, x)
    assert all(bool(jnp.isfinite(g).all()) for g in jax.tree.leaves(grads))


def test_group_norm_mask_over_features_only_broadcasts():
    # a mask of shape (num_features,) selects features for every example, as in Linen
    x = jax.random.normal(jax.random.key(0), (10, 6))
    mask = np.array([True, False, True, False, True, False])
    gn = GroupNorm(6, num_groups=3, rngs=nnx.Rngs(0))
    full = gn(x, mask=np.broadcast_to(mask, x.shape))
    np.testing.assert_array_equal(gn(x, mask=mask), full)
    # each group holds one selected feature, so those come out as zero
    np.testing.assert_allclose(np.asarray(full)[:, mask], 0.0, atol=1e-6)


def test_ref_backed_batch_stats_update_under_plain_jax_grad():
    # Flax NNX 0.12 integration_test::test_example_mutable_arrays: hijax BatchStats
    # captured by a jax.value_and_grad are written in place and carry no gradient.
    model = nnx.with_vars(nnx.BatchNorm(3, use_running_average=False, rngs=nnx.Rngs(0)), hijax=True)
    x = jnp.arange(6.0).reshape(2, 3)

    @jax.jit
    def step(x):
        graphdef, params, rest = nnx.split(model, nnx.Param, ...)

        def loss(params):
            return jnp.sum(nnx.merge(graphdef, params, rest)(x) ** 2)

        return jax.grad(loss)(nnx.with_vars(params, hijax=False))

    step(x)
    np.testing.assert_allclose(model.mean[...], 0.01 * jnp.array([1.5, 2.5, 3.5]), rtol=1e-6)
