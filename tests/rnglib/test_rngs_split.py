"""split_rngs, fork_rngs, restore_rngs, and RNG state under vmap/scan.

Every expected key is computed with ``jax.random`` alone: a stream with key
``k`` and count ``n`` draws ``fold_in(k, n)``; ``split_rngs(splits=s)`` draws one
key and splits it into ``s``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import random

import flaxgraph as nnx
from flaxgraph.modes import set_graph_updates
from flaxgraph.testing import Node


def data(key: jax.Array) -> list[Any]:
    return np.asarray(random.key_data(key)).tolist()


def count(stream: nnx.RngStream) -> Any:
    return np.asarray(stream.count.value).tolist()


# -- split_rngs as a function ----------------------------------------------------------------------


def test_split_rngs_returns_backups_and_restore_rngs_puts_the_keys_back() -> None:
    rngs = nnx.Rngs(0, dropout=1)
    key0, key1 = rngs.default.key.value, rngs.dropout.key.value
    backups = nnx.split_rngs(rngs, splits=4)
    assert isinstance(backups, nnx.RngBackups)
    for stream, seed in ((rngs.default, 0), (rngs.dropout, 1)):
        assert stream.key.value.shape == (4,)
        expected = random.split(random.fold_in(random.key(seed), 0), 4)
        assert data(stream.key.value) == data(expected)
        assert stream.count.value.shape == (4,) and stream.count.value.dtype == jnp.uint32
        assert count(stream) == [0, 0, 0, 0]
    nnx.restore_rngs(backups)
    assert rngs.default.key.value is key0 and rngs.dropout.key.value is key1
    assert count(rngs.default) == 1 and count(rngs.dropout) == 1  # one key was drawn


def test_split_rngs_as_a_context_manager_with_a_shape_of_splits() -> None:
    rngs = nnx.Rngs(3)
    with nnx.split_rngs(rngs, splits=(2, 3)):
        assert rngs.default.key.value.shape == (2, 3)
        assert rngs.default.count.value.shape == (2, 3)
        expected = random.split(random.fold_in(random.key(3), 0), (2, 3))
        assert data(rngs.default.key.value) == data(expected)
    assert rngs.default.key.value.shape == () and count(rngs.default) == 1
    # every call splits afresh: the second split starts from fold_in(key, 1)
    with nnx.split_rngs(rngs, splits=2):
        assert data(rngs.default.key.value) == data(
            random.split(random.fold_in(random.key(3), 1), 2)
        )
    assert count(rngs.default) == 2


def test_split_rngs_only_selects_streams_by_tag_or_path() -> None:
    rngs = nnx.Rngs(0, dropout=1)
    with nnx.split_rngs(rngs, splits=4, only="dropout"):
        assert rngs.dropout.key.value.shape == (4,)
        assert rngs.default.key.value.shape == ()
    assert count(rngs.default) == 0 and count(rngs.dropout) == 1

    m = Node(enc=nnx.Rngs(params=5), dec=nnx.Rngs(params=6))
    with nnx.split_rngs(m, splits=3, only=nnx.PathContains("dec")):
        assert m.dec.params.key.value.shape == (3,)
        assert m.enc.params.key.value.shape == ()


def test_a_shared_rngs_is_split_once() -> None:
    r = nnx.Rngs(0)
    m = Node(a=r, b=r, c=[r])
    with nnx.split_rngs(m, splits=2):
        assert m.a.default.key.value.shape == (2,) and m.b is m.a
    assert count(r.default) == 1


def test_squeeze_drops_the_split_axis() -> None:
    rngs = nnx.Rngs(0)
    with nnx.split_rngs(rngs, splits=1, squeeze=True):
        assert rngs.default.key.value.shape == ()
        assert data(rngs.default.key.value) == data(
            random.split(random.fold_in(random.key(0), 0), 1)[0]
        )
    with pytest.raises(ValueError, match=r"squeeze=True.*splits=1"):
        nnx.split_rngs(rngs, splits=2, squeeze=True)
    assert rngs.default.key.value.shape == () and count(rngs.default) == 1


# -- split_rngs as a decorator ----------------------------------------------------------------------


def test_decorator_splits_before_each_call_and_restores_after_even_on_error() -> None:
    rngs = nnx.Rngs(7)
    seen: list[Any] = []

    @nnx.split_rngs(splits=5)
    def f(r: nnx.Rngs) -> None:
        seen.append(data(r.default.key.value))

    f(rngs)
    f(rngs)
    assert seen == [data(random.split(random.fold_in(random.key(7), n), 5)) for n in range(2)]
    assert count(rngs.default) == 2 and rngs.default.key.value.shape == ()

    @nnx.split_rngs(splits=5)
    def boom(r: nnx.Rngs) -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        boom(rngs)
    assert rngs.default.key.value.shape == () and count(rngs.default) == 3


class Dense(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.w = nnx.Param(random.normal(rngs.params(), (3, 2)))
        self.dropout_rngs = rngs


def test_every_layer_created_under_split_rngs_and_vmap_gets_distinct_keys() -> None:
    rngs = nnx.Rngs(params=0)

    @nnx.split_rngs(splits=6)
    @nnx.vmap(in_axes=0, out_axes=0)
    def create(rngs: nnx.Rngs) -> Dense:
        return Dense(rngs)

    layers = create(rngs)
    assert layers.w.shape == (6, 3, 2)
    keys = random.split(random.fold_in(random.key(0), 0), 6)
    for i in range(6):
        np.testing.assert_array_equal(
            layers.w.value[i], random.normal(random.fold_in(keys[i], 0), (3, 2))
        )
    assert len({np.asarray(w).tobytes() for w in layers.w.value}) == 6
    # The layers hold the split streams (one per layer), already advanced once.
    assert layers.dropout_rngs is rngs
    assert rngs.params.key.value.shape == ()  # restored outside
    assert count(rngs.params) == 1


# -- RNG state through vmap and scan ------------------------------------------------------------------


class Noisy(nnx.Module):
    def __init__(self, seed: Any):
        self.scale = nnx.Param(jnp.array(2.0))
        self.rngs = nnx.Rngs(noise=seed)

    def __call__(self, x: jax.Array) -> jax.Array:
        return x + self.scale * random.normal(self.rngs.noise(), x.shape)


RNG_AXES = nnx.StateAxes({nnx.RngState: 0, ...: None})


def test_rng_state_mapped_with_state_axes_gives_each_example_its_stream() -> None:
    seeds = random.split(random.key(1), 4)
    m = Noisy(seeds)
    x = jnp.zeros((4, 3))
    f = nnx.vmap(lambda m, x: m(x), in_axes=(RNG_AXES, 0))
    y1, y2 = f(m, x), f(m, x)
    for call, y in enumerate((y1, y2)):
        expected = np.stack(
            [2.0 * random.normal(random.fold_in(seeds[i], call), (3,)) for i in range(4)]
        )
        np.testing.assert_allclose(y, expected, rtol=1e-6)
    assert count(m.rngs.noise) == [2, 2, 2, 2]


def test_rng_state_scanned_per_layer_with_split_rngs() -> None:
    m = Noisy(0)

    @nnx.split_rngs(splits=5)
    @nnx.scan(in_axes=(nnx.Carry, RNG_AXES), out_axes=(nnx.Carry, 0))
    def noisy_steps(x: jax.Array, m: Noisy) -> tuple[jax.Array, jax.Array]:
        y = m(x)
        return y, y

    x0 = jnp.zeros(3)
    y, ys = noisy_steps(x0, m)
    keys = random.split(random.fold_in(random.key(0), 0), 5)
    x, expected = x0, []
    for i in range(5):
        x = x + 2.0 * random.normal(random.fold_in(keys[i], 0), (3,))
        expected.append(x)
    np.testing.assert_allclose(ys, np.stack(expected), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y, expected[-1], rtol=1e-5, atol=1e-6)
    assert m.rngs.noise.key.value.shape == () and count(m.rngs.noise) == 1


def test_rng_count_carried_through_scan_draws_a_new_key_each_step() -> None:
    m = Noisy(3)
    axes = nnx.StateAxes({nnx.RngState: nnx.Carry, ...: None})

    @nnx.scan(in_axes=(axes, 0), out_axes=0)
    def draw(m: Noisy, x: jax.Array) -> jax.Array:
        return m(x)

    ys = draw(m, jnp.zeros((4, 2)))
    expected = np.stack(
        [2.0 * random.normal(random.fold_in(random.key(3), n), (2,)) for n in range(4)]
    )
    np.testing.assert_allclose(ys, expected, rtol=1e-6)
    assert count(m.rngs.noise) == 4


# -- fork_rngs -------------------------------------------------------------------------------------------


def test_fork_rngs_gives_fresh_keys_until_restored() -> None:
    rngs = nnx.Rngs(0, dropout=1)
    with nnx.fork_rngs(rngs, only="dropout"):
        assert data(rngs.dropout.key.value) == data(random.fold_in(random.key(1), 0))
        assert count(rngs.dropout) == 0
        assert rngs.default.key.value.shape == () and count(rngs.default) == 0
    assert data(rngs.dropout.key.value) == data(random.key(1)) and count(rngs.dropout) == 1

    backups = nnx.fork_rngs(rngs, split=3)
    assert data(rngs.default.key.value) == data(random.split(random.fold_in(random.key(0), 0), 3))
    assert data(rngs.dropout.key.value) == data(random.split(random.fold_in(random.key(1), 1), 3))
    nnx.restore_rngs(backups)
    assert count(rngs.default) == 1 and count(rngs.dropout) == 2

    seen: list[Any] = []

    @nnx.fork_rngs()
    def f(r: nnx.Rngs) -> None:
        seen.append(data(r.default.key.value))

    f(rngs)
    assert seen == [data(random.fold_in(random.key(0), 1))]
    assert count(rngs.default) == 2


def test_rngs_fork_makes_independent_streams() -> None:
    rngs = nnx.Rngs(0, dropout=1)
    with pytest.warns(DeprecationWarning):
        forked = rngs.fork(split=2)
    assert forked is not rngs
    assert data(forked.default.key.value) == data(random.split(random.fold_in(random.key(0), 0), 2))
    assert data(forked.dropout.key.value) == data(random.split(random.fold_in(random.key(1), 0), 2))
    assert count(rngs.default) == 1 and count(rngs.dropout) == 1


# -- graph= / graph_updates= (Flax NNX 0.12.8) -----------------------------------------------------


class _Holder(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.lin = nnx.Linear(2, 2, rngs=nnx.Rngs(5))
        self.rngs = rngs
        self.again = rngs  # shared: fine in graph mode


def test_split_rngs_graph_updates_false_returns_a_copy_sharing_variables() -> None:
    rngs = nnx.Rngs(params=0, dropout=1)
    model = _Holder(rngs)
    new = nnx.split_rngs(model, splits=3, only="params", graph_updates=False)
    assert new is not model and new.rngs is new.again and new.rngs is not rngs
    assert new.lin.kernel is model.lin.kernel  # other Variables are shared
    assert new.rngs.params.key.value.shape == (3,) and new.rngs.params.count.value.shape == (3,)
    assert new.rngs.dropout.key is rngs.dropout.key  # unselected stream's state is shared
    # The original keeps its key; its count advanced by the key that was split.
    assert rngs.params.key.value.shape == () and count(rngs.params) == 1
    assert data(new.rngs.params.key.value) == data(
        random.split(random.fold_in(random.key(0), 0), 3)
    )


def test_split_rngs_tree_mode_copies_and_rejects_shared_variables() -> None:
    rngs = nnx.Rngs(0)
    new = nnx.split_rngs(rngs, splits=2, graph=False)
    assert (
        new is not rngs
        and new.default.key.value.shape == (2,)
        and rngs.default.key.value.shape == ()
    )
    with pytest.raises(ValueError, match=r"(?s)several paths.*rngs.*again"):
        nnx.split_rngs(_Holder(nnx.Rngs(0)), splits=2, graph=False)


def test_split_rngs_copy_mode_follows_set_graph_updates() -> None:
    rngs = nnx.Rngs(0)
    with set_graph_updates(False):
        new = nnx.split_rngs(rngs, splits=2)
    assert new is not rngs and rngs.default.key.value.shape == ()


def test_split_rngs_decorator_in_copy_mode_passes_copies() -> None:
    rngs = nnx.Rngs(params=0, dropout=1)
    seen: list[Any] = []

    @nnx.split_rngs(splits=4, graph_updates=False)
    def f(r: nnx.Rngs, *, other: nnx.Rngs) -> None:
        seen.append((r is rngs, r.params.key.value.shape, other.default.key.value.shape))

    f(rngs, other=nnx.Rngs(1))
    assert seen == [(False, (4,), (4,))]
    assert rngs.params.key.value.shape == () and count(rngs.params) == 1


def test_fork_rngs_split_mapping_in_place_and_copy() -> None:
    rngs = nnx.Rngs(params=0, dropout=1, noise=2)
    with nnx.fork_rngs(rngs, split={"params": 2, "dropout": None}):
        assert rngs.params.key.value.shape == (2,)
        assert data(rngs.dropout.key.value) == data(random.fold_in(random.key(1), 0))
        assert count(rngs.noise) == 0 and data(rngs.noise.key.value) == data(random.key(2))
    new = nnx.fork_rngs(rngs, split={"params": 2}, graph_updates=False)
    assert new.params.key.value.shape == (2,) and new.dropout.key is rngs.dropout.key
    assert rngs.params.key.value.shape == ()


def test_fork_rngs_rejects_a_bad_split() -> None:
    with pytest.raises(TypeError, match=r"split\['params'\] must be an int"):
        nnx.fork_rngs(nnx.Rngs(params=0), split={"params": "two"})
