"""Tests of flaxgraph/variablelib/initial_metadata.py: ``VariableMetadata`` and ``with_metadata``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx


def test_box_is_unboxed_by_variables():
    box = nnx.VariableMetadata(jnp.arange(3.0), metadata={"note": "x"})
    p = nnx.Param(box, extra=1)
    np.testing.assert_array_equal(p[...], np.arange(3.0))
    assert p.get_metadata(exclude_required=True) == {"note": "x", "extra": 1}


def test_keywords_win_over_box_metadata():
    p = nnx.Param(nnx.VariableMetadata(1.0, metadata={"a": 1}), a=2)
    assert p.a == 2


def test_box_default_metadata_is_empty_and_not_shared():
    a, b = nnx.VariableMetadata(1.0), nnx.VariableMetadata(2.0)
    assert a.metadata == {} and a.metadata is not b.metadata
    assert a == nnx.VariableMetadata(1.0)


def test_with_metadata_wraps_initializer():
    init = nnx.with_metadata(jax.nn.initializers.ones, out_sharding=("a", None), note=3)
    assert init.__name__ == jax.nn.initializers.ones.__name__
    box = init(jax.random.key(0), (2, 3), jnp.float32)
    assert isinstance(box, nnx.VariableMetadata)
    assert box.raw_value.shape == (2, 3) and box.metadata == {
        "out_sharding": ("a", None),
        "note": 3,
    }
    p = nnx.Param(box)
    assert p.out_sharding == ("a", None) and p.note == 3 and p.shape == (2, 3)


def test_with_metadata_through_a_layer():
    init = nnx.with_metadata(nnx.initializers.lecun_normal(), out_sharding=(None, "model"))
    layer = nnx.Linear(4, 5, kernel_init=init, rngs=nnx.Rngs(0))
    plain = nnx.Linear(4, 5, rngs=nnx.Rngs(0))
    assert layer.kernel.out_sharding == (None, "model")
    np.testing.assert_array_equal(layer.kernel[...], plain.kernel[...])


def test_with_metadata_and_ref():
    init = nnx.with_metadata(jax.nn.initializers.zeros, note="z")
    p = nnx.Param(init(jax.random.key(0), (2,)), ref=True)
    assert p.ref and p.note == "z" and isinstance(p.get_raw_value(), jax.Ref)


@pytest.mark.parametrize("hook", ["on_set_value", "on_add_axis"])
def test_hooks_are_rejected(hook):
    with pytest.raises(TypeError, match="no value hooks"):
        nnx.with_metadata(jax.nn.initializers.zeros, **{hook: lambda v, x: x})


def test_matches_flax():
    flax_nnx = pytest.importorskip("flax.nnx")
    ours = nnx.with_metadata(jax.nn.initializers.ones, a=1, b=(None,))(jax.random.key(0), (2,))
    theirs = flax_nnx.with_metadata(jax.nn.initializers.ones, a=1, b=(None,))(
        jax.random.key(0), (2,)
    )
    assert ours.metadata == dict(theirs.metadata)
    np.testing.assert_array_equal(ours.raw_value, theirs.raw_value)
    p = flax_nnx.Param(flax_nnx.VariableMetadata(jnp.ones(2), metadata={"x": 1}))
    q = nnx.Param(nnx.VariableMetadata(jnp.ones(2), metadata={"x": 1}))
    assert p.get_metadata("x") == q.get_metadata("x") == 1


def test_hook_fields_exist_empty_like_flax():
    box = nnx.VariableMetadata(jnp.ones(2), metadata={"a": 1})
    names = ("on_set_value", "on_get_value", "on_create_value", "on_add_axis", "on_remove_axis")
    assert all(getattr(box, n) == () for n in names)
    assert nnx.Param(box).a == 1
    flax_nnx = pytest.importorskip("flax.nnx")
    import dataclasses

    ours = [f.name for f in dataclasses.fields(nnx.VariableMetadata)]
    theirs = [f.name for f in dataclasses.fields(flax_nnx.VariableMetadata)]
    assert ours == theirs


@pytest.mark.parametrize(
    "hook", ["on_set_value", "on_get_value", "on_create_value", "on_add_axis", "on_remove_axis"]
)
def test_box_with_a_hook_is_rejected_with_the_fix(hook):
    with pytest.raises(TypeError, match=f"(?s){hook}.*no value hooks.*subclass"):
        nnx.VariableMetadata(1.0, **{hook: (lambda v, x: x,)})
