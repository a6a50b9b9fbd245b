"""Tests of flaxgraph/statelib/: State, FlatState, filtering, pure dicts, map_state."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx
from flaxgraph.statelib import FlatState, State


def make_state():
    return State(
        {
            "linear": {"kernel": nnx.Param(jnp.ones((2, 3))), "bias": nnx.Param(jnp.zeros(3))},
            "bn": {"mean": nnx.BatchStat(jnp.zeros(3))},
            "layers": {0: {"w": nnx.Param(jnp.full(2, 5.0))}},
            "raw": jnp.arange(2.0),
        }
    )


# -- construction and mapping protocol ---------------------------------------------------------


def test_nested_dicts_become_states():
    s = make_state()
    assert isinstance(s["linear"], State)
    assert isinstance(s["layers"][0], State)
    assert isinstance(s.linear.kernel, nnx.Param)


def test_construct_from_pairs_and_empty():
    assert dict(State([("a", 1), ("b", 2)])) == {"a": 1, "b": 2}
    assert len(State()) == 0


def test_construct_from_state_copies_nested_states():
    s = make_state()
    t = State(s)
    t["linear"]["extra"] = 1
    assert "extra" not in s["linear"]


def test_mapping_protocol():
    s = State({"a": 1, "b": {"c": 2}})
    assert len(s) == 2 and list(s) == ["a", "b"] and "a" in s and "z" not in s
    s["d"] = {"e": 3}
    assert isinstance(s["d"], State)
    del s["a"]
    assert list(s) == ["b", "d"]
    with pytest.raises(KeyError):
        s["a"]


def test_attribute_access_and_assignment():
    s = State({"a": 1})
    assert s.a == 1
    s.b = {"c": 2}
    assert isinstance(s["b"], State) and s.b.c == 2


def test_missing_attribute_names_available_keys():
    s = State({"a": 1, "b": 2})
    with pytest.raises(AttributeError, match=r"State has no key 'zz'; keys are \['a', 'b'\]"):
        _ = s.zz


# -- flat form ------------------------------------------------------------------------------------


def test_flat_state_paths_and_leaves():
    s = make_state()
    flat = s.flat_state()
    assert isinstance(flat, FlatState)
    assert flat.paths == (
        ("linear", "kernel"),
        ("linear", "bias"),
        ("bn", "mean"),
        ("layers", 0, "w"),
        ("raw",),
    )
    assert flat.leaves[0] is s.linear.kernel
    assert flat.leaves[-1] is s.raw


def test_from_flat_path_roundtrip():
    s = make_state()
    t = State.from_flat_path(s.flat_state())
    assert t.flat_state() == s.flat_state()
    assert t.linear.kernel is s.linear.kernel
    assert FlatState(s.flat_state()).to_nested_state().flat_state() == s.flat_state()


def test_from_flat_path_accepts_any_iterable():
    s = State.from_flat_path(iter([(("a", "b"), 1), (("c",), 2)]))
    assert s.to_pure_dict() == {"a": {"b": 1}, "c": 2}


def test_from_flat_path_prefix_conflicts():
    with pytest.raises(nnx.GraphStructureError, match="Path a/b goes through the leaf at a"):
        State.from_flat_path([(("a",), 1), (("a", "b"), 2)])
    with pytest.raises(nnx.GraphStructureError, match="Path a is both a leaf and a sub-state"):
        State.from_flat_path([(("a", "b"), 2), (("a",), 1)])
    with pytest.raises(nnx.GraphStructureError, match="non-empty path"):
        State.from_flat_path([((), 1)])


def test_from_flat_path_none_leaf_is_a_leaf():
    # A None leaf is still a leaf: a deeper path through it is a conflict, not a silent overwrite.
    with pytest.raises(nnx.GraphStructureError, match="goes through the leaf at a"):
        State.from_flat_path([(("a",), None), (("a", "b"), 1)])
    assert State.from_flat_path([(("a",), None)]).to_pure_dict() == {"a": None}


# -- filter / split / merge --------------------------------------------------------------------------


def test_filter_one_and_many():
    s = make_state()
    params = s.filter(nnx.Param)
    assert isinstance(params, State)
    assert set(params.flat_state().paths) == {
        ("linear", "kernel"),
        ("linear", "bias"),
        ("layers", 0, "w"),
    }
    p, b = s.filter(nnx.Param, nnx.BatchStat)
    assert len(p.flat_state()) == 3 and b.flat_state().paths == (("bn", "mean"),)


def test_filter_first_match_wins_and_drops_unmatched():
    s = make_state()
    a, b = s.filter(nnx.Variable, nnx.Param)
    assert len(a.flat_state()) == 4
    assert len(b.flat_state()) == 0
    assert ("raw",) not in a.flat_state().paths


def test_split_partitions_every_leaf():
    s = make_state()
    params, rest = s.split(nnx.Param, ...)
    assert len(params.flat_state()) + len(rest.flat_state()) == len(s.flat_state())
    assert set(rest.flat_state().paths) == {("bn", "mean"), ("raw",)}
    whole = s.split(...)
    assert whole.flat_state() == s.flat_state()


def test_split_unmatched_leaf_names_its_path():
    s = make_state()
    with pytest.raises(nnx.UnmatchedLeafError, match="The BatchStat at bn/mean matches none"):
        s.split(nnx.Param, jax.Array)
    with pytest.raises(ValueError, match=r"end the filters with `\.\.\.`"):
        s.split(nnx.Param)


def test_split_invalid_filter_is_type_error():
    with pytest.raises(TypeError, match="Invalid filter 3"):
        make_state().split(3)


def test_flat_state_filter_and_split():
    flat = make_state().flat_state()
    p = flat.filter(nnx.Param)
    assert isinstance(p, FlatState) and len(p) == 3
    p, rest = flat.split(nnx.Param, ...)
    assert len(p) + len(rest) == len(flat)
    with pytest.raises(nnx.UnmatchedLeafError, match="at raw matches none"):
        flat.split(nnx.Variable)


def test_merge_is_inverse_of_split():
    s = make_state()
    params, rest = s.split(nnx.Param, ...)
    merged = State.merge(params, rest)
    expected = {p: id(v) for p, v in s.flat_state()}
    assert {p: id(v) for p, v in merged.flat_state()} == expected


def test_merge_later_wins_and_accepts_dicts():
    merged = State.merge({"a": {"b": 1}}, State({"a": {"c": 2}}), {"a": {"b": 3}})
    assert merged.to_pure_dict() == {"a": {"b": 3, "c": 2}}


# -- pure dicts ---------------------------------------------------------------------------------------


def test_to_pure_dict_unboxes():
    s = make_state()
    d = s.to_pure_dict()
    assert type(d) is dict and type(d["linear"]) is dict
    assert d["linear"]["kernel"] is s.linear.kernel.value
    assert d["raw"] is s.raw
    assert jax.tree.map(jnp.shape, d) == {
        "linear": {"kernel": (2, 3), "bias": (3,)},
        "bn": {"mean": (3,)},
        "layers": {0: {"w": (2,)}},
        "raw": (2,),
    }


def test_replace_by_pure_dict_keeps_kinds_and_metadata():
    s = State({"w": nnx.Param(jnp.ones(2), out_sharding=("a",)), "raw": jnp.ones(1)})
    old = s.w
    s.replace_by_pure_dict({"w": jnp.zeros(2), "raw": jnp.zeros(1)})
    assert type(s.w) is nnx.Param and s.w is not old and s.w.out_sharding == ("a",)
    np.testing.assert_array_equal(s.w.value, np.zeros(2))
    np.testing.assert_array_equal(old.value, np.ones(2))
    np.testing.assert_array_equal(s.raw, np.zeros(1))


def test_replace_by_pure_dict_partial_and_string_int_keys():
    s = make_state()
    s.replace_by_pure_dict({"layers": {"0": {"w": jnp.zeros(2)}}})
    np.testing.assert_array_equal(s.layers[0].w.value, np.zeros(2))
    np.testing.assert_array_equal(s.linear.kernel.value, np.ones((2, 3)))


def test_replace_by_pure_dict_roundtrip():
    s = make_state()
    d = jax.tree.map(lambda x: x + 1, s.to_pure_dict())
    s.replace_by_pure_dict(d)
    np.testing.assert_array_equal(s.linear.kernel.value, 2 * np.ones((2, 3)))
    np.testing.assert_array_equal(s.raw, np.arange(2.0) + 1)


def test_replace_by_pure_dict_custom_replace_fn():
    s = State({"w": nnx.Param(jnp.ones(2))})
    s.replace_by_pure_dict({"w": 3.0}, replace_fn=lambda leaf, v: leaf.replace(v, touched=True))
    assert s.w.value == 3.0 and s.w.touched is True


def test_replace_by_pure_dict_unknown_path_names_it():
    s = make_state()
    with pytest.raises(
        nnx.GraphStructureError,
        match="pure_dict has the path linear/zz, but the State has no key 'zz' at linear",
    ):
        s.replace_by_pure_dict({"linear": {"zz": 1}})
    with pytest.raises(nnx.GraphStructureError, match="no key 'q' at <root>"):
        s.replace_by_pure_dict({"q": 1})
    with pytest.raises(nnx.GraphStructureError, match="path raw/x"):
        s.replace_by_pure_dict({"raw": {"x": 1}})


def test_replace_by_pure_dict_leaf_for_substate_raises():
    s = make_state()
    with pytest.raises(nnx.GraphStructureError, match="linear"):
        s.replace_by_pure_dict({"linear": 1.0})
    assert isinstance(s.linear, State)


def test_replace_by_pure_dict_is_all_or_nothing():
    s = make_state()
    with pytest.raises(nnx.GraphStructureError, match="zz"):
        s.replace_by_pure_dict({"raw": jnp.zeros(2), "zz": 1})
    np.testing.assert_array_equal(s.raw, np.arange(2.0))


# -- map_state ---------------------------------------------------------------------------------------------


def test_map_state_gets_paths_and_builds_new_state():
    s = make_state()
    seen = []

    def f(path, leaf):
        seen.append(path)
        return leaf.replace(leaf.value * 2) if isinstance(leaf, nnx.Variable) else leaf

    out = nnx.map_state(f, s)
    assert seen == list(s.flat_state().paths)
    np.testing.assert_array_equal(out.layers[0].w.value, np.full(2, 10.0))
    np.testing.assert_array_equal(s.layers[0].w.value, np.full(2, 5.0))
    assert type(out.bn.mean) is nnx.BatchStat


# -- pytree ---------------------------------------------------------------------------------------------------


def test_state_is_pytree_keeping_variable_boxes():
    s = make_state()
    out = jax.tree.map(lambda x: x * 0, s)
    assert isinstance(out, State)
    assert type(out.linear.kernel) is nnx.Param
    np.testing.assert_array_equal(out.linear.kernel.value, np.zeros((2, 3)))
    assert len(jax.tree.leaves(s)) == 5


def test_state_keypaths():
    s = State({"a": {"b": nnx.Param(1.0)}, 0: jnp.ones(1)})
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(s)[0]]
    assert paths == ["['a']['b'].value", "[0]"]


def test_state_through_jit():
    s = make_state()
    out = jax.jit(lambda st: jax.tree.map(lambda x: x + 1, st))(s)
    assert type(out.bn.mean) is nnx.BatchStat
    np.testing.assert_array_equal(out.raw, np.arange(2.0) + 1)


# -- module-level spellings (Flax NNX 0.12) ---------------------------------------------------


def test_flat_state_functions_roundtrip():
    s = nnx.State({"a": {"b": nnx.Param(1), "c": 2}, "d": 3})
    flat = nnx.to_flat_state(s)
    assert flat.paths == (("a", "b"), ("a", "c"), ("d",))
    back = nnx.from_flat_state(flat)
    assert back.to_pure_dict() == s.to_pure_dict() and back["a"]["b"] is s["a"]["b"]
    assert nnx.from_flat_state(dict(flat)).to_pure_dict() == s.to_pure_dict()


def test_filter_split_merge_state():
    s = nnx.State({"a": nnx.Param(1), "b": nnx.BatchStat(2), "c": nnx.Variable(3)})
    assert list(nnx.filter_state(s, nnx.Param)) == ["a"]
    params, stats = nnx.filter_state(s, nnx.Param, nnx.BatchStat)
    assert list(params) == ["a"] and list(stats) == ["b"]
    with pytest.raises(nnx.UnmatchedLeafError):
        nnx.split_state(s, nnx.Param, nnx.BatchStat)
    p, rest = nnx.split_state(s, nnx.Param, ...)
    merged = nnx.merge_state(p, rest)
    assert merged.to_pure_dict() == {"a": 1, "b": 2, "c": 3}
    nested = nnx.merge_state(nnx.State({"x": {"y": 1}}), {"x": {"z": 2}, "w": 0})
    assert nested.to_pure_dict() == {"x": {"y": 1, "z": 2}, "w": 0}


def test_pure_dict_functions():
    s = nnx.State({"layers": {0: {"w": nnx.Param(1)}}})
    assert nnx.to_pure_dict(s) == {"layers": {0: {"w": 1}}}
    assert nnx.to_pure_dict(s, lambda v: ("boxed", v.value)) == {"layers": {0: {"w": ("boxed", 1)}}}
    nnx.replace_by_pure_dict(s, {"layers": {"0": {"w": 5}}})
    assert s["layers"][0]["w"].value == 5
    assert nnx.restore_int_paths({"layers": {"0": {"w": 1}, "10": 2}, "-1": 3, "x1": 4}) == {
        "layers": {0: {"w": 1}, 10: 2},
        "-1": 3,
        "x1": 4,
    }


def test_restore_int_paths_matches_flax():
    fnnx = pytest.importorskip("flax.nnx")
    d = {"a": {"0": 1, "1": {"2": 3}}, "3": 4, "b": {"x": "0"}}
    assert nnx.restore_int_paths(d) == fnnx.restore_int_paths(d)


def test_diff_keeps_the_paths_the_other_state_lacks():
    a = nnx.State({"x": 1, "y": {"z": 2, "w": 3}})
    b = nnx.State({"x": 5, "y": {"z": 0}})
    assert nnx.statelib.diff(a, b).to_pure_dict() == {"y": {"w": 3}}
    assert nnx.statelib.diff(b, a) == nnx.State({})
    assert nnx.statelib.diff(a, nnx.State({})) is a
