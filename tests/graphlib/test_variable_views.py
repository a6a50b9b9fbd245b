"""Tests of flaxgraph/graphlib/variable_views.py: ``with_vars``, ``vars_as``, ``set_metadata``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flaxgraph as nnx


class M(nnx.Module):
    def __init__(self):
        self.w = nnx.Param(jnp.ones(3))
        self.n = nnx.BatchStat(jnp.zeros(()))
        self.layers = [nnx.Linear(2, 2, rngs=nnx.Rngs(0))]
        self.k = 3


class Shared(nnx.Module):
    def __init__(self):
        self.a = nnx.Param(jnp.ones(2))
        self.b = self.a


def variables(node):
    return {p: v for p, v in nnx.iter_graph(node) if isinstance(v, nnx.Variable)}


# -- with_vars ----------------------------------------------------------------------------


def test_ref_copy_has_new_nodes_and_ref_backed_variables():
    m = M()
    r = nnx.with_vars(m, ref=True)
    assert r is not m and r.layers[0] is not m.layers[0] and r.k == 3
    for path, v in variables(r).items():
        old = variables(m)[path]
        assert v is not old and type(v) is type(old) and v.ref
        assert isinstance(v.get_raw_value(), jax.Ref)
        np.testing.assert_array_equal(v[...], old[...])
    assert not m.w.ref  # the original is unchanged
    r.n[...] = 5.0
    assert float(m.n[...]) == 0.0


def test_only_selects_and_unchanged_variables_are_shared():
    m = M()
    r = nnx.with_vars(m, ref=True, only=nnx.Param)
    assert r.w.ref and r.layers[0].kernel.ref
    assert r.n is m.n


def test_no_change_keeps_every_variable():
    m = nnx.with_vars(M(), ref=True)
    again = nnx.with_vars(m, ref=True)
    assert all(a is b for a, b in zip(variables(m).values(), variables(again).values()))
    assert again is not m


def test_back_to_plain():
    r = nnx.with_vars(M(), ref=True)
    p = nnx.with_vars(r, ref=False)
    assert not p.w.ref and not isinstance(p.w.get_raw_value(), jax.Ref)
    np.testing.assert_array_equal(p.w[...], r.w[...])


def test_mutable_false_makes_read_only_copies_for_jax_grad():
    m = M()
    frozen = nnx.with_vars(m, mutable=False, only=nnx.Param)
    with pytest.raises(ValueError, match="read-only"):
        frozen.w[...] = jnp.zeros(3)
    grads = jax.grad(lambda f: (f.w[...] ** 2).sum())(frozen)
    np.testing.assert_allclose(grads.w[...], 2 * np.ones(3))
    writable = nnx.with_vars(frozen, mutable=True)
    writable.w[...] = jnp.zeros(3)
    np.testing.assert_array_equal(m.w[...], np.ones(3))


def test_hijax_mutable_false_pattern_from_the_hijax_guide():
    m = nnx.with_vars(M(), hijax=True)
    frozen = nnx.with_vars(m, mutable=False)
    assert frozen.w.hijax and not frozen.w.mutable
    g = jax.grad(lambda f: (f.w[...] ** 2).sum())(frozen)
    np.testing.assert_allclose(g.w[...], 2 * np.ones(3))


def test_duplicates_are_an_error_naming_paths():
    with pytest.raises(ValueError) as info:
        nnx.with_vars(Shared(), ref=True)
    assert "node.a" in str(info.value) and "node.b" in str(info.value)
    assert "allow_duplicates=True" in str(info.value)


def test_allow_duplicates_keeps_sharing():
    s = nnx.with_vars(Shared(), ref=True, allow_duplicates=True)
    assert s.a is s.b and s.a.ref


def test_duplicates_outside_only_are_fine():
    s = nnx.with_vars(Shared(), ref=True, only=nnx.BatchStat)
    assert s.a is s.b


def test_on_a_variable_and_on_containers():
    v = nnx.Param(jnp.ones(2))
    r = nnx.with_vars(v, ref=True)
    assert r is not v and r.ref
    assert nnx.with_vars(v) is v
    lst = nnx.with_vars([nnx.Param(1.0), {"x": nnx.BatchStat(2.0)}], ref=True)
    assert lst[0].ref and lst[1]["x"].ref


def test_non_array_values_cannot_become_ref_backed():
    with pytest.raises(TypeError, match=r"jax\.Ref"):
        nnx.with_vars(nnx.Variable([1, 2]), ref=True)


def test_bad_flag():
    with pytest.raises(TypeError):
        nnx.with_vars(M(), ref="yes")


def test_vars_as_is_deprecated_alias():
    with pytest.warns(DeprecationWarning, match="with_vars"):
        r = nnx.vars_as(M(), ref=True, only=nnx.Param)
    assert r.w.ref and not r.n.ref


@settings(deadline=None, max_examples=20)
@given(st.booleans(), st.booleans(), st.booleans())
def test_flags_round_trip(ref, hijax, mutable):
    m = M()
    r = nnx.with_vars(m, ref=ref, hijax=hijax, mutable=mutable)
    for v in variables(r).values():
        assert (v.ref, v.hijax, v.mutable) == (ref, hijax, mutable)
        assert isinstance(v.get_raw_value(), jax.Ref) == (ref or hijax)
    back = nnx.with_vars(r, ref=False, hijax=False, mutable=True)
    for path, v in variables(back).items():
        np.testing.assert_array_equal(v[...], variables(m)[path][...])
        assert v.get_metadata() == variables(m)[path].get_metadata()


def test_with_vars_matches_flax_for_ref():
    flax_nnx = pytest.importorskip("flax.nnx")
    theirs = flax_nnx.with_vars(flax_nnx.Linear(2, 3, rngs=flax_nnx.Rngs(0)), ref=True)
    ours = nnx.with_vars(nnx.Linear(2, 3, rngs=nnx.Rngs(0)), ref=True)
    assert theirs.kernel.ref == ours.kernel.ref is True
    assert type(theirs.kernel.get_raw_value()) is type(ours.kernel.get_raw_value())
    np.testing.assert_allclose(theirs.kernel[...], ours.kernel[...])


# -- set_metadata ------------------------------------------------------------------------


def test_set_metadata_on_selected_variables():
    m = M()
    nnx.set_metadata(m, differentiable=False, only=nnx.Param)
    assert m.w.differentiable is False and m.layers[0].kernel.differentiable is False
    assert not m.n.has_metadata("differentiable")


def test_set_metadata_default_is_all_variables():
    m = M()
    nnx.set_metadata(m, tag="t")
    assert all(v.tag == "t" for v in variables(m).values())


def test_set_metadata_refuses_flags_and_changes_nothing():
    m = M()
    with pytest.raises(ValueError, match="with_vars"):
        nnx.set_metadata(m, ref=True, note=1)
    assert not any(v.has_metadata("note") for v in variables(m).values())


def test_set_metadata_on_captured_variables_changes_nothing():
    m = M()

    @jax.jit
    def f(x):
        nnx.set_metadata(m, note=1)
        return x

    with pytest.raises(nnx.TraceContextError):
        f(1.0)
    assert not any(v.has_metadata("note") for v in variables(m).values())


def test_set_metadata_matches_flax():
    flax_nnx = pytest.importorskip("flax.nnx")

    class Foo(flax_nnx.Module):
        def __init__(self):
            self.param = flax_nnx.Param(0.0)
            self.variable = flax_nnx.Variable(0.0)

    class Bar(nnx.Module):
        def __init__(self):
            self.param = nnx.Param(0.0)
            self.variable = nnx.Variable(0.0)

    theirs, ours = Foo(), Bar()
    flax_nnx.set_metadata(theirs, differentiable=False, only=flax_nnx.Param)
    nnx.set_metadata(ours, differentiable=False, only=nnx.Param)
    for name in ("param", "variable"):
        t, o = getattr(theirs, name), getattr(ours, name)
        assert t.has_metadata("differentiable") == o.has_metadata("differentiable")


@pytest.mark.parametrize("name", ["with_vars", "vars_as", "set_metadata"])
def test_signatures_match_flax(name):
    import inspect

    flax_nnx = pytest.importorskip("flax.nnx")
    ours = inspect.signature(getattr(nnx, name)).parameters
    theirs = inspect.signature(getattr(flax_nnx, name)).parameters
    assert list(ours) == list(theirs)
    for p in ours:
        assert ours[p].kind == theirs[p].kind
        if p not in ("only",):  # flax's default for only is its own Variable class
            assert ours[p].default == theirs[p].default
