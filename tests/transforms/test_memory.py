"""A jitted train step keeps no extra copy of parameters (issue: speed, goal 4).

The compiled memory footprint of ``nnx.jit`` over a model equals that of the
hand-written functional step (split -> ``jax.jit`` -> update) it replaces: with
donation by default (``nnx.jit`` donates the arrays only their Variables hold), with
explicit donation, and without (``donate_variables=False``); donated models stay
usable.
"""

import jax
import jax.numpy as jnp
import pytest

import flaxgraph as nnx

FIELDS = (
    "argument_size_in_bytes",
    "output_size_in_bytes",
    "temp_size_in_bytes",
    "alias_size_in_bytes",
)


class Lin(nnx.Module):
    def __init__(self, d: int, rngs: nnx.Rngs):
        self.w = nnx.Param(jax.random.normal(rngs(), (d, d)) / d)
        self.b = nnx.Param(jnp.zeros(d))
        self.count = nnx.BatchStat(jnp.array(0))

    def __call__(self, x):
        self.count += 1
        return jnp.tanh(x @ self.w + self.b[None])


class MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.layers = [Lin(128, rngs) for _ in range(3)]

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def loss(model, x):
    return jnp.mean(model(x) ** 2)


def flaxgraph_step(donate: bool | None):
    """``donate``: ``True`` explicit, ``None`` the default, ``False`` none."""

    @nnx.jit(donate_argnums=0 if donate else None, donate_variables=donate is None)
    def step(model, x):
        value, grads = nnx.value_and_grad(loss)(model, x)
        params = nnx.state(model, nnx.Param)
        nnx.update(model, jax.tree.map(lambda p, g: p - 0.1 * g, params, grads))
        return value

    return step


def handwritten_step(graphdef, donate: bool):
    def step(params, rest, x):
        def loss_and_stats(p):
            # copy=True: `rest`'s Variables belong to the jit trace, and the call writes
            # the BatchStat inside value_and_grad's (merge shares Variables, as in NNX 0.12)
            model = nnx.merge(graphdef, p, rest, copy=True)
            return loss(model, x), nnx.state(model, nnx.BatchStat)

        (value, new_rest), grads = jax.value_and_grad(loss_and_stats, has_aux=True)(params)
        return value, jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), new_rest

    return jax.jit(step, donate_argnums=(0, 1) if donate else ())


@pytest.mark.parametrize("donate", [False, True, None])
def test_memory_analysis_equals_handwritten_step(donate):
    model, x = MLP(nnx.Rngs(0)), jnp.ones((16, 128))
    ours = flaxgraph_step(donate).lower(model, x).compile().memory_analysis()
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    theirs = (
        handwritten_step(graphdef, donate is not False)
        .lower(params, rest, x)
        .compile()
        .memory_analysis()
    )
    for field in FIELDS:
        assert getattr(ours, field) == getattr(theirs, field), field
    if donate is not False:
        assert ours.alias_size_in_bytes > 0


def test_donated_model_stays_usable_and_matches_undonated():
    x = jnp.ones((16, 128))
    a, b = MLP(nnx.Rngs(0)), MLP(nnx.Rngs(0))
    donating, plain = flaxgraph_step(True), flaxgraph_step(False)
    old_kernel = a.layers[0].w.value
    for _ in range(3):
        la, lb = donating(a, x), plain(b, x)
        assert jnp.allclose(la, lb)
    assert old_kernel.is_deleted()  # the first call's buffer was donated
    for la_, lb_ in zip(jax.tree.leaves(nnx.state(a)), jax.tree.leaves(nnx.state(b))):
        assert jnp.array_equal(la_, lb_)
    assert int(a.layers[0].count.value) == 3
