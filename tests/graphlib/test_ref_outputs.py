"""NoUpdate / ArrayRefOutput in update contexts (flaxgraph/graphlib/ref_outputs.py)."""

import jax
import jax.numpy as jnp
import pytest

import flaxgraph as nnx


def ref_linear():
    return nnx.with_vars(nnx.Linear(1, 1, rngs=nnx.Rngs(0)), ref=True)


@pytest.mark.parametrize("flat", [False, True])
def test_inner_split_marks_ref_variables(flat):
    m1 = ref_linear()
    with nnx.update_context("t"):
        with nnx.split_context("t") as ctx:
            graphdef, state = ctx.flatten(m1) if flat else ctx.split(m1)
        with nnx.merge_context("t", True) as ctx:
            m2 = ctx.merge(graphdef, state)
        new = ref_linear()
        with nnx.split_context("t") as ctx:
            out = ctx.flatten((m2, new)) if flat else ctx.split((m2, new))
        graphdef_out, state_out = out
        values = dict(state_out) if flat else dict(state_out.flat_state())
        assert isinstance(values[(0, "kernel")].get_value(), nnx.graphlib.NoUpdate)
        assert isinstance(values[(1, "kernel")].get_value(), nnx.graphlib.ArrayRefOutput)
        assert len(jax.tree.leaves(state_out)) == 2
        with nnx.merge_context("t", False) as ctx:
            m3, new2 = ctx.merge(graphdef_out, state_out)
    assert m3 is m1
    assert new2 is not new and isinstance(new2.kernel.get_raw_value(), jax.Ref)
    assert jnp.array_equal(new2.kernel[...], new.kernel[...])


def test_no_update_without_caller_variable_is_an_error():
    v = nnx.Param(nnx.graphlib.NoUpdate())
    graphdef, state = nnx.split(v)
    with pytest.raises(ValueError, match="NoUpdate"):
        with nnx.merge_context() as ctx:
            ctx.merge(graphdef, state)


def test_flat_state_is_a_pytree():
    flat = nnx.FlatState([(("a",), 1.0), (("b", 0), 2.0)])
    assert jax.tree.leaves(flat) == [1.0, 2.0]
    doubled = jax.tree.map(lambda x: x * 2, flat)
    assert isinstance(doubled, nnx.FlatState) and list(doubled) == [(("a",), 2.0), (("b", 0), 4.0)]
