"""Tests of flaxgraph/nn/normalization_wrappers.py: SpectralNorm's power iteration and
WeightNorm's rescaling recomputed in NumPy; training/evaluation modes; failed calls."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import flaxgraph as nnx
from flaxgraph.nn import (
    Conv,
    LayerNorm,
    LayerShapeError,
    Linear,
    SpectralNorm,
    WeightNorm,
)

RNG = np.random.default_rng(11)


def rand(*shape):
    return jnp.asarray(RNG.normal(size=shape), jnp.float32)


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def power_iteration(w, u, n_steps, eps):
    """NumPy reference: (w / sigma, new u, sigma) in float64."""
    w2 = np.asarray(w, np.float64).reshape(-1, w.shape[-1])
    u = np.asarray(u, np.float64)

    def l2(a):
        return a / np.sqrt((a**2).sum() + eps)

    for _ in range(n_steps):
        v = l2(u @ w2.T)
        u = l2(v @ w2)
    sigma = (v @ w2 @ u.T).item()
    return np.asarray(w, np.float64) / sigma, u, sigma


def u_of(layer, name="kernel"):
    return np.asarray(layer.batch_stats[(name, "u")].value)


def sigma_of(layer, name="kernel"):
    return float(layer.batch_stats[(name, "sigma")].value)


class TestSpectralNorm:
    def test_state_layout(self):
        layer = SpectralNorm(Linear(4, 5, rngs=nnx.Rngs(0)), rngs=nnx.Rngs(1))
        assert set(layer.batch_stats) == {("kernel", "u"), ("kernel", "sigma")}
        assert layer.batch_stats[("kernel", "u")].value.shape == (1, 5)
        assert layer.batch_stats[("kernel", "sigma")].value.shape == ()
        assert isinstance(layer.batch_stats[("kernel", "u")], nnx.BatchStat)
        assert layer.use_running_average is False
        # u starts small and random (normal, stddev 0.01); sigma starts at 1
        assert 0 < np.abs(u_of(layer)).max() < 0.1
        assert sigma_of(layer) == 1.0
        bstats = nnx.state(layer, nnx.BatchStat)
        assert len(jax.tree.leaves(bstats)) == 2

    @pytest.mark.parametrize("n_steps", [1, 3])
    def test_numerics_and_training_update(self, n_steps):
        lin = Linear(4, 5, rngs=nnx.Rngs(0))
        lin.bias.value = rand(5)
        layer = SpectralNorm(lin, n_steps=n_steps, epsilon=1e-3, rngs=nnx.Rngs(1))
        w0, b0, u0 = np.asarray(lin.kernel.value), np.asarray(lin.bias.value), u_of(layer)
        x = rand(3, 4)
        w_ref, u_ref, sigma_ref = power_iteration(w0, u0, n_steps, 1e-3)
        y = layer(x)
        close(y, np.asarray(x, np.float64) @ w_ref + b0)
        close(lin.kernel.value, w_ref)  # the normalized kernel is written into the layer
        close(lin.bias.value, b0)  # rank-1 Params are left alone
        close(u_of(layer), u_ref)
        close(sigma_of(layer), sigma_ref)

    def test_eval_mode_uses_stored_u_and_updates_nothing(self):
        lin = Linear(4, 3, rngs=nnx.Rngs(0))
        layer = SpectralNorm(lin, rngs=nnx.Rngs(1))
        layer.eval()
        assert layer.use_running_average is True
        w0, u0 = np.asarray(lin.kernel.value), u_of(layer)
        x = rand(2, 4)
        w_ref, _, _ = power_iteration(w0, u0, 1, 1e-12)
        close(layer(x), np.asarray(x) @ w_ref + np.asarray(lin.bias.value))
        np.testing.assert_array_equal(u_of(layer), u0)
        assert sigma_of(layer) == 1.0
        # an explicit update_stats=True at the call overrides eval mode
        layer(x, update_stats=True)
        assert not np.allclose(u_of(layer), u0)
        layer.train()
        assert layer.use_running_average is False

    def test_update_stats_argument(self):
        frozen = SpectralNorm(Linear(4, 3, rngs=nnx.Rngs(0)), update_stats=False, rngs=nnx.Rngs(1))
        assert frozen.use_running_average is True
        u0 = u_of(frozen)
        frozen(rand(2, 4))
        np.testing.assert_array_equal(u_of(frozen), u0)
        live = SpectralNorm(Linear(4, 3, rngs=nnx.Rngs(0)), rngs=nnx.Rngs(1))
        u0 = u_of(live)
        live(rand(2, 4), update_stats=False)
        np.testing.assert_array_equal(u_of(live), u0)
        live.use_running_average = None
        with pytest.raises(ValueError, match="update_stats"):
            live(rand(2, 4))

    def test_train_eval_on_a_parent_model(self):
        class Model(nnx.Module):
            def __init__(self, rngs):
                self.sn = SpectralNorm(Linear(4, 4, rngs=rngs), rngs=rngs)
                self.drop = nnx.Dropout(0.5, rngs=rngs)

            def __call__(self, x):
                return self.drop(self.sn(x))

        model = Model(nnx.Rngs(0))
        x = rand(2, 4)
        model.eval()
        u0 = u_of(model.sn)
        model(x)
        np.testing.assert_array_equal(u_of(model.sn), u0)
        model.train()
        model(x)
        assert not np.allclose(u_of(model.sn), u0)

    def test_power_iteration_converges_to_the_top_singular_value(self):
        lin = Linear(6, 4, rngs=nnx.Rngs(0))
        w0 = np.asarray(lin.kernel.value)
        layer = SpectralNorm(lin, n_steps=50, rngs=nnx.Rngs(1))
        layer(rand(1, 6))
        close(sigma_of(layer), np.linalg.svd(w0)[1][0], 1e-4)
        close(np.linalg.svd(np.asarray(lin.kernel.value))[1][0], 1.0, 1e-4)

    def test_higher_rank_kernels_are_flattened(self):
        conv = Conv(3, 6, (2, 2), rngs=nnx.Rngs(0))
        layer = SpectralNorm(conv, rngs=nnx.Rngs(1))
        assert layer.batch_stats[("kernel", "u")].value.shape == (1, 6)
        w0, u0 = np.asarray(conv.kernel.value), u_of(layer)
        layer(rand(1, 5, 5, 3))
        w_ref, u_ref, _ = power_iteration(w0, u0, 1, 1e-12)
        close(conv.kernel.value, w_ref)
        close(u_of(layer), u_ref)
        with pytest.raises(ValueError, match=r"layer_instance\.kernel has rank 4"):
            SpectralNorm(
                Conv(3, 6, (2, 2), rngs=nnx.Rngs(0)), error_on_non_matrix=True, rngs=nnx.Rngs(1)
            )

    def test_layers_without_matrices_are_untouched(self):
        ln = LayerNorm(4, rngs=nnx.Rngs(0))
        layer = SpectralNorm(ln, rngs=nnx.Rngs(1))
        assert layer.batch_stats == {}
        x = rand(2, 4)
        close(layer(x), ln(x))

    def test_param_dtype_and_dtype(self):
        layer = SpectralNorm(
            Linear(4, 3, rngs=nnx.Rngs(0)), param_dtype=jnp.bfloat16, rngs=nnx.Rngs(1)
        )
        assert layer.batch_stats[("kernel", "u")].value.dtype == jnp.bfloat16
        layer(rand(2, 4))
        assert layer.batch_stats[("kernel", "sigma")].value.dtype == jnp.bfloat16
        computed = SpectralNorm(
            Linear(4, 3, rngs=nnx.Rngs(0)), dtype=jnp.bfloat16, rngs=nnx.Rngs(1)
        )
        computed(rand(2, 4))
        assert computed.layer_instance.kernel.value.dtype == jnp.float32  # keeps its dtype

    def test_gradient_treats_u_and_v_as_constants(self):
        lin = Linear(4, 5, rngs=nnx.Rngs(0))
        layer = SpectralNorm(lin, rngs=nnx.Rngs(1))
        w0, u0 = lin.kernel.value, jnp.asarray(u_of(layer))
        x = rand(2, 4)

        def reference(w):
            w2 = w
            v = u0 @ w2.T
            v = v / jnp.sqrt(jnp.sum(v**2) + 1e-12)
            u = v @ w2
            u = u / jnp.sqrt(jnp.sum(u**2) + 1e-12)
            u, v = jax.lax.stop_gradient(u), jax.lax.stop_gradient(v)
            sigma = (v @ w2 @ u.T)[0, 0]
            return jnp.sum((x @ (w / sigma)) ** 2)

        grads = nnx.grad(lambda m: jnp.sum((m(x) - lin.bias.value[None]) ** 2))(layer)
        close(grads["layer_instance"]["kernel"].value, jax.grad(reference)(w0), 1e-4)

    def test_jit_follows_the_mode(self):
        layer = SpectralNorm(Linear(4, 3, rngs=nnx.Rngs(0)), rngs=nnx.Rngs(1))
        step = nnx.jit(lambda m, x: m(x))
        x = rand(2, 4)
        u0 = u_of(layer)
        step(layer, x)
        u1 = u_of(layer)
        assert not np.allclose(u1, u0)
        layer.eval()
        step(layer, x)
        np.testing.assert_array_equal(u_of(layer), u1)

    def test_bad_input_names_the_wrapper_and_changes_nothing(self):
        lin = Linear(4, 3, rngs=nnx.Rngs(0))
        layer = SpectralNorm(lin, rngs=nnx.Rngs(1))
        w0, u0 = np.asarray(lin.kernel.value), u_of(layer)
        with pytest.raises(
            LayerShapeError,
            match=r"SpectralNorm\(layer_instance=Linear\(in_features=4, out_features=3\)\)"
            r"\.layer_instance: Linear\(in_features=4, out_features=3\) expected inputs with "
            r"last dimension 4, got shape \(2, 5\)",
        ) as info:
            layer(jnp.ones((2, 5)))
        assert info.value.module is layer
        np.testing.assert_array_equal(np.asarray(lin.kernel.value), w0)
        np.testing.assert_array_equal(u_of(layer), u0)


def weight_norm_reference(w, scale, feature_axes, eps):
    w = np.asarray(w, np.float64)
    if feature_axes is None:
        features = ()
    else:
        axes = (feature_axes,) if isinstance(feature_axes, int) else feature_axes
        features = tuple(sorted({a % w.ndim for a in axes}))
    reduce = tuple(a for a in range(w.ndim) if a not in features)
    y = w / np.sqrt((w**2).sum(reduce, keepdims=True) + eps)
    if scale is not None:
        shape = tuple(w.shape[a] if a in features else 1 for a in range(w.ndim))
        y = y * np.asarray(scale, np.float64).reshape(shape)
    return y


class TestWeightNorm:
    def test_unit_column_norms_for_linear(self):
        lin = Linear(8, 4, rngs=nnx.Rngs(0))
        layer = WeightNorm(lin, rngs=nnx.Rngs(1))
        assert set(layer.scales) == {("kernel",)}
        # as Flax's: plain float32 arrays, not Params
        assert isinstance(layer.scales[("kernel",)], jax.Array)
        assert layer.scales[("kernel",)].dtype == jnp.float32
        y = layer(rand(5, 8))
        assert y.shape == (5, 4)
        close(np.linalg.norm(np.asarray(lin.kernel.value), axis=0), np.ones(4))

    @given(
        feature_axes=st.sampled_from([-1, None, (0, -1), 2, (1, 2)]),
        eps=st.sampled_from([1e-12, 0.5]),
        seed=st.integers(0, 2**16),
    )
    def test_numerics(self, feature_axes, eps, seed):
        conv = Conv(3, 6, (2, 2), rngs=nnx.Rngs(seed))
        layer = WeightNorm(
            conv,
            feature_axes=feature_axes,
            epsilon=eps,
            rngs=nnx.Rngs(seed + 1),
        )
        # scale_init gets Flax's arguments (the stream, no dtype): set random scales
        shape = layer.scales[("kernel",)].shape
        scale = jax.random.normal(jax.random.key(seed), shape)
        layer.scales[("kernel",)] = scale
        w0 = np.asarray(conv.kernel.value)
        expected_shape = (
            ()
            if feature_axes is None
            else tuple(
                w0.shape[a]
                for a in sorted(
                    {
                        a % 4
                        for a in (
                            (feature_axes,) if isinstance(feature_axes, int) else feature_axes
                        )
                    }
                )
            )
        )
        assert scale.shape == expected_shape
        x = rand(1, 4, 4, 3)
        y = layer(x)
        w_ref = weight_norm_reference(w0, scale, feature_axes, eps)
        close(conv.kernel.value, w_ref, 1e-5)
        ref = jax.lax.conv_general_dilated(
            x,
            jnp.asarray(w_ref, jnp.float32),
            (1, 1),
            "SAME",
            dimension_numbers=("NHWC", "HWIO", "NHWC"),
        )
        close(y, ref, 1e-4)

    def test_no_scale_and_custom_filter(self):
        lin = Linear(3, 4, rngs=nnx.Rngs(0))
        lin.bias.value = rand(4)
        layer = WeightNorm(
            lin,
            use_scale=False,
            feature_axes=None,
            variable_filter=nnx.PathContains("bias"),
            rngs=nnx.Rngs(1),
        )
        assert layer.scales is None
        w0, b0 = np.asarray(lin.kernel.value), np.asarray(lin.bias.value)
        layer(rand(2, 3))
        np.testing.assert_array_equal(np.asarray(lin.kernel.value), w0)
        close(lin.bias.value, b0 / np.linalg.norm(b0))

    def test_scales_are_not_trained_unless_made_params(self):
        layer = WeightNorm(Linear(3, 2, rngs=nnx.Rngs(0)), rngs=nnx.Rngs(1))
        x = rand(4, 3)
        grads = nnx.grad(lambda m: jnp.sum(m(x) ** 2))(layer)
        assert "scales" not in grads  # as Flax's: plain arrays get no gradient
        # the opt-in (guides/from_flax.md): scales made Params train
        layer.scales = {path: nnx.Param(v) for path, v in layer.scales.items()}
        grads = nnx.grad(lambda m: jnp.sum(m(x) ** 2))(layer)
        g = grads["scales"][("kernel",)].value
        assert g.shape == (2,) and bool(jnp.any(g != 0))

    def test_dtype_is_the_written_dtype(self):
        lin = Linear(3, 2, rngs=nnx.Rngs(0))
        layer = WeightNorm(lin, dtype=jnp.bfloat16, rngs=nnx.Rngs(1))
        layer(rand(2, 3))
        assert lin.kernel.value.dtype == jnp.bfloat16  # as Flax's

    def test_forwards_call_arguments(self):
        layer = WeightNorm(nnx.Einsum("ab,bc->ac", (3, 4), rngs=nnx.Rngs(0)), rngs=nnx.Rngs(1))
        x = rand(2, 3)
        assert layer(x, "ab,bc->ac").shape == (2, 4)

    def test_bad_feature_axis(self):
        with pytest.raises(ValueError, match=r"feature axis 3 is out of range for the rank-2"):
            WeightNorm(Linear(3, 2, rngs=nnx.Rngs(0)), feature_axes=3, rngs=nnx.Rngs(1))

    def test_bad_input_names_the_wrapper_and_changes_nothing(self):
        lin = Linear(3, 2, rngs=nnx.Rngs(0))
        layer = WeightNorm(lin, rngs=nnx.Rngs(1))
        w0 = np.asarray(lin.kernel.value)
        with pytest.raises(LayerShapeError, match=r"in WeightNorm\(layer_instance=Linear"):
            layer(jnp.ones((2, 7)))
        np.testing.assert_array_equal(np.asarray(lin.kernel.value), w0)


def test_against_flax():
    flax_nnx = pytest.importorskip("flax.nnx")
    x = np.asarray(rand(3, 4))
    ours = SpectralNorm(Linear(4, 5, rngs=nnx.Rngs(0)), n_steps=2, rngs=nnx.Rngs(1))
    theirs = flax_nnx.SpectralNorm(
        flax_nnx.Linear(4, 5, rngs=flax_nnx.Rngs(0)), n_steps=2, rngs=flax_nnx.Rngs(1)
    )
    for mode in ("train", "train", "eval"):
        getattr(ours, mode)()
        getattr(theirs, mode)()
        close(ours(x), theirs(x))
        close(u_of(ours), theirs.batch_stats[("kernel", "u")][...])
    x4 = np.asarray(rand(2, 5, 5, 3))
    ours = WeightNorm(Conv(3, 6, (2, 2), rngs=nnx.Rngs(0)), feature_axes=(0, -1), rngs=nnx.Rngs(1))
    theirs = flax_nnx.WeightNorm(
        flax_nnx.Conv(3, 6, (2, 2), rngs=flax_nnx.Rngs(0)),
        feature_axes=(0, -1),
        rngs=flax_nnx.Rngs(1),
    )
    close(ours(x4), theirs(x4))


def test_layers_built_alike_share_a_graphdef():
    """No static attribute makes two equal models look different to jit's cache."""
    for make in (
        lambda: SpectralNorm(Linear(3, 2, rngs=nnx.Rngs(0)), rngs=nnx.Rngs(1)),
        lambda: WeightNorm(Linear(3, 2, rngs=nnx.Rngs(0)), rngs=nnx.Rngs(1)),
    ):
        a, b = make(), make()
        assert nnx.graphdef(a) == nnx.graphdef(b)
        assert hash(nnx.graphdef(a)) == hash(nnx.graphdef(b))


