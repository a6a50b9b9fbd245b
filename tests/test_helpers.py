"""Tests of flaxgraph/containers.py (Flax's ``nnx.helpers`` path): List, Dict and Sequential."""

from collections.abc import Mapping, MutableMapping

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import flaxgraph as nnx


class Scale(nnx.Module):
    def __init__(self, factor):
        self.factor = nnx.Param(jnp.array(factor))

    def __call__(self, x):
        return x * self.factor


# -- List -------------------------------------------------------------------------------------


def test_list_sequence_protocol():
    items = nnx.List([1, 2, 3])
    assert len(items) == 3 and list(items) == [1, 2, 3]
    assert items[0] == 1 and items[-1] == 3 and items[1:] == [2, 3]
    with pytest.raises(IndexError):
        items[3]


def test_list_mutation():
    items = nnx.List()
    items.append("a")
    items.extend(["b", "c"])
    items[0] = "A"
    items[-1] = "C"
    assert list(items) == ["A", "b", "C"]
    assert items.pop(1) == "b" and list(items) == ["A", "C"]
    assert items.pop() == "C" and list(items) == ["A"]
    assert items[0] == "A"


def test_list_setitem_out_of_range():
    items = nnx.List([1])
    with pytest.raises(IndexError, match="List index 5 out of range for length 1"):
        items[5] = 0
    with pytest.raises(IndexError):
        items[-2] = 0


def test_list_pop_empty():
    with pytest.raises(IndexError):
        nnx.List().pop()


def test_list_state_keys_are_ints_and_roundtrip():
    items = nnx.List([Scale(2.0), Scale(3.0)])
    graphdef, state = nnx.split(items)
    assert set(state.flat_state().paths) == {(0, "factor"), (1, "factor")}
    new = nnx.merge(graphdef, state)
    assert type(new) is nnx.List and len(new) == 2
    assert float(new[1].factor.value) == 3.0
    new.append(Scale(4.0))
    assert len(new) == 3


def test_list_is_a_shared_graph_node():
    shared = nnx.List([Scale(1.0)])
    root = nnx.Dict(a=shared, b=shared)
    new = nnx.merge(*nnx.split(root))
    assert new.a is new.b


def test_list_mutation_from_another_trace_raises():
    items = nnx.List([jnp.ones(1)])

    @jax.jit
    def f(x):
        items.append(x)
        return x

    with pytest.raises(nnx.TraceContextError):
        f(jnp.ones(1))
    with pytest.raises(nnx.TraceContextError):
        jax.jit(lambda x: items.pop())(1)
    with pytest.raises(nnx.TraceContextError):
        jax.jit(lambda x: items.__setitem__(0, x))(1)
    assert len(items) == 1


def test_list_update_and_pytree():
    items = nnx.List([jnp.zeros(2), Scale(1.0)])
    nnx.update(items, {0: jnp.ones(2), 1: {"factor": jnp.array(5.0)}})
    np.testing.assert_array_equal(items[0], np.ones(2))
    assert float(items[1].factor.value) == 5.0
    out = jax.tree.map(lambda x: x * 2, items)
    np.testing.assert_array_equal(out[0], 2 * np.ones(2))


# -- Dict -------------------------------------------------------------------------------------


def test_dict_mapping_protocol():
    d = nnx.Dict({"b": 2}, a=1)
    assert d["a"] == 1 and d.a == 1
    assert list(d) == ["a", "b"] and list(d.keys()) == ["a", "b"]
    assert list(d.values()) == [1, 2] and list(d.items()) == [("a", 1), ("b", 2)]
    assert len(d) == 2 and "a" in d and "z" not in d
    d["c"] = 3
    del d["a"]
    assert d.keys() == {"b", "c"}  # a KeysView, as Flax's (a MutableMapping) gives
    with pytest.raises(KeyError):
        d["a"]


def test_dict_is_a_mutable_mapping_that_hashes_by_identity():
    # Library code walks nested containers with isinstance(x, Mapping) and turns
    # them into plain dicts; an nnx.Dict must take that branch, as in Flax.
    def to_plain(node):
        if isinstance(node, Mapping):
            return {k: to_plain(v) for k, v in node.items()}
        return node

    tree = nnx.Dict(decoder=nnx.Dict(layer0=nnx.Dict(w=1.0)), head={"b": 2})
    plain = to_plain(tree)
    assert plain == {"decoder": {"layer0": {"w": 1.0}}, "head": {"b": 2}}
    assert type(plain["decoder"]["layer0"]) is dict
    assert isinstance(tree, MutableMapping) and tree == plain
    same = nnx.Dict(decoder=tree["decoder"], head=tree["head"])
    assert same == tree and hash(same) != hash(tree) and len({tree, same}) == 2
    tree.setdefault("extra", 3)
    tree.update(more=4)
    assert tree.pop("extra") == 3 and tree.get("missing", 0) == 0 and "more" in tree


def test_dict_kwargs_win_over_mapping():
    assert nnx.Dict({"a": 1}, a=2)["a"] == 2


def test_dict_split_merge():
    d = nnx.Dict(enc=Scale(2.0), dec=Scale(3.0))
    graphdef, state = nnx.split(d)
    assert set(state.flat_state().paths) == {("enc", "factor"), ("dec", "factor")}
    new = nnx.merge(graphdef, state)
    assert type(new) is nnx.Dict and float(new["dec"].factor.value) == 3.0


