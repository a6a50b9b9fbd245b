"""Tests of flaxgraph/nn/errors.py: the layer input errors and their messages."""

import jax.numpy as jnp
import pytest

import flaxgraph as nnx
from flaxgraph.nn import LayerDtypeError, LayerInputError, LayerShapeError, Linear
from flaxgraph.nn.errors import describe, shape_error


def test_hierarchy():
    assert issubclass(LayerShapeError, ValueError)
    assert issubclass(LayerShapeError, LayerInputError)
    assert issubclass(LayerShapeError, nnx.FlaxgraphError)
    assert issubclass(LayerDtypeError, ValueError) and issubclass(LayerDtypeError, TypeError)


def test_describe_and_shape_error():
    layer = Linear(64, 10, rngs=nnx.Rngs(0))
    assert describe(layer) == "Linear(in_features=64, out_features=10)"
    err = shape_error(layer, "inputs with last dimension 64", (8, 32))
    assert err.module is layer
    assert str(err) == (
        "Linear(in_features=64, out_features=10) expected inputs with last dimension 64, "
        "got shape (8, 32)."
    )
    assert shape_error(None, "x", (1,)).module is None


def test_error_keeps_module_through_transforms():
    layer = Linear(4, 2, rngs=nnx.Rngs(0))
    with pytest.raises(LayerShapeError) as info:
        nnx.jit(lambda m, x: m(x))(layer, jnp.ones((3, 5)))
    assert "Linear(in_features=4, out_features=2)" in str(info.value)
