"""Tests of flaxgraph/nn/common.py: argument helpers."""

import jax
import jax.numpy as jnp
import pytest

import flaxgraph as nnx
from flaxgraph.nn.common import (
    broadcast_right,
    canonicalize_tuple,
    expand_to,
    first_from,
    make_param,
    make_reshaped_param,
    op_options,
)


def test_canonicalize_tuple_and_expand_to():
    assert canonicalize_tuple(3) == (3,)
    assert canonicalize_tuple([2, 3]) == (2, 3)
    with pytest.raises(TypeError, match="kernel_size must be an int or a sequence of ints"):
        canonicalize_tuple("ab", "kernel_size")
    assert expand_to(2, 3, "strides") == (2, 2, 2)
    assert expand_to(None, 2, "strides") == (1, 1)
    with pytest.raises(ValueError, match="strides must have 2 entries"):
        expand_to((1, 2, 3), 2, "strides")


def test_first_from():
    assert first_from(None, False, True, error_msg="x") is False
    with pytest.raises(ValueError, match="nothing given"):
        first_from(None, None, error_msg="nothing given")


def test_params_and_broadcast():
    p = make_param(jax.nn.initializers.ones, jax.random.key(0), (2, 3), jnp.float32, {"tag": "a"})
    assert isinstance(p, nnx.Param) and p.tag == "a" and p.shape == (2, 3)
    init = nnx.with_partitioning(jax.nn.initializers.ones, ("x", None, "y"))
    q = make_reshaped_param(init, jax.random.key(0), (6, 4), (2, 3, 4), jnp.float32, {})
    assert q.shape == (2, 3, 4) and q.out_sharding == ("x", None, "y")
    assert broadcast_right(jnp.ones(3), 3).shape == (1, 1, 3)


def test_op_options_passes_only_what_is_set():
    assert op_options() == {}
    assert op_options(jnp.float32) == {"preferred_element_type": jnp.float32}
    assert op_options(out_sharding="spec") == {"out_sharding": "spec"}