def test_dict_mutation_from_another_trace_raises():
    d = nnx.Dict(a=1)
    with pytest.raises(nnx.TraceContextError):
        jax.jit(lambda x: d.__setitem__("b", x))(1)
    with pytest.raises(nnx.TraceContextError):
        jax.jit(lambda x: d.__delitem__("a"))(1)
    assert list(d.keys()) == ["a"]


# -- Sequential ---------------------------------------------------------------------------------


def test_sequential_composes_in_order():
    seq = nnx.Sequential(Scale(2.0), lambda x: x + 1, Scale(3.0))
    x = jnp.arange(3.0)
    np.testing.assert_allclose(seq(x), (x * 2 + 1) * 3)


def test_sequential_extra_args_go_to_first_layer():
    seq = nnx.Sequential(lambda x, y, *, z: x + y + z, lambda h: h * 10)
    assert seq(1, 2, z=3) == 60


def test_empty_sequential_is_identity():
    assert nnx.Sequential()(5) == 5
    assert nnx.Sequential()(1, 2) == (1, 2)
    assert nnx.Sequential()() is None  # Flax 0.12
    assert nnx.Sequential()(k=2) == {"k": 2}
    assert nnx.Sequential()(1, k=2) == (1, {"k": 2})


def test_sequential_layers_are_a_list_and_split():
    seq = nnx.Sequential(Scale(2.0), Scale(3.0))
    assert type(seq.layers) is nnx.List and len(seq.layers) == 2
    graphdef, state = nnx.split(seq)
    assert set(state.flat_state().paths) == {("layers", 0, "factor"), ("layers", 1, "factor")}
    new = nnx.merge(graphdef, state)
    np.testing.assert_allclose(new(jnp.ones(1)), [6.0])


def test_sequential_through_jit_by_split_merge():
    seq = nnx.Sequential(Scale(2.0), Scale(5.0))
    graphdef, state = nnx.split(seq)
    out = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x))(state, jnp.ones(2))
    np.testing.assert_allclose(out, np.full(2, 10.0))


@given(
    st.lists(st.integers(0, 9), max_size=6),
    st.lists(
        st.tuples(st.sampled_from(["insert", "del", "slice", "pop", "set"]), st.integers(-8, 8)),
        max_size=6,
    ),
)
def test_list_is_a_mutable_sequence_like_a_python_list(items, ops):
    ls, ref = nnx.List(items), list(items)
    for op, i in ops:
        if op == "insert":
            ls.insert(i, 100 + i)
            ref.insert(i, 100 + i)
        elif op == "slice":
            ls[i:] = [7, 8]
            ref[i:] = [7, 8]
        elif ref and op == "del":
            del ls[i % len(ref)]
            del ref[i % len(ref)]
        elif ref and op == "pop":
            assert ls.pop(i % len(ref)) == ref.pop(i % len(ref))
        elif ref and op == "set":
            ls[i % len(ref)] = -1
            ref[i % len(ref)] = -1
        assert list(ls) == ref and len(ls) == len(ref)
    assert ls[1:3] == ref[1:3]


def test_list_items_keep_their_data_and_static_marks():
    ls = nnx.List([nnx.data(1), nnx.static("s"), nnx.data(jnp.array(2.0))])
    assert jax.tree.leaves(ls) == [1, jnp.array(2.0)]
    ls.insert(0, nnx.static(99))  # marks move with their items
    assert [x for x in ls] == [99, 1, "s", jnp.array(2.0)]
    assert jax.tree.leaves(ls) == [1, jnp.array(2.0)]
    del ls[1]
    assert jax.tree.leaves(ls) == [jnp.array(2.0)]
    doubled = jax.jit(lambda t: jax.tree.map(lambda x: x * 2, t))(ls)
    assert doubled[2] == 4.0 and doubled[0] == 99 and doubled[1] == "s"


def test_dict_mapping_methods():
    d = nnx.Dict(a=1)
    assert d.setdefault("a", 10) == 1 and d.setdefault("b", 2) == 2 and d["b"] == 2
    assert d.get("zz") is None and d.get("a") == 1
    d.update({"c": 3}, e=5)
    assert d.pop("c") == 3 and d.pop("c", None) is None and sorted(d) == ["a", "b", "e"]
    with pytest.raises(KeyError):
        d.pop("c")


def test_dict_popitem_and_clear():
    d = nnx.Dict(b=2, a=1)
    assert d.popitem() == ("a", 1)
    assert list(d) == ["b"]
    d.clear()
    assert len(d) == 0 and list(d.keys()) == []
    with pytest.raises(KeyError, match="empty"):
        d.popitem()


def test_dict_popitem_and_clear_match_flax():
    fnnx = pytest.importorskip("flax.nnx")
    ours, theirs = nnx.Dict(b=2, a=1), fnnx.Dict(b=2, a=1)
    # both pop the first key of their own iteration order (flaxgraph iterates sorted)
    for d in (ours, theirs):
        first = next(iter(d))
        assert d.popitem() == (first, {"a": 1, "b": 2}[first])
    ours.clear()
    theirs.clear()
    assert len(ours) == len(theirs) == 0
