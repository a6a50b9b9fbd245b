"""Indexing a Variable as Flax 0.12 does (the value's protocols of flaxgraph/variablelib/variable.py)."""

import jax.numpy as jnp

import flaxgraph as nnx


def test_ellipsis_assignment_of_a_scalar_writes_into_the_array():
    # Flax 0.12: v[...] = 2 keeps the array (shape and dtype), it does not store an int.
    v = nnx.Param(jnp.zeros((2,), jnp.int32))
    v[...] = 2
    assert v[...].dtype == jnp.int32 and v[...].tolist() == [2, 2]
    v[...] = jnp.ones(3)  # an array still replaces the value (a plain Variable)
    assert v.shape == (3,)


def test_getitem_reads_through_an_overridden_get_value():
    class Plus3(nnx.Param):
        def get_value(self, **kwargs):
            return super().get_value(**kwargs) + 3

    assert Plus3(jnp.array(1))[...] == 4


def test_item_writes_to_a_dict_or_list_value_make_a_new_container():
    # A changed value is a new object (the transforms tell unchanged values by
    # identity); as in Flax 0.12, a value read earlier does not see later writes.
    v = nnx.Variable({"a": 1})
    before = v.value
    v["a"] = 2
    v["b"] = 3
    del v["a"]
    assert before == {"a": 1} and v.value == {"b": 3} and v.value is not before
    items = nnx.Variable([1, 2])
    first = items.value
    items[0] = 5
    del items[1]
    assert first == [1, 2] and items.value == [5] and len(items) == 1 and 5 in items
