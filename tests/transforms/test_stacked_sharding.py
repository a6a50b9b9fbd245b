"""A stacked, sharded model and its optimizer (flax#5112).

The thread's script: a ``Linear`` with ``kernel_metadata={'out_sharding': ('a', None)}``
created under ``nnx.vmap`` (or ``nnx.scan``) with ``split_rngs`` on a 2-device mesh,
then ``nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)``. Flax NNX 0.12.8 keeps
``('a', None)`` on the rank-3 stacked kernel, and the optimizer raises "does not
evenly divide"; here the stacked axis gets ``None`` in the sharding names, so the
optimizer, ``get_partition_spec`` and eager sharding work without extra arguments,
and ``transform_metadata={nnx.PARTITION_NAME: 'layers'}`` still names the axis.

The device checks run in a subprocess with 8 simulated CPU devices (see
``tests/helpers.py``); the metadata round trip runs on one device here.
"""

from __future__ import annotations

import textwrap

import jax.numpy as jnp
import pytest
from helpers import assert_checks_passed, run_device_checks

import flaxgraph as nnx

SCRIPT = textwrap.dedent(
    r"""
    import jax, jax.numpy as jnp, numpy as np, optax
    from jax.sharding import PartitionSpec as P
    import flaxgraph as nnx

    MESH = jax.make_mesh((2,), ("a",), devices=jax.devices()[:2])

    def make(rngs):
        return nnx.Linear(4, 4, kernel_metadata={"out_sharding": ("a", None)}, rngs=rngs)

    def check_stacked(model, first):
        assert model.kernel.shape == (3, 4, 4)
        assert model.kernel.out_sharding == (first, "a", None), model.kernel.out_sharding
        assert model.kernel.value.sharding.spec == P(first, "a", None)
        specs = nnx.get_partition_spec(nnx.state(model, nnx.Param))
        assert specs["kernel"].value == P(first, "a", None)
        opt = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)  # flax#5112 raised here
        mu = opt.opt_state[0].mu["kernel"]
        assert mu.value.sharding.spec == P(first, "a", None), mu.value.sharding
        grads = jax.tree.map(jnp.ones_like, nnx.state(model, nnx.Param))
        before = np.asarray(model.kernel.value)
        opt.update(model, grads)
        assert not np.allclose(before, np.asarray(model.kernel.value))

    @check
    def vmap_stacked_axis_is_unnamed():
        with jax.set_mesh(MESH):
            create = nnx.split_rngs(splits=3)(nnx.vmap(make, in_axes=0, out_axes=0))
            check_stacked(create(nnx.Rngs(0)), None)

    @check
    def scan_stacked_axis_is_unnamed():
        with jax.set_mesh(MESH):
            @nnx.split_rngs(splits=3)
            @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=(nnx.Carry, 0))
            def create(c, rngs):
                return c, make(rngs)

            check_stacked(create(0, nnx.Rngs(0))[1], None)

    @check
    def partition_name_still_names_the_axis():
        mesh = jax.make_mesh((2, 2), ("layers", "a"), devices=jax.devices()[:4])
        with jax.set_mesh(mesh):
            create = nnx.split_rngs(splits=2)(
                nnx.vmap(make, transform_metadata={nnx.PARTITION_NAME: "layers"})
            )
            model = create(nnx.Rngs(0))
            assert model.kernel.out_sharding == ("layers", "a", None)
            assert nnx.get_partition_spec(nnx.state(model))["kernel"].value == P("layers", "a", None)
            opt = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
            assert opt.opt_state[0].mu["kernel"].value.sharding.spec == P("layers", "a", None)
    """
)


def test_optimizer_over_a_stacked_sharded_model() -> None:
    assert_checks_passed(
        run_device_checks(SCRIPT),
        [
            "vmap_stacked_axis_is_unnamed",
            "scan_stacked_axis_is_unnamed",
            "partition_name_still_names_the_axis",
        ],
    )


class Stack(nnx.Module):
    def __init__(self, w: jnp.ndarray, names: tuple[object, ...]):
        self.w = nnx.Param(w, out_sharding=names)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_unnamed_stacked_axis_round_trips_through_vmap(axis: int) -> None:
    """Inside, the names have the slice's rank; outside, the stacked array's; a
    function that does not touch them leaves the caller's metadata as it was."""
    stack = Stack(jnp.ones((2, 3, 5)), ("x", "y"))
    seen = []

    def f(m: Stack) -> jnp.ndarray:
        seen.append(m.w.out_sharding)
        return m.w.value.sum()

    nnx.vmap(f, in_axes=axis)(stack)
    assert seen == [("x", "y")]  # shorter names: left as they are on the way in
    make = nnx.vmap(lambda v: Stack(v, ("x", "y")), in_axes=axis, out_axes=axis)
    made = make(jnp.ones((2, 3, 5)))
    expected = list(("x", "y"))
    expected.insert(axis if axis >= 0 else 2, None)
    assert made.w.out_sharding == tuple(expected)
    nnx.vmap(f, in_axes=axis)(made)
    assert seen[-1] == ("x", "y")  # the unnamed axis is removed inside
    assert made.w.out_sharding == tuple(expected)  # and put back


def test_a_named_stacked_axis_is_left_alone_without_partition_name() -> None:
    stack = Stack(jnp.ones((2, 3)), ("layers", "y"))
    seen = []
    nnx.vmap(lambda m: seen.append(m.w.out_sharding))(stack)
    assert seen == [("layers", "y")]
    assert stack.w.out_sharding == ("layers", "y")
