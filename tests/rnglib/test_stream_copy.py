"""Tests of flaxgraph/rnglib/stream_copy.py: ``with_rngs`` (split / broadcast / fork on a copy).

Expected keys are recomputed with ``jax.random`` from the stream law of rngs.py: a
stream with key ``k`` and count ``n`` draws ``fold_in(k, n)``.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest
from jax import random

import flaxgraph as nnx


def data(key: jax.Array) -> Any:
    return np.asarray(random.key_data(key)).tolist()


def drawn(seed: int, n: int = 0) -> jax.Array:
    return random.fold_in(random.key(seed), n)


class Holder(nnx.Module):
    def __init__(self) -> None:
        self.lin = nnx.Linear(2, 3, rngs=nnx.Rngs(9))
        self.rngs = nnx.Rngs(params=0, dropout=1)
        self.same = self.rngs


def test_split_every_stream_returns_a_copy_and_advances_the_originals() -> None:
    rngs = nnx.Rngs(params=0, dropout=1)
    new = nnx.with_rngs(rngs, split=4)
    assert new is not rngs and isinstance(new, nnx.Rngs)
    assert data(new.params.key.value) == data(random.split(drawn(0), 4))
    assert data(new.dropout.key.value) == data(random.split(drawn(1), 4))
    assert new.params.count.value.shape == (4,)
    assert rngs.params.key.value.shape == () and int(rngs.params.count.value) == 1
    again = nnx.with_rngs(rngs, split=4)
    assert data(again.params.key.value) == data(random.split(drawn(0, 1), 4))


def test_split_some_fork_the_rest_broadcast_by_filter() -> None:
    rngs = nnx.Rngs(params=0, dropout=1, noise=2)
    new = nnx.with_rngs(rngs, split={"params": 4}, broadcast={"noise": (2, 3)}, fork=...)
    assert new.params.key.value.shape == (4,)
    assert data(new.dropout.key.value) == data(drawn(1)) and int(new.dropout.count.value) == 0
    np.testing.assert_array_equal(
        np.asarray(random.key_data(new.noise.key.value)),
        np.broadcast_to(np.asarray(random.key_data(drawn(2))), (2, 3, 2)),
    )


def test_streams_no_rule_selects_share_their_state() -> None:
    rngs = nnx.Rngs(params=0, dropout=1)
    new = nnx.with_rngs(rngs, split={"params": 2})
    assert new.dropout is not rngs.dropout and new.dropout.key is rngs.dropout.key
    assert int(rngs.dropout.count.value) == 0
    new.dropout()  # drawing through the copy advances the shared count
    assert int(rngs.dropout.count.value) == 1


def test_only_restricts_the_streams() -> None:
    rngs = nnx.Rngs(params=0, dropout=1)
    new = nnx.with_rngs(rngs, split=2, only="dropout")
    assert new.params.key.value.shape == () and new.dropout.key.value.shape == (2,)


def test_a_module_copy_shares_variables_and_keeps_sharing() -> None:
    model = Holder()
    new = nnx.with_rngs(model, split=3)
    assert new is not model and new.lin is not model.lin and new.lin.kernel is model.lin.kernel
    assert new.rngs is new.same and new.rngs.params.key.value.shape == (3,)
    assert int(model.rngs.params.count.value) == 1  # drawn once although reachable twice
    assert model.rngs.params.key.value.shape == ()


def test_containers_are_copied() -> None:
    rngs = nnx.Rngs(0)
    out = nnx.with_rngs({"a": [rngs], "b": 3}, fork=...)
    assert out["b"] == 3 and out["a"][0] is not rngs
    assert data(out["a"][0].default.key.value) == data(drawn(0))


def test_decorator_passes_copies_of_the_arguments() -> None:
    rngs = nnx.Rngs(params=0)
    seen = []

    @nnx.with_rngs(split=5)
    def f(r: nnx.Rngs, *, k: nnx.Rngs) -> None:
        seen.append((r is rngs, r.params.key.value.shape, k.default.key.value.shape))

    f(rngs, k=nnx.Rngs(1))
    assert seen == [(False, (5,), (5,))] and rngs.params.key.value.shape == ()


def test_split_streams_give_every_vmap_instance_its_own_key() -> None:
    rngs = nnx.with_rngs(nnx.Rngs(0), split=3)
    keys = nnx.vmap(lambda r: random.key_data(r.default()))(rngs)
    expected = [data(random.fold_in(k, 0)) for k in random.split(drawn(0), 3)]
    assert np.asarray(keys).tolist() == expected


def test_two_specific_rules_on_one_stream_is_an_error_naming_the_path() -> None:
    model = Holder()
    with pytest.raises(ValueError, match=r"(?s)node\.rngs\.params.*split.*'params'.*fork"):
        nnx.with_rngs(model, split={"params": 2}, fork="params")
    assert int(model.rngs.params.count.value) == 0  # nothing was drawn


def test_catch_all_rules_give_way_in_split_broadcast_fork_order() -> None:
    rngs = nnx.Rngs(params=0)
    assert nnx.with_rngs(rngs, split=2, fork="params").params.key.value.shape == (2,)
    assert nnx.with_rngs(rngs, broadcast={"params": 3}, fork=...).params.key.value.shape == (3,)


def test_tree_mode_rejects_shared_variables() -> None:
    model = Holder()
    with pytest.raises(ValueError, match=r"(?s)several paths.*rngs.*same"):
        nnx.with_rngs(model, split=2, graph=False)
    assert int(model.rngs.params.count.value) == 0
    assert nnx.with_rngs(nnx.Rngs(0), split=2, graph=False).default.key.value.shape == (2,)


def test_bad_shapes_are_type_errors() -> None:
    with pytest.raises(TypeError, match=r"split\['params'\] must be an int"):
        nnx.with_rngs(nnx.Rngs(params=0), split={"params": 1.5})


def test_matches_flax_shapes() -> None:
    flax_nnx = pytest.importorskip("flax.nnx")
    kw: dict[str, Any] = dict(split={"params": 4, ...: (2, 4)}, graph_updates=False)
    ours = nnx.with_rngs(nnx.Rngs(params=0, dropout=1), **kw)
    theirs = flax_nnx.with_rngs(flax_nnx.Rngs(params=0, dropout=1), **kw)
    assert data(ours.params.key.value) == data(theirs.params.key[...])
    assert data(ours.dropout.key.value) == data(theirs.dropout.key[...])


def test_decorator_errors_name_paths_from_the_arguments() -> None:
    @nnx.with_rngs(split={"params": 2}, fork="params")
    def f(a: int, r: nnx.Rngs) -> None:
        pass

    with pytest.raises(ValueError, match=r"RngStream at args\[1\]\.params matches multiple rules"):
        f(1, nnx.Rngs(params=0))
