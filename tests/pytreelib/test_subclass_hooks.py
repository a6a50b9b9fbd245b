"""The slots and hooks Flax 0.12.8's ``Pytree``, ``Variable`` and ``RngStream`` expose to
subclasses, differential against the real Flax in the same process.

A framework that builds its layers on ``nnx.Module`` and its variables on ``nnx.Variable``
reads ``_pytree__state``/``Variable._trace_state``, makes ``nnx.pytreelib.PytreeState()``,
overrides ``_check_valid_context``, and stores a variable's value its own way
(``get_value``/``set_value``/``create_value`` overrides, a ``value`` property of its own).
Each program below runs on both libraries and must give the same answers.
"""

from __future__ import annotations

import copy
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import errors as flax_errors
from flax import nnx as flax_nnx

import flaxgraph as nnx

LIBS = [pytest.param(nnx, id="flaxgraph"), pytest.param(flax_nnx, id="flax")]


# -- Pytree / RngStream slots -----------------------------------------------------------------


@pytest.mark.parametrize("lib", LIBS)
def test_pytree_state_is_constructible_and_tells_the_trace(lib: Any) -> None:
    state = lib.pytreelib.PytreeState()
    assert state.trace_state.is_valid()
    assert (state.initializing, state.is_setup) == (False, False)
    seen = []
    jax.jit(lambda x: (seen.append(state.trace_state.is_valid()), x)[1])(1)
    assert seen == [False]


@pytest.mark.parametrize("lib", LIBS)
def test_rngstream_and_modules_have_the_pytree_attributes(lib: Any) -> None:
    rngs = lib.Rngs(params=0)
    for obj in (rngs, rngs.params, lib.Linear(1, 1, rngs=rngs)):
        assert obj._pytree__state.trace_state.is_valid()
        assert obj._pytree__is_pytree is True
    stream = rngs.params
    assert dict(stream._pytree__nodes)["key"] is True
    assert dict(stream._pytree__nodes)["tag"] is False


@pytest.mark.parametrize("lib", LIBS)
def test_variable_trace_state(lib: Any) -> None:
    p = lib.Param(jnp.ones(2))
    assert p._trace_state.is_valid()
    seen = []

    @jax.jit
    def f(x: jax.Array) -> jax.Array:
        seen.append(p._trace_state.is_valid())
        return x

    f(1)
    assert seen == [False]
    assert p._trace_state == p._trace_state


def _framework_layer(lib: Any) -> Any:
    """A layer base class as a framework writes it on ``nnx.Module``: it makes its own
    ``PytreeState`` in ``__new__`` and allows mutations in a scope of its own through
    ``_check_valid_context``."""

    class Scope:
        active = False

    class Layer(lib.Module):
        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            instance = super().__new__(cls)
            vars(instance)["_pytree__state"] = lib.pytreelib.PytreeState()
            return instance

        def __init__(self, n: int) -> None:
            self.w = lib.Param(jnp.ones(n))
            self.calls = 0

        def _check_valid_context(self, error_msg: Any) -> None:
            if Scope.active:
                return
            super()._check_valid_context(error_msg)

    return Layer, Scope


@pytest.mark.parametrize("lib", LIBS)
def test_a_framework_layer_overriding_check_valid_context(lib: Any) -> None:
    Layer, Scope = _framework_layer(lib)
    layer = Layer(3)
    graphdef, state = lib.split(layer)
    again = lib.merge(graphdef, state)
    np.testing.assert_array_equal(again.w[...], np.ones(3))

    @jax.jit
    def touch(x: jax.Array) -> jax.Array:
        layer.calls = 1  # mutation of a captured object from inside a trace
        return x

    with pytest.raises((nnx.errors.TraceContextError, flax_errors.TraceContextError)):
        touch(1)
    Scope.active = True
    touch(2)  # the override allows it
    assert layer.calls == 1

    @lib.jit
    def step(m: Any) -> jax.Array:
        m.w[...] = m.w[...] * 2
        return m.w[...].sum()

    Scope.active = False
    assert float(step(layer)) == 6.0
    np.testing.assert_array_equal(layer.w[...], np.full(3, 2.0))


# -- Variable subclasses that store their value their own way ---------------------------------


def _scaled_variable(lib: Any) -> Any:
    """Stores twice the value; reads give it back (``get_value``/``set_value``)."""

    class Scaled(lib.Variable):
        def get_value(self, **kwargs: Any) -> Any:
            return super().get_value(**kwargs) / 2

        def set_value(self, value: Any, **kwargs: Any) -> None:
            super().set_value(value * 2, **kwargs)

        def create_value(self, value: Any) -> Any:
            return value * 2

    return Scaled


