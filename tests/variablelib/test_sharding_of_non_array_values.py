"""``v.sharding`` of a Variable whose value is not an array answers as in Flax 0.12.8.

flaxgraph answers ``.sharding`` of an array-valued Variable that has sharding names with the
names (a deliberate difference, guides/from_flax.md). A Variable holding something else, such as
the ``NamedSharding`` MaxText stores per parameter in its tree of shardings, answers from its
value as Flax 0.12.8 does: a ``NamedSharding`` has no ``sharding`` attribute, so
``getattr(v, "sharding", None)`` is ``None`` (MaxText's ``get_abstract_state_nnx`` relies on it).
Differential against real ``flax.nnx``.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx as flax_nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import flaxgraph as nnx


@pytest.mark.parametrize("names", [("x",), PartitionSpec("x")], ids=repr)
def test_a_variable_holding_a_named_sharding_has_no_sharding_attribute(names):
    mesh = Mesh(np.array(jax.devices()[:1]), ("x",))
    answers = []
    for lib in (flax_nnx, nnx):
        with lib.use_eager_sharding(False):
            v = lib.Variable(NamedSharding(mesh, PartitionSpec("x")), out_sharding=names)
        answers.append(getattr(v, "sharding", None))
    assert answers == [None, None]


def test_an_array_a_mesh_placed_answers_sharding_with_its_placement_as_in_flax():
    # Flax 0.12.8 code under a mesh reads `v.sharding.spec`: with eager sharding the value
    # is placed by a NamedSharding, and both libraries answer with it (no warning).
    mesh = jax.make_mesh((1,), ("model",))
    answers = []
    for lib in (flax_nnx, nnx):
        with jax.set_mesh(mesh), warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            v = lib.Param(jnp.ones((2, 4)), out_sharding=(None, "model"))
            answers.append(v.sharding)
    flax_answer, flaxgraph_answer = answers
    assert isinstance(flax_answer, jax.sharding.NamedSharding)
    assert isinstance(flaxgraph_answer, jax.sharding.NamedSharding)
    assert flaxgraph_answer.spec == flax_answer.spec
