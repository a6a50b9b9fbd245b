"""Tests of flaxgraph/variablelib/names.py: the kind <-> collection-name registry."""

import jax
import jax.numpy as jnp
import pytest

import flaxgraph as nnx
from flaxgraph.variablelib import names as variables_module


@pytest.fixture
def clean_registry():
    """Snapshots the kind <-> name registry and restores it after the test."""
    names = dict(variables_module._NAME_TO_TYPE)
    types = dict(variables_module._TYPE_TO_NAME)
    yield
    variables_module._NAME_TO_TYPE.clear()
    variables_module._NAME_TO_TYPE.update(names)
    variables_module._TYPE_TO_NAME.clear()
    variables_module._TYPE_TO_NAME.update(types)


# -- name registry ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("params", nnx.Param),
        ("batch_stats", nnx.BatchStat),
        ("cache", nnx.Cache),
        ("intermediates", nnx.Intermediate),
        ("perturbations", nnx.Perturbation),
    ],
)
def test_builtin_names(name, kind):
    assert nnx.variable_name_from_type(kind) == name
    assert nnx.variable_type_from_name(name) is kind


def test_unregistered_kind_raises_with_fix(clean_registry):
    class Unnamed(nnx.Variable):
        pass

    with pytest.raises(ValueError, match=r"Unnamed has no registered name.*register_variable_name"):
        nnx.variable_name_from_type(Unnamed)


def test_unregistered_name_raises(clean_registry):
    with pytest.raises(
        ValueError, match="No Variable kind is registered under the name 'nothing_here'"
    ):
        nnx.variable_type_from_name("nothing_here")


def test_allow_register_from_type(clean_registry):
    class Counter(nnx.Variable):
        pass

    assert nnx.variable_name_from_type(Counter, allow_register=True) == "Counter"
    assert nnx.variable_type_from_name("Counter") is Counter


def test_allow_register_from_name_creates_a_kind(clean_registry):
    kind = nnx.variable_type_from_name("my_stats", allow_register=True)
    assert issubclass(kind, nnx.Variable) and kind.__name__ == "my_stats"
    assert nnx.variable_type_from_name("my_stats") is kind
    assert nnx.variable_name_from_type(kind) == "my_stats"
    v = kind(jnp.ones(1))
    assert type(jax.tree.map(lambda x: x, v)) is kind


def test_register_variable_name(clean_registry):
    class Stat(nnx.Variable):
        pass

    nnx.register_variable_name("stats", Stat)
    assert nnx.variable_name_from_type(Stat) == "stats"
    assert nnx.variable_type_from_name("stats") is Stat
    nnx.register_variable_name("stats", Stat)  # same kind again is fine


def test_register_taken_name_raises_unless_overwrite(clean_registry):
    class Other(nnx.Variable):
        pass

    with pytest.raises(
        ValueError, match=r"'params' is already registered to Param.*overwrite=True"
    ):
        nnx.register_variable_name("params", Other)
    assert nnx.variable_type_from_name("params") is nnx.Param
    nnx.register_variable_name("params", Other, overwrite=True)
    assert nnx.variable_type_from_name("params") is Other


def test_variable_type_from_name_registers_a_subclass_of_base():
    typ = nnx.variable_type_from_name("my_lora_kind", base=nnx.Param, allow_register=True)
    assert issubclass(typ, nnx.Param) and nnx.variable_type_from_name("my_lora_kind") is typ


def test_register_variable_name_as_a_decorator(clean_registry):
    @nnx.register_variable_name("counters")
    class Counter(nnx.Variable):
        pass

    assert nnx.variable_type_from_name("counters") is Counter
    assert nnx.variable_name_from_type(Counter) == "counters"
    assert nnx.register_variable_name("counters", Counter) is Counter  # returns the kind