@pytest.mark.filterwarnings("ignore:'.value':DeprecationWarning")  # Flax 0.12.8 warns on .value
@pytest.mark.parametrize("lib", LIBS)
def test_get_set_create_value_overrides_hold_through_split_merge_and_jit(lib: Any) -> None:
    Scaled = _scaled_variable(lib)

    class Holder(lib.Module):
        def __init__(self) -> None:
            self.v = Scaled(jnp.arange(3.0))

    m = Holder()
    np.testing.assert_array_equal(m.v.get_raw_value(), [0.0, 2.0, 4.0])
    np.testing.assert_array_equal(m.v.get_value(), [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(np.asarray(m.v.value), [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(np.asarray(jnp.asarray(m.v)), [0.0, 1.0, 2.0])
    graphdef, state = lib.split(m)
    back = lib.merge(graphdef, state)
    np.testing.assert_array_equal(np.asarray(back.v.value), [0.0, 1.0, 2.0])
    back.v.value = jnp.ones(3)
    np.testing.assert_array_equal(back.v.get_raw_value(), [2.0, 2.0, 2.0])

    @lib.jit
    def read(h: Any) -> jax.Array:
        return h.v.value + 0

    np.testing.assert_array_equal(read(back), [1.0, 1.0, 1.0])
    copied = copy.deepcopy(back)
    np.testing.assert_array_equal(np.asarray(copied.v.value), [1.0, 1.0, 1.0])


def _framework_variable(lib: Any) -> Any:
    """A framework's variable on ``nnx.Variable``: its own attributes mirrored into the
    Variable's metadata, its own ``value`` property reading the stored value."""

    class FrameworkVariable(lib.Variable):
        def __init__(self, value: Any, name: str) -> None:
            super().__init__(jnp.asarray(value))
            object.__setattr__(self, "_trace_state", self._trace_state)
            self._var_metadata["fw_name"] = name

        @property
        def value(self) -> Any:  # type: ignore[override]
            return self.get_raw_value() + 0

        @value.setter
        def value(self, new: Any) -> None:
            self.set_raw_value(jnp.asarray(new))

    return FrameworkVariable


@pytest.mark.parametrize("lib", LIBS)
def test_a_framework_variable_keeps_its_value_and_names_after_split_merge(lib: Any) -> None:
    FrameworkVariable = _framework_variable(lib)

    class Holder(lib.Module):
        def __init__(self) -> None:
            self.v = FrameworkVariable(jnp.arange(2.0), "kernel")

    m = Holder()
    graphdef, state = lib.split(m)
    back = lib.merge(graphdef, state)
    assert type(back.v) is FrameworkVariable
    np.testing.assert_array_equal(np.asarray(back.v.value), [0.0, 1.0])
    assert back.v.fw_name == "kernel"
    back.v.value = jnp.ones(2)
    np.testing.assert_array_equal(np.asarray(back.v.value), [1.0, 1.0])
    assert back.v._trace_state.is_valid()


def _hooked_variable(lib: Any) -> Any:
    """Flax's class-level value hooks (deprecated there): stores twice the value."""

    class Hooked(lib.Variable):
        def on_get_value(self, value: Any) -> Any:
            return value / 2

        def on_set_value(self, value: Any) -> Any:
            return value * 2

        def on_create_value(self, value: Any) -> Any:
            return value * 2

    return Hooked


@pytest.mark.filterwarnings("ignore:Variable hooks are deprecated")  # both warn, as Flax
@pytest.mark.parametrize("lib", LIBS)
def test_class_level_value_hooks_as_in_flax(lib: Any) -> None:
    Hooked = _hooked_variable(lib)

    class Holder(lib.Module):
        def __init__(self) -> None:
            self.v = Hooked(jnp.arange(3.0))

    m = Holder()
    np.testing.assert_array_equal(m.v.get_raw_value(), [0.0, 2.0, 4.0])
    np.testing.assert_array_equal(m.v[...], [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(m.v.get_value(), [0.0, 1.0, 2.0])
    m.v[...] = jnp.ones(3)
    np.testing.assert_array_equal(m.v.get_raw_value(), [2.0, 2.0, 2.0])
    back = lib.merge(*lib.split(m))
    np.testing.assert_array_equal(back.v[...], [1.0, 1.0, 1.0])

    class Twice(Hooked):  # a subclass redefining one hook replaces it
        def on_get_value(self, value: Any) -> Any:
            return value / 4

    np.testing.assert_array_equal(Twice(jnp.ones(1) * 4)[...], [2.0])


def test_value_hooks_as_metadata_are_refused_with_the_fix() -> None:
    with pytest.raises(TypeError, match="define on_get_value"):
        nnx.Param(jnp.ones(1), on_get_value=lambda v, x: x)


@pytest.mark.parametrize("lib", LIBS)
def test_constructing_a_hooked_variable_warns_as_flax(lib: Any) -> None:
    Hooked = _hooked_variable(lib)
    with pytest.warns(UserWarning, match="Variable hooks are deprecated"):
        Hooked(jnp.ones(1))


def test_pytree_state_flags_persist_between_reads_as_in_flax():
    # A Linen bridge marks every node as initializing through `_pytree__state._initializing`
    # and reads `.initializing` later: the flag must stay on the object, in both libraries.
    from flax import nnx as flax_nnx

    for lib in (flax_nnx, nnx):
        module = lib.Module()
        assert module._pytree__state.initializing is False, lib.__name__
        module._pytree__state._initializing = True
        assert module._pytree__state.initializing is True, lib.__name__
        assert module._pytree__state.trace_state.is_valid(), lib.__name__
