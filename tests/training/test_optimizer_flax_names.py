"""The names Flax NNX 0.12.8 defines in ``flax.nnx.training.optimizer`` exist in
``flaxgraph.training.optimizer`` and behave as Flax's (compared with the real
``flax.nnx`` in the same process)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import flaxgraph as nnx
from flaxgraph.training import optimizer
from flaxgraph.typing import MISSING

flax_nnx = pytest.importorskip("flax.nnx")
from flax.nnx.training import optimizer as flax_optimizer  # noqa: E402


def _leaves(lib, tree):
    """``(type name, value, metadata without the flags)`` of each leaf of ``tree``."""
    flags = {"hijax", "ref", "eager_sharding", "mutable"}
    out = []
    for leaf in jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, lib.Variable)):
        meta = {k: v for k, v in leaf.get_metadata().items() if k not in flags}
        out.append((type(leaf).__name__, np.asarray(leaf.get_value()), meta))
    return out


def _params(lib):
    with lib.use_eager_sharding(False):
        return {
            "w": lib.Param(jnp.arange(3.0), out_sharding=("model",)),
            "b": lib.Param(jnp.ones(2), optimizer_sharding=("data",)),
            "s": lib.BatchStat(jnp.zeros(())),
            "count": jnp.asarray(4),
        }


def test_to_opt_state_equals_flax_on_variables_and_arrays():
    ours, theirs = _params(nnx), _params(flax_nnx)
    with nnx.use_eager_sharding(False), flax_nnx.use_eager_sharding(False):
        got, expected = optimizer.to_opt_state(ours), flax_optimizer.to_opt_state(theirs)
    assert jax.tree.structure(got, is_leaf=lambda x: isinstance(x, nnx.Variable)).num_leaves == 4
    for (kind, value, meta), (f_kind, f_value, f_meta) in zip(
        _leaves(nnx, got), _leaves(flax_nnx, expected), strict=True
    ):
        assert (kind, meta) == (f_kind, f_meta)
        np.testing.assert_array_equal(value, f_value)
    assert got["b"].out_sharding == ("data",)  # optimizer_sharding becomes out_sharding
    assert ours["b"].get_metadata("optimizer_sharding") == ("data",)  # input unchanged


def test_to_opt_state_keeps_an_optax_state_s_structure():
    state = optax.adam(1e-3).init({"w": jnp.ones(2)})
    got = optimizer.to_opt_state(state)
    assert isinstance(got[0], optax.ScaleByAdamState)
    assert all(
        isinstance(x, nnx.OptArray)
        for x in jax.tree.leaves(got, is_leaf=lambda x: isinstance(x, nnx.Variable))
    )
    np.testing.assert_array_equal(got[0].mu["w"].get_value(), state[0].mu["w"])


def test_missing_is_flaxgraph_s_sentinel():
    assert optimizer.MISSING is MISSING


def test_statistics_replace_as_flax_s():
    from flax.nnx.training import metrics as flax_metrics

    from flaxgraph.training import metrics

    ours = metrics.Statistics(jnp.array(1.0), jnp.array(2.0), jnp.array(3.0))
    theirs = flax_metrics.Statistics(jnp.array(1.0), jnp.array(2.0), jnp.array(3.0))
    changed, f_changed = ours.replace(mean=jnp.array(5.0)), theirs.replace(mean=jnp.array(5.0))
    assert [float(x) for x in changed] == [
        float(getattr(f_changed, f))
        for f in ("mean", "standard_error_of_mean", "standard_deviation")
    ]
    assert float(ours.mean) == 1.0  # a copy
    with pytest.raises(ValueError):
        ours.replace(median=jnp.array(0.0))
