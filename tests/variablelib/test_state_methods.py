"""Flax 0.12's state-transfer members of Variable (copy_from, update_from_state, to_state…)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import flaxgraph as nnx

MEMBERS = (
    "copy_from create_value from_metadata required_metadata set_raw_value shape "
    "sharding_names to_state update_from_state var_type"
).split()


def test_every_flax_member_exists():
    for name in MEMBERS:
        assert hasattr(nnx.Variable, name), name


def test_flax_has_the_same_members():
    fnnx = pytest.importorskip("flax.nnx")
    for name in MEMBERS:
        assert hasattr(fnnx.Variable, name), name


@given(st.lists(st.floats(-10, 10, width=32), min_size=1, max_size=5), st.booleans())
def test_copy_from_takes_value_and_metadata_keeps_flags(values, ref):
    a = nnx.Param(jnp.zeros(len(values)), ref=ref, note="a")
    b = nnx.Param(jnp.asarray(values, jnp.float32), other=1)
    a.copy_from(b)
    np.testing.assert_array_equal(a[...], b[...])
    assert a.ref is ref
    assert a.get_metadata(exclude_required=True) == {"other": 1}
    b[...] = b[...] + 1  # independent storage
    assert not np.array_equal(a[...], b[...])


def test_copy_from_other_kind_is_a_value_error_and_changes_nothing():
    a = nnx.Param(jnp.zeros(2))
    with pytest.raises(ValueError, match="Cannot copy from incompatible container"):
        a.copy_from(nnx.BatchStat(jnp.ones(2)))
    np.testing.assert_array_equal(a[...], jnp.zeros(2))


def test_update_from_state_ref_shape_mismatch_changes_nothing():
    a = nnx.Param(jnp.zeros(2), ref=True, note="a")
    with pytest.raises(ValueError):
        a.update_from_state(nnx.Param(jnp.ones(3), note="b"))
    assert a.note == "a" and a.shape == (2,)


def test_update_from_state_matches_flax():
    fnnx = pytest.importorskip("flax.nnx")
    for mod in (nnx, fnnx):
        a = mod.Param(jnp.zeros(2), note="a")
        a.update_from_state(mod.Param(jnp.ones(2), note="b"))
        assert a.note == "b"
        np.testing.assert_array_equal(a.get_value(), jnp.ones(2))


def test_set_raw_value_plain_and_ref():
    p = nnx.Param(jnp.zeros(2))
    p.set_raw_value(jnp.ones(3))
    assert p.shape == (3,)
    r = nnx.Param(jnp.zeros(2), ref=True)
    p.set_raw_value(r.get_raw_value())
    assert p.ref and p.get_raw_value() is r.get_raw_value()
    r[...] = jnp.ones(2)
    np.testing.assert_array_equal(p[...], jnp.ones(2))


def test_set_raw_value_checks_the_trace():
    import jax

    p = nnx.Param(jnp.zeros(2))

    @jax.jit
    def f(x):
        p.set_raw_value(x)

    with pytest.raises(ValueError, match="different trace"):
        f(jnp.ones(2))
    np.testing.assert_array_equal(p[...], jnp.zeros(2))


def test_small_members():
    p = nnx.Param(jnp.ones((2, 3)), out_sharding=("a", None))
    assert p.var_type is nnx.Param
    assert p.shape == (2, 3)
    with pytest.deprecated_call(match="sharding_names is deprecated"):  # as in Flax 0.12
        assert p.sharding_names == ("a", None)
    with pytest.deprecated_call(match="sharding_names is deprecated"):
        assert nnx.Param(1.0).sharding_names is None
    assert p.create_value(5) == 5
    assert {"ref", "hijax"} <= nnx.Variable.required_metadata
    s = p.to_state()
    assert s is not p and type(s) is nnx.Param and s.get_metadata() == p.get_metadata()
    q = nnx.BatchStat.from_metadata(jnp.zeros(2), {"note": 1})
    assert type(q) is nnx.BatchStat and q.note == 1


def test_from_metadata_flags_like_flax():
    v_low = nnx.Param.from_metadata(1, {"a": "hi", "hijax": False, "ref": False})
    assert isinstance(v_low, nnx.Param) and not v_low.hijax and not v_low.ref
    assert v_low.get_metadata(exclude_required=True) == {"a": "hi"}
    assert nnx.graphdef(nnx.Dict(v=v_low)) == nnx.graphdef(nnx.Dict(v=nnx.Param(1, a="hi")))
    v_hi = nnx.Param.from_metadata(1, {"a": "hi", "hijax": True, "ref": False})
    assert v_hi.hijax and v_hi[...] == 1


def test_variable_state_is_the_old_name_of_variable():
    # Code written for Flax 0.10/0.11 picks Variables out of a State with the old
    # name; Flax 0.12 keeps it as a warning alias of Variable.
    class Model(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.ones((2,)))
            self.count = nnx.BatchStat(jnp.zeros(()))

    state = nnx.state(Model())
    with pytest.warns(DeprecationWarning, match="VariableState"):
        variable_state = nnx.VariableState
    assert variable_state is nnx.Variable
    assert nnx.variablelib.VariableState is nnx.Variable
    kinds = jax.tree.map(
        lambda v: v.type.__name__, state, is_leaf=lambda x: isinstance(x, variable_state)
    )
    assert kinds.to_pure_dict() == {"w": "Param", "count": "BatchStat"}
    with pytest.raises(AttributeError, match="VariableStates"):
        nnx.VariableStates  # noqa: B018
