"""``bool(variable)`` as in Flax 0.12.8: a Variable's truth is its value's length.

Flax's Variable defines ``__len__`` (the value's length) and no ``__bool__``, so Python takes a
Variable's truth from its length: a sown ``Intermediate`` holding a tuple, or a Variable holding an
array with a leading axis, is true when non-empty whatever its elements are, and a scalar value
has no length (``TypeError``). MaxText's multi-token-prediction loss reads its sown losses with
``if losses_var and weights_var:``, on arrays of several elements. Differential against real
``flax.nnx``.
"""

import jax.numpy as jnp
import pytest
from flax import nnx as flax_nnx

import flaxgraph as nnx

VALUES = [
    jnp.array([0.0, 0.0]),
    jnp.array([1.0, 2.0, 3.0]),
    jnp.zeros((0,)),
    jnp.zeros((1,)),
    (jnp.array([1.0, 2.0]),),
    (),
    [0],
]


def truth(lib, value):
    try:
        return bool(lib.Intermediate(value))
    except TypeError as error:
        return type(error)


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_truth_of_a_variable_is_that_of_flax(value):
    assert truth(nnx, value) == truth(flax_nnx, value)


@pytest.mark.parametrize("value", [jnp.array(0.0), jnp.array(3)], ids=repr)
def test_a_scalar_variable_has_no_truth_as_in_flax(value):
    assert truth(nnx, value) is TypeError and truth(flax_nnx, value) is TypeError


def test_a_multi_element_array_is_true_and_a_scalar_has_no_length():
    assert bool(nnx.Param(jnp.array([0.0, 0.0])))  # two elements: len 2, as in Flax
    with pytest.raises(TypeError):
        bool(nnx.Param(jnp.array(1.0)))  # len() of a 0-d array, as in Flax
