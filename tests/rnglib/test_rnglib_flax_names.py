"""The names Flax NNX 0.12.8 defines in ``flax.nnx.rnglib`` exist in
``flaxgraph.rnglib`` and behave as Flax's (compared with the real ``flax.nnx`` in the
same process)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx
from flaxgraph import rnglib

flax_nnx = pytest.importorskip("flax.nnx")
from flax.nnx import rnglib as flax_rnglib  # noqa: E402


def _model(lib):
    class Model(lib.Module):
        def __init__(self):
            self.rngs = lib.Rngs(params=0, dropout=1)
            self.drop = lib.Dropout(0.5, rngs=lib.Rngs(dropout=7))

    return Model()


def _key_data(pairs):
    return [(stream.tag, np.asarray(jax.random.key_data(key))) for stream, *_, key in pairs]


def test_backup_keys_equals_flax():
    ours = rnglib.backup_keys(_model(nnx))
    theirs = flax_rnglib.backup_keys(_model(flax_nnx))
    assert [len(e) for e in ours] == [len(e) for e in theirs]
    for (tag, data), (f_tag, f_data) in zip(_key_data(ours), _key_data(theirs), strict=True):
        assert tag == f_tag
        np.testing.assert_array_equal(data, f_data)


def test_backup_keys_then_restore_rngs_puts_the_keys_back():
    model = _model(nnx)
    saved = rnglib.backup_keys(model)
    before = [np.asarray(jax.random.key_data(k)) for _, k in saved]
    nnx.split_rngs(model, splits=3)
    nnx.reseed(model, policy="match_shape", params=9, dropout=9)
    nnx.restore_rngs(saved)
    after = [np.asarray(jax.random.key_data(s.key.value)) for s, _ in saved]
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)


def test_split_backups_iterate_as_flax_s_and_restore_from_a_list():
    rngs = nnx.Rngs(params=0)
    backups = nnx.split_rngs(rngs, splits=4)
    assert isinstance(backups, rnglib.SplitBackups)
    entries = list(backups)
    assert [len(e) for e in entries] == [3] and entries[0][0] is rngs.params
    assert rngs.params.key.shape == (4,)
    nnx.restore_rngs(entries)  # a plain iterable of (stream, key, count)
    assert rngs.params.key.shape == () and rngs.params.count.shape == ()
    # Flax's SplitBackups yields the same (stream, key, count) triples
    f_entries = list(flax_nnx.split_rngs(flax_nnx.Rngs(params=0), splits=4))
    assert [len(e) for e in f_entries] == [3]


@pytest.mark.parametrize("lib", ["flaxgraph", "flax"])
def test_split_backups_is_a_record_built_as_flax_s(lib):
    # The same program runs on both: SplitBackups(backups=...), .backups, .replace,
    # dataclasses.fields, a pytree of the streams and saved arrays, restore on exit.
    mod, rl = (nnx, rnglib) if lib == "flaxgraph" else (flax_nnx, flax_rnglib)
    rngs = mod.Rngs(params=0, dropout=1)
    backups = mod.split_rngs(rngs, splits=4)
    assert [f.name for f in dataclasses.fields(backups)] == ["backups"]
    assert [s for s, _, _ in backups.backups] == [rngs.dropout, rngs.params]
    only_params = backups.replace(backups=[e for e in backups.backups if e[0] is rngs.params])
    assert isinstance(only_params, rl.SplitBackups) and len(list(backups)) == 2
    saved = [np.asarray(x) for x in jax.tree.leaves(backups) if x.dtype == jnp.uint32]
    assert len(saved) == 4  # each stream's split count and its saved count
    with rl.SplitBackups(backups=only_params.backups):
        pass
    assert rngs.params.key.shape == () and rngs.dropout.key.shape == (4,)
    with rl.SplitBackups(backups=[(rngs.dropout, backups.backups[0][1])]):  # key only
        pass
    assert rngs.dropout.key.shape == () and rngs.dropout.count.shape == (4,)
    with pytest.raises(dataclasses.FrozenInstanceError):
        backups.backups = []


def test_restore_rngs_rejects_what_it_cannot_restore():
    with pytest.raises(ValueError, match=r"\(stream, key\) or \(stream, key, count\)"):
        nnx.restore_rngs([nnx.Rngs(0).default])


def test_not_key_selects_what_flax_s_selects():
    ours = nnx.to_flat_state(nnx.state(_model(nnx), rnglib.NotKey))
    theirs = flax_nnx.to_flat_state(flax_nnx.state(_model(flax_nnx), flax_rnglib.NotKey))
    assert [p for p, _ in ours] == [p for p, _ in theirs]
    assert all(isinstance(v, nnx.RngCount) for _, v in ours)


def test_keyless_initializers_are_keyless_initializers():
    init = nnx.Rngs(0).params.lecun_normal()
    assert isinstance(init, rnglib.KeylessInitializer)
    assert init((2, 3)).shape == (2, 3)
    assert not isinstance(3, rnglib.KeylessInitializer)


def test_type_names_are_flax_s():
    for name in ("Counts", "AxesValue", "SplitPattern", "OutShardingType", "RngValue"):
        assert getattr(rnglib, name) == getattr(flax_rnglib, name), name
