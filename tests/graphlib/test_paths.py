"""Tests of flaxgraph/graphlib/paths.py: human-readable paths for error messages."""

from typing import NamedTuple

import jax.numpy as jnp

import flaxgraph as nnx
from flaxgraph.graphlib.paths import keys_str, path_str


class Inner(nnx.Module):
    def __init__(self):
        self.kernel = nnx.Param(jnp.ones(2))


class Pair(NamedTuple):
    first: object
    second: object


class Outer(nnx.Module):
    def __init__(self):
        self.layers = [Inner(), {"a": Inner()}]
        self.pair = Pair(Inner(), 1)
        self.items = nnx.List([Inner()])
        setattr(self, "not an identifier", Inner())


def test_attributes_use_dots_and_items_brackets():
    m = Outer()
    assert path_str("model", m, ("layers", 0, "kernel")) == "model.layers[0].kernel"
    assert path_str("model", m, ("layers", 1, "a", "kernel")) == "model.layers[1]['a'].kernel"


def test_root_only():
    assert path_str("args", Outer(), ()) == "args"


def test_non_identifier_and_int_keys_on_nodes_use_brackets():
    m = Outer()
    assert path_str("m", m, ("not an identifier", "kernel")) == "m['not an identifier'].kernel"
    assert path_str("m", m, ("items", 0, "kernel")) == "m.items[0].kernel"


def test_pytree_containers_use_brackets_then_attributes():
    m = Outer()
    assert path_str("m", m, ("pair", "first", "kernel")) == "m.pair['first'].kernel"


def test_plain_containers_as_root():
    root = [{"x": Inner()}]
    assert path_str("args", root, (0, "x", "kernel")) == "args[0]['x'].kernel"


def test_missing_keys_do_not_crash():
    m = Outer()
    assert path_str("m", m, ("nope", "deeper", 3)) == "m.nope['deeper'][3]"
    assert path_str("m", m, ("layers", 9, "k")) == "m.layers[9]['k']"


def test_keys_str():
    assert keys_str(("layers", 0, "kernel")) == "layers/0/kernel"
    assert keys_str(()) == "<root>"
