"""Tests of flaxgraph/statelib/members.py (Flax 0.12's State/FlatState members)."""

import jax.numpy as jnp
import pytest
from hypothesis import given
from hypothesis import strategies as st

import flaxgraph as nnx

nested = st.recursive(
    st.integers(-5, 5),
    lambda children: st.dictionaries(st.sampled_from("abcd"), children, min_size=1, max_size=3),
    max_leaves=8,
).filter(lambda x: isinstance(x, dict))


@given(nested)
def test_map_is_map_state(d):
    s = nnx.State(d)
    f = lambda p, v: (len(p), v)
    assert s.map(f).to_pure_dict() == nnx.map_state(f, s).to_pure_dict()
    assert s.to_pure_dict() == d  # unchanged


def test_map_matches_flax():
    fnnx = pytest.importorskip("flax.nnx")
    d = {"a": 1, "b": {"c": 2}}
    ours = nnx.State(d).map(lambda p, v: "/".join(p) + str(v)).to_pure_dict()
    with pytest.warns(DeprecationWarning):
        theirs = fnnx.State(d).map(lambda p, v: "/".join(p) + str(v)).to_pure_dict()
    assert ours == theirs


def test_raw_mapping_is_the_live_dict():
    s = nnx.State({"a": 1})
    s.raw_mapping["b"] = 2
    assert s["b"] == 2 and type(s.raw_mapping) is dict


@given(nested)
def test_from_sorted_keys_values_roundtrip(d):
    flat = nnx.to_flat_state(nnx.State(d))
    again = nnx.FlatState.from_sorted_keys_values(flat.paths, list(flat.leaves))
    assert again == flat and type(again) is nnx.FlatState


def test_from_sorted_keys_values_length_mismatch():
    with pytest.raises(ValueError, match="2 keys and 1 values"):
        nnx.FlatState.from_sorted_keys_values((("a",), ("b",)), [1])


@given(nested, nested)
def test_merge_agrees_with_merge_state(a, b):
    fa, fb = nnx.to_flat_state(nnx.State(a)), nnx.to_flat_state(nnx.State(b))
    try:
        expected = nnx.merge_state(nnx.State(a), nnx.State(b)).to_pure_dict()
    except Exception:  # a leaf where the other has a sub-state
        return
    merged = nnx.FlatState.merge(fa, fb)
    assert nnx.from_flat_state(merged).to_pure_dict() == expected
    assert list(merged.paths) == sorted(merged.paths)


def test_merge_sorts_int_keys_numerically_and_returns_single_as_is():
    f = nnx.FlatState([(("l", 10), 1), (("l", 2), jnp.ones(1))])
    assert nnx.FlatState.merge(f) is f
    assert nnx.FlatState.merge(f, []).paths == (("l", 2), ("l", 10))
