"""Tests of flaxgraph/rnglib/rngs.py: Rngs, RngStream, RngState kinds, fork and reseed."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx


def key_data(k):
    return np.asarray(jax.random.key_data(k))


def expected_key(seed, count):
    return key_data(jax.random.fold_in(jax.random.key(seed), count))


def reseeded_key(seed, count, nth=0):
    """The count-th key of the nth stream (in walk order) reseeded with ``seed``: as in
    Flax NNX 0.12.8, its key is the nth key of one fresh stream, fold_in(key(seed), nth)."""
    first = jax.random.fold_in(jax.random.key(seed), nth)
    return key_data(jax.random.fold_in(first, count))


# -- RngStream ------------------------------------------------------------------------------------


def test_stream_keys_are_fold_in_of_key_and_count():
    s = nnx.RngStream(3, tag="params")
    for count in range(3):
        k = s()
        assert jnp.issubdtype(k.dtype, jax.dtypes.prng_key)
        np.testing.assert_array_equal(key_data(k), expected_key(3, count))
    assert int(s.count.value) == 3
    assert s.count.value.dtype == jnp.uint32


def test_stream_state_is_variables_tagged_with_the_name():
    s = nnx.RngStream(0, tag="dropout")
    assert type(s.key) is nnx.RngKey and type(s.count) is nnx.RngCount
    assert isinstance(s.key, nnx.RngState) and isinstance(s.count, nnx.RngState)
    assert s.key.tag == s.count.tag == s.tag == "dropout"


@pytest.mark.parametrize(
    "seed",
    [
        5,
        np.int64(5),
        jnp.array(5),
        jax.random.key(5),
        jax.random.PRNGKey(5),  # raw uint32[2]
    ],
)
def test_stream_seed_forms(seed):
    s = nnx.RngStream(seed, tag="a")
    assert jnp.issubdtype(s.key.value.dtype, jax.dtypes.prng_key)
    np.testing.assert_array_equal(key_data(s()), expected_key(5, 0))


def test_stream_from_array_of_seeds_is_batched():
    s = nnx.RngStream(jnp.arange(3), tag="a")
    assert s.key.value.shape == (3,) and s.count.value.shape == (3,)
    keys = jax.vmap(lambda k, c: jax.random.fold_in(k, c))(s.key.value, s.count.value)
    np.testing.assert_array_equal(key_data(keys[1]), expected_key(1, 0))


@pytest.mark.parametrize("bad", [1.5, jnp.ones(2), "seed"])
def test_stream_bad_seed(bad):
    with pytest.raises(TypeError, match="Cannot make a random key"):
        nnx.RngStream(bad, tag="a")


def test_stream_fork_is_independent():
    s = nnx.RngStream(0, tag="a")
    f = s.fork()
    assert f.tag == "a" and int(s.count.value) == 1 and int(f.count.value) == 0
    base = jax.random.fold_in(jax.random.key(0), 0)
    np.testing.assert_array_equal(key_data(f()), key_data(jax.random.fold_in(base, 0)))


def test_stream_split():
    s = nnx.RngStream(0, tag="a")
    f = s.split(4)
    assert f.key.value.shape == (4,) and f.count.value.shape == (4,)
    expected = jax.random.split(jax.random.fold_in(jax.random.key(0), 0), 4)
    np.testing.assert_array_equal(key_data(f.key.value), key_data(expected))
    assert s.split((2, 3)).key.value.shape == (2, 3)
    assert int(s.count.value) == 2


def test_stream_fork_split_is_deprecated_but_still_splits():
    # Flax NNX 0.12.8 deprecates RngStream.fork(split=...) in favour of split().
    s = nnx.RngStream(0, tag="a")
    with pytest.warns(DeprecationWarning, match=r"RngStream.split"):
        f = s.fork(split=4)
    expected = jax.random.split(jax.random.fold_in(jax.random.key(0), 0), 4)
    np.testing.assert_array_equal(key_data(f.key.value), key_data(expected))


def test_stream_broadcast_repeats_one_fresh_key():
    s = nnx.RngStream(3, tag="a")
    b = s.broadcast((2, 3))
    assert b.key.value.shape == (2, 3) and b.count.value.shape == (2, 3) and b.tag == "a"
    fresh = key_data(jax.random.fold_in(jax.random.key(3), 0))
    np.testing.assert_array_equal(key_data(b.key.value), np.broadcast_to(fresh, (2, 3, 2)))
    assert int(s.count.value) == 1


# -- Rngs -----------------------------------------------------------------------------------------


def test_named_streams_and_default():
    rngs = nnx.Rngs(0, dropout=1)
    np.testing.assert_array_equal(key_data(rngs.dropout()), expected_key(1, 0))
    np.testing.assert_array_equal(key_data(rngs.params()), expected_key(0, 0))  # default
    np.testing.assert_array_equal(key_data(rngs()), expected_key(0, 1))
    assert int(rngs.default.count.value) == 2 and int(rngs.dropout.count.value) == 1


def test_keyword_only_streams():
    rngs = nnx.Rngs(params=0, dropout=1)
    np.testing.assert_array_equal(key_data(rngs.params()), expected_key(0, 0))
    assert [n for n, _ in rngs.items()] == ["dropout", "params"]


def test_missing_stream_without_default():
    rngs = nnx.Rngs(params=0)
    with pytest.raises(
        AttributeError,
        match=r"No RngStream named 'dropout' found in Rngs.*nnx\.Rngs\(dropout=seed\)",
    ):
        rngs.dropout()
    with pytest.raises(AttributeError, match="No RngStream named 'default'"):
        rngs()
    with pytest.raises(KeyError, match="No RngStream named 'dropout'"):
        rngs["dropout"]


def test_private_names_are_not_streams():
    rngs = nnx.Rngs(0)
    with pytest.raises(AttributeError):
        rngs._private  # noqa: B018


def test_getitem_contains_items():
    rngs = nnx.Rngs(0, dropout=1)
    assert rngs["dropout"] is rngs.dropout
    assert rngs["other"] is rngs.default
    assert "dropout" in rngs and "other" not in rngs
    assert [n for n, _ in rngs.items()] == ["default", "dropout"]


def test_rngs_accepts_existing_streams():
    s = nnx.RngStream(7, tag="x")
    rngs = nnx.Rngs(x=s)
    assert rngs.x is s


def test_rngs_fork():
    rngs = nnx.Rngs(0, dropout=1)
    forked = rngs.fork()
    assert [n for n, _ in forked.items()] == ["default", "dropout"]
    assert int(rngs.default.count.value) == 1 and int(rngs.dropout.count.value) == 1
    base = jax.random.fold_in(jax.random.key(1), 0)
    np.testing.assert_array_equal(key_data(forked.dropout()), key_data(jax.random.fold_in(base, 0)))
    with pytest.warns(DeprecationWarning, match="deprecated"):
        assert rngs.fork(split=2).default.key.value.shape == (2,)


def test_rngs_fork_split_mapping_splits_selected_streams_and_forks_the_rest():
    rngs = nnx.Rngs(params=0, dropout=1)
    with pytest.warns(DeprecationWarning):
        new = rngs.fork(split={"params": 3})
    assert new.params.key.value.shape == (3,) and new.dropout.key.value.shape == ()
    np.testing.assert_array_equal(key_data(new.dropout.key.value), expected_key(1, 0))
    assert int(rngs.params.count.value) == 1 and int(rngs.dropout.count.value) == 1


def test_rngs_split_with_a_mapping_keeps_unselected_streams():
    rngs = nnx.Rngs(params=1, dropout=2, noise=3)
    new = rngs.split({"params": 5, "dropout": None, ...: (2, 5)})
    assert new.params.key.value.shape == (5,)
    assert new.dropout is rngs.dropout
    assert new.noise.key.value.shape == (2, 5)
    expected = jax.random.split(jax.random.fold_in(jax.random.key(1), 0), 5)
    np.testing.assert_array_equal(key_data(new.params.key.value), key_data(expected))
    assert nnx.Rngs(0).split(4).default.key.value.shape == (4,)


def test_rngs_broadcast_shapes_and_values():
    rngs = nnx.Rngs(params=1, dropout=2, noise=3)
    new = rngs.broadcast({"params": 5, "dropout": None, ...: (2, 5)})
    assert new.params.key.value.shape == (5,) and new.dropout is rngs.dropout
    assert new.noise.key.value.shape == (2, 5)
    np.testing.assert_array_equal(
        key_data(new.params.key.value), np.broadcast_to(expected_key(1, 0), (5, 2))
    )
    assert nnx.Rngs(0).broadcast(None).default.key.value.shape == ()


@pytest.mark.parametrize("bad", [1.5, "x", True, {"params": "x"}, {"params": (1.5,)}])
def test_rngs_split_and_broadcast_reject_bad_shapes(bad):
    with pytest.raises(TypeError, match="must be an int, a tuple of ints"):
        nnx.Rngs(params=0).split(bad)
    with pytest.raises(TypeError, match="must be an int, a tuple of ints"):
        nnx.Rngs(params=0).broadcast(bad)


def test_filters_select_streams_and_kinds():
    rngs = nnx.Rngs(0, dropout=1)
    assert set(nnx.state(rngs, "dropout").flat_state().paths) == {
        ("dropout", "count"),
        ("dropout", "key"),
    }
    assert set(nnx.state(rngs, nnx.RngKey).flat_state().paths) == {
        ("default", "key"),
        ("dropout", "key"),
    }
    assert len(nnx.state(rngs, nnx.RngState).flat_state()) == 4


def test_rngs_split_merge_and_jit():
    rngs = nnx.Rngs(0)
    graphdef, state = nnx.split(rngs)

    @jax.jit
    def draw(state):
        r = nnx.merge(graphdef, state)
        key = r()
        return key, nnx.state(r)

    key, new_state = draw(state)
    np.testing.assert_array_equal(key_data(key), expected_key(0, 0))
    nnx.update(rngs, new_state)
    np.testing.assert_array_equal(key_data(rngs()), expected_key(0, 1))


def test_captured_rngs_in_jit_raise():
    rngs = nnx.Rngs(0)
    with pytest.raises(nnx.TraceContextError):
        jax.jit(lambda x: jax.random.normal(rngs(), ()) + x)(1.0)
    assert int(rngs.default.count.value) == 0


# -- reseed --------------------------------------------------------------------------------------


def test_reseed_resets_named_streams_everywhere():
    class M(nnx.Module):
        def __init__(self):
            self.rngs = nnx.Rngs(0, dropout=1)
            self.sub = nnx.Dict(r=nnx.Rngs(dropout=2))

    m = M()
    m.rngs.dropout()
    m.rngs()
    m.sub.r.dropout()
    nnx.reseed(m, dropout=42)
    np.testing.assert_array_equal(key_data(m.rngs.dropout()), reseeded_key(42, 0))
    np.testing.assert_array_equal(key_data(m.sub.r.dropout()), reseeded_key(42, 0, nth=1))
    assert int(m.rngs.default.count.value) == 1  # untouched
    np.testing.assert_array_equal(key_data(m.rngs()), expected_key(0, 1))


def test_reseed_keeps_variables():
    rngs = nnx.Rngs(0)
    key_var = rngs.default.key
    nnx.reseed(rngs, default=3)
    assert rngs.default.key is key_var
    np.testing.assert_array_equal(key_data(rngs()), reseeded_key(3, 0))


def test_reseed_repeats_the_draws_of_a_forked_stream():
    stream = nnx.Rngs(dropout=42).dropout.fork()  # what nnx.Dropout keeps
    first = [key_data(stream()) for _ in range(3)]
    nnx.reseed(stream, dropout=42)
    again = [key_data(stream()) for _ in range(3)]
    np.testing.assert_array_equal(np.stack(first), np.stack(again))