def test_spectral_norm_iterates_in_the_stored_dtype():
    # dtype=float16 rounds only the normalized kernel, as in Linen/Flax NNX
    lin = nnx.Linear(5, 4, rngs=nnx.Rngs(0))
    kernel = lin.kernel.value
    layer = nnx.SpectralNorm(lin, dtype=jnp.float16, rngs=nnx.Rngs(1))
    u0 = layer.batch_stats[("kernel", "u")].value
    layer(jnp.ones((2, 5)))
    sigma = layer.batch_stats[("kernel", "sigma")].value
    # the kernel keeps its dtype, rounded through float16 (as Flax's)
    assert lin.kernel.value.dtype == jnp.float32 and sigma.dtype == jnp.float32
    _, _, sigma_ref = power_iteration(kernel, u0, 1, 1e-12)
    close(sigma, sigma_ref)
    want = (kernel / sigma).astype(jnp.float16).astype(jnp.float32)
    np.testing.assert_array_equal(np.asarray(lin.kernel.value), np.asarray(want))


def test_weight_norm_rounds_only_the_result_to_dtype():
    lin = nnx.Linear(8, 4, rngs=nnx.Rngs(0))
    kernel = lin.kernel.value
    layer = nnx.WeightNorm(lin, dtype=jnp.float16, rngs=nnx.Rngs(1))
    layer(jnp.ones((2, 8)))
    want = kernel * jax.lax.rsqrt(jnp.sum(kernel * kernel, 0, keepdims=True) + 1e-12)
    assert lin.kernel.value.dtype == jnp.float16
    np.testing.assert_array_equal(
        np.asarray(lin.kernel.value), np.asarray(want.astype(jnp.float16))
    )
