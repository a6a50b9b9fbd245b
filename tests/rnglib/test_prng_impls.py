"""``nnx.Rngs`` under every ``jax_default_prng_impl``, differential against Flax 0.12.8.

An ``Rngs`` is built from an int, a typed key and raw key data (``uint32[2]`` under
threefry2x32, ``uint32[4]`` under rbg and unsafe_rbg) on both libraries in the same
process; the keys it holds and draws, and ``fold_in`` of a drawn key inside
``eval_shape`` of a whole model (what a trainer does to build its abstract model),
must agree. Also: the Dropout layer of a subclass that keeps a whole ``Rngs`` (not
one stream) draws from its stream, as Flax's does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx as flax_nnx

import flaxgraph as nnx

IMPLS = ["threefry2x32", "rbg", "unsafe_rbg"]
LIBS = [pytest.param(nnx, id="flaxgraph"), pytest.param(flax_nnx, id="flax")]


@pytest.fixture(params=IMPLS)
def prng_impl(request: pytest.FixtureRequest) -> Iterator[str]:
    """Sets ``jax_default_prng_impl`` for one test and restores it afterwards."""
    previous = jax.config.jax_default_prng_impl
    jax.config.update("jax_default_prng_impl", request.param)
    try:
        yield request.param
    finally:
        jax.config.update("jax_default_prng_impl", previous)


def raw_key(impl: str) -> jax.Array:
    """Raw key data of ``impl``: what ``jax.random.key_data`` returns for one key."""
    return jnp.arange(2 if impl == "threefry2x32" else 4, dtype=jnp.uint32) + 7


def seeds(impl: str) -> dict[str, Any]:
    return {"int": 3, "typed": jax.random.key(3), "raw": raw_key(impl)}


@pytest.mark.parametrize("kind", ["int", "typed", "raw"])
def test_rngs_keys_match_flax_under_every_impl(prng_impl: str, kind: str) -> None:
    seed = seeds(prng_impl)[kind]
    ours, theirs = nnx.Rngs(seed, dropout=seed), flax_nnx.Rngs(seed, dropout=seed)
    for name in ("default", "dropout"):
        mine, real = ours[name].key.get_value(), theirs[name].key.get_value()
        assert mine.shape == real.shape == ()
        assert mine.dtype == real.dtype
        np.testing.assert_array_equal(jax.random.key_data(mine), jax.random.key_data(real))
    for _ in range(2):
        np.testing.assert_array_equal(
            jax.random.key_data(ours.dropout()), jax.random.key_data(theirs.dropout())
        )


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("kind", ["int", "typed", "raw"])
def test_fold_in_inside_eval_shape_of_a_whole_model(prng_impl: str, kind: str, lib: Any) -> None:
    seed = seeds(prng_impl)[kind]

    class Model(lib.Module):
        def __init__(self, rngs: Any) -> None:
            self.linear = lib.Linear(2, 3, rngs=rngs)
            self.salt = jax.random.key_data(jax.random.fold_in(rngs.params(), 5))

    def build() -> Any:
        return Model(lib.Rngs(params=seed))

    abstract = lib.eval_shape(build)
    assert abstract.linear.kernel.get_value().shape == (2, 3)
    assert abstract.salt.shape == (2 if prng_impl == "threefry2x32" else 4,)


def test_seed_arrays_that_are_not_key_data_still_make_one_stream_per_seed() -> None:
    # uint32 seeds whose trailing size is not the implementation's key size are seeds
    # (one key each), as before; key data is wrapped.
    rngs = nnx.Rngs(jnp.arange(5, dtype=jnp.uint32))
    assert rngs.default.key.get_value().shape == (5,)
    assert nnx.Rngs(jnp.zeros((3, 2), jnp.uint32)).default.key.get_value().shape == (3,)


@pytest.mark.parametrize("lib", LIBS)
def test_dropout_subclass_keeping_a_whole_rngs_draws_from_its_stream(lib: Any) -> None:
    # A library's Dropout that keeps the forked Rngs (not one stream) and relies on the
    # inherited call: the key comes from the layer's 'dropout' stream, as in Flax, not
    # from a 'default' stream the Rngs lacks.
    class KeepAllDropout(lib.Dropout):
        def __init__(self, rate: float, *, rngs: Any) -> None:
            self.rate = rate
            self.broadcast_dims = ()
            self.deterministic = False
            self.rng_collection = "dropout"
            self.rngs = rngs.fork()

    layer = KeepAllDropout(0.5, rngs=lib.Rngs(params=0, dropout=1))
    y = layer(jnp.ones((4, 8)))
    assert y.shape == (4, 8)
    assert set(np.unique(np.asarray(y))) <= {0.0, 2.0}
    assert int(layer.rngs.dropout.count.get_value()) == 1


def test_dropout_subclass_draws_the_same_mask_as_flax() -> None:
    masks = []
    for lib in (nnx, flax_nnx):

        class KeepAllDropout(lib.Dropout):  # type: ignore[name-defined,misc]
            def __init__(self, rngs: Any) -> None:
                self.rate = 0.5
                self.broadcast_dims = ()
                self.deterministic = False
                self.rng_collection = "dropout"
                self.rngs = rngs

        masks.append(np.asarray(KeepAllDropout(lib.Rngs(params=0, dropout=1))(jnp.ones(16))))
    np.testing.assert_array_equal(masks[0], masks[1])


@pytest.mark.parametrize("lib", LIBS)
def test_a_traced_raw_key_makes_one_key(prng_impl: str, lib: Any) -> None:
    # A trainer passes its raw key data as an argument of the function it eval_shapes.
    raw = jax.random.key_data(jax.random.key(0))

    def draw(k: jax.Array) -> jax.Array:
        return jax.random.fold_in(lib.Rngs(params=k).params(), 3)

    out = jax.eval_shape(draw, raw)
    assert out.shape == ()
    assert jnp.issubdtype(out.dtype, jax.dtypes.prng_key)
    model = lib.eval_shape(lambda k: lib.Linear(2, 3, rngs=lib.Rngs(params=k)), raw)
    assert model.kernel.get_value().shape == (2, 3)
