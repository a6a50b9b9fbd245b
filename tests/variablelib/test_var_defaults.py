"""Tests of flaxgraph/variablelib/defaults.py: ``nnx.var_defaults``."""

import jax
import jax.numpy as jnp
import pytest

import flaxgraph as nnx
from flaxgraph.variablelib import boxes
from flaxgraph.variablelib.defaults import VAR_DEFAULTS, VarDefaults


@pytest.fixture(autouse=True)
def restore_defaults():
    before = VAR_DEFAULTS.get()
    yield
    VAR_DEFAULTS.set_globally(before)


def test_reads_defaults():
    assert nnx.var_defaults() == VarDefaults(hijax=False, ref=False)
    assert nnx.var_defaults().ref is False


def test_context_manager_sets_and_restores():
    with nnx.var_defaults(ref=True):
        assert nnx.var_defaults() == VarDefaults(hijax=False, ref=True)
        v = nnx.Param(jnp.ones(2))
        assert v.ref and isinstance(v.get_raw_value(), jax.Ref)
        with nnx.var_defaults(hijax=True):
            assert nnx.var_defaults() == VarDefaults(hijax=True, ref=True)
            assert nnx.Param(1.0).hijax
        assert nnx.var_defaults() == VarDefaults(hijax=False, ref=True)
    assert nnx.var_defaults() == VarDefaults(hijax=False, ref=False)
    assert not nnx.Param(1.0).ref


def test_restores_on_exception():
    with pytest.raises(RuntimeError):
        with nnx.var_defaults(ref=True):
            raise RuntimeError
    assert not nnx.var_defaults().ref


def test_global_setter():
    ctx = nnx.var_defaults(ref=True)
    assert ctx.ref and not ctx.hijax
    assert nnx.Variable(1.0).ref
    nnx.var_defaults(ref=False)
    assert not nnx.Variable(1.0).ref


def test_explicit_argument_beats_default():
    with nnx.var_defaults(ref=True):
        assert not nnx.Param(1.0, ref=False).ref
    assert nnx.Param(1.0, ref=True).ref


def test_default_ref_skips_values_that_cannot_live_in_a_ref():
    with nnx.var_defaults(ref=True, hijax=True):
        for value in (None, "s"):
            v = nnx.Variable(value)
            assert not v.ref and not v.hijax and v.get_raw_value() is value
    with nnx.var_defaults(ref=True):
        for value in ([1, 2], {"a": 1}):
            v = nnx.Variable(value)
            assert not v.ref and not v.hijax and v.get_raw_value() is value


def test_default_hijax_puts_pytree_values_in_a_box():
    # var_defaults(hijax=True) applies to pytree values too (Flax NNX 0.12): they live
    # in a box; a default ref=True does not apply to them (a Ref holds one array).
    if not boxes.AVAILABLE:
        pytest.skip(boxes.UNAVAILABLE_REASON)
    with nnx.var_defaults(ref=True, hijax=True):
        for value in ([1, 2], {"a": 1}, {}):
            v = nnx.Variable(value)
            assert v.hijax and not v.ref and boxes.is_box(v.get_raw_value())
            assert jax.tree.map(int, v[...]) == value


def test_model_built_under_defaults_is_ref_backed():
    with nnx.var_defaults(ref=True):
        layer = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    assert isinstance(layer.kernel.get_raw_value(), jax.Ref)
    y = layer(jnp.ones((1, 2)))
    assert y.shape == (1, 3)


@pytest.mark.parametrize("bad", [1, "yes"])
def test_bad_value(bad):
    with pytest.raises(TypeError, match="True, False or None"):
        nnx.var_defaults(ref=bad)


def test_matches_flax_behaviour():
    flax_nnx = pytest.importorskip("flax.nnx")
    for mod in (flax_nnx, nnx):
        before = mod.var_defaults()
        assert (before.hijax, before.ref) == (False, False)
        with mod.var_defaults(ref=True):
            assert mod.var_defaults().ref
        assert not mod.var_defaults().ref
        mod.var_defaults(hijax=True)
        assert mod.var_defaults().hijax
        mod.var_defaults(hijax=False)


def test_signature_matches_flax():
    import inspect

    flax_nnx = pytest.importorskip("flax.nnx")
    ours = inspect.signature(nnx.var_defaults).parameters
    theirs = inspect.signature(flax_nnx.var_defaults).parameters
    assert [(p.name, p.kind, p.default) for p in ours.values()] == [
        (p.name, p.kind, p.default) for p in theirs.values()
    ]


def test_decorator_applies_only_inside_the_function():
    @nnx.var_defaults(hijax=True)
    def make():
        return nnx.var_defaults(), nnx.Param(1.0)

    assert nnx.var_defaults() == VarDefaults(hijax=False, ref=False)
    defaults, param = make()
    assert defaults == VarDefaults(hijax=True, ref=False)
    assert param.hijax
    assert nnx.var_defaults() == VarDefaults(hijax=False, ref=False)


def test_decorator_keeps_other_fields_of_the_callers_defaults():
    @nnx.var_defaults(ref=True)
    def read():
        return nnx.var_defaults()

    with nnx.var_defaults(hijax=True):
        assert read() == VarDefaults(hijax=True, ref=True)
    assert read() == VarDefaults(hijax=False, ref=True)


def test_setting_inside_a_decorated_function_is_undone_with_it():
    @nnx.var_defaults(hijax=True)
    def inner():
        with nnx.var_defaults(ref=True):
            assert nnx.var_defaults() == VarDefaults(hijax=True, ref=True)
        return nnx.var_defaults()

    assert inner() == VarDefaults(hijax=True, ref=False)
    assert nnx.var_defaults() == VarDefaults(hijax=False, ref=False)


def test_defaults_are_a_mapping():
    d = nnx.var_defaults()
    assert list(d) == ["hijax", "ref"] and len(d) == 2
    assert d["hijax"] is d.hijax and dict(d) == {"hijax": False, "ref": False}
    with pytest.raises(KeyError):
        d["other"]


def test_decorating_a_non_callable_is_a_type_error():
    with pytest.raises(TypeError, match="needs a function"):
        nnx.var_defaults(hijax=True)(3)
    assert nnx.var_defaults() == VarDefaults(hijax=False, ref=False)
