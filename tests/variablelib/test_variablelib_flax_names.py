"""The names Flax NNX 0.12.8 defines in ``flax.nnx.variablelib`` for its own machinery exist
in ``flaxgraph.variablelib`` and behave as Flax's where they have a behaviour (compared
with the real ``flax.nnx`` in the same process); the hijax stand-ins raise."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx
from flaxgraph import variablelib
from flaxgraph.errors import FlaxInternalError

flax_nnx = pytest.importorskip("flax.nnx")
from flax.nnx import variablelib as flax_variablelib  # noqa: E402


@pytest.mark.parametrize(
    "make",
    [
        lambda: jnp.zeros(3),
        lambda: np.zeros(3),
        lambda: jax.new_ref(jnp.zeros(3)),
        lambda: 1.0,
        lambda: nnx.Param(jnp.zeros(3)),
        lambda: nnx.Param(jnp.zeros(3), ref=True).get_raw_value(),
    ],
    ids=["array", "numpy", "ref", "float", "variable", "variable-ref"],
)
def test_is_array_ref_equals_flax(make):
    value = make()
    assert variablelib.is_array_ref(value) == flax_variablelib.is_array_ref(value)


def test_is_array_ref_sees_traced_refs_as_flax_does():
    seen = []

    @jax.jit
    def f(ref, x):
        ours = (variablelib.is_array_ref(ref), variablelib.is_array_ref(x))
        seen.append((*ours, flax_variablelib.is_array_ref(ref), flax_variablelib.is_array_ref(x)))
        return x

    f(jax.new_ref(jnp.zeros(2)), jnp.ones(2))
    assert seen == [(True, False, True, False)]


def test_variable_type_cache_is_a_live_read_only_view():
    cache = variablelib.VariableTypeCache
    builtins = {k: v.__name__ for k, v in flax_variablelib.VariableTypeCache.items()}
    assert {k: cache[k].__name__ for k in builtins} == builtins

    @nnx.register_variable_name("flax_names_test_counts")
    class Counts(nnx.Variable):
        pass

    assert cache["flax_names_test_counts"] is Counts
    with pytest.raises(TypeError):
        cache["other"] = Counts  # type: ignore[index]


def test_a_metaclass_derived_from_variable_meta_builds_variables():
    class Meta(variablelib.VariableMeta):
        pass

    class Tagged(nnx.Variable, metaclass=Meta):
        pass

    v = Tagged(jnp.ones(2))
    assert type(Tagged) is Meta and v.get_value().shape == (2,)
    assert isinstance(nnx.Param(1.0, hijax=True), variablelib.HijaxVariable)
    assert type(variablelib.HijaxVariable) is variablelib.HijaxVariableMeta


def test_variable_context_has_flax_s_fields():
    ours = [f.name for f in dataclasses.fields(variablelib.VariableContext)]
    theirs = [f.name for f in dataclasses.fields(flax_variablelib.VariableContext)]
    assert ours == theirs
    assert variablelib.VARIABLE_CONTEXT.variable_hijax_stack == []


def test_type_names_are_flax_s():
    for name in ("AxisName", "AxisIndex", "PyTreeDef", "Leaf"):
        assert getattr(variablelib, name) == getattr(flax_variablelib, name), name
    # the same callable signatures: (variable, value) -> value; (variable, index, name) -> None
    assert variablelib.GetValueHook[int].__args__[1:] == (int, int)
    assert variablelib.AddAxisHook.__args__[1:3] == flax_variablelib.AddAxisHook.__args__[1:3]


@pytest.mark.parametrize(
    "name",
    [
        "VariableQDD",
        "VariableEffect",
        "NewVariable",
        "SetVariable",
        "GetVariable",
        "AbstractVariable",
        "variable_effect",
    ],
)
def test_hijax_machinery_raises_naming_itself(name):
    with pytest.raises(FlaxInternalError, match=rf"flax\.nnx\.variablelib\.{name} .*hijax=True"):
        getattr(variablelib, name)()


@pytest.mark.parametrize("name", ["new_variable_p", "set_variable_p", "get_variable_p"])
def test_hijax_primitives_raise_when_bound(name):
    with pytest.raises(FlaxInternalError, match=rf"flax\.nnx\.variablelib\.{name} "):
        getattr(variablelib, name).bind(jnp.ones(2))


def test_no_variable_is_an_abstract_variable():
    assert not isinstance(nnx.Param(1.0, hijax=True), variablelib.AbstractVariable)
