"""The names Flax NNX 0.12.8 defines in ``flax.nnx.training.optimizer`` exist in
``flaxgraph.training.optimizer`` and behave as Flax's (compared with the real
``flax.nnx`` in the same process)."""

from __future__ import annotations

import dataclasses
from typing import Any

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


def test_statistics_is_a_dataclass_as_flax_s():
    from flax.nnx.training import metrics as flax_metrics

    from flaxgraph.training import metrics

    def program(stats_type: Any, jit: Any) -> list[Any]:
        stats = stats_type(jnp.array(1.0), jnp.array(2.0), jnp.array(3.0))
        changed = stats.replace(mean=jnp.array(5.0))
        seen: list[Any] = [
            {k: float(v) for k, v in dataclasses.asdict(changed).items()},
            float(stats.mean),  # replace made a copy
            [float(x) for x in jax.tree.leaves(stats)],
            float(
                jit(lambda s: s.replace(standard_deviation=s.mean * 2))(stats).standard_deviation
            ),
        ]
        for bad in (lambda: stats.replace(median=jnp.array(0.0)), lambda: list(stats)):
            with pytest.raises(TypeError):
                bad()
        with pytest.raises(dataclasses.FrozenInstanceError):
            stats.mean = jnp.array(0.0)
        return seen

    ours = program(metrics.Statistics, nnx.jit)
    assert ours == program(flax_metrics.Statistics, jax.jit)
    assert ours[0] == {"mean": 5.0, "standard_error_of_mean": 2.0, "standard_deviation": 3.0}
