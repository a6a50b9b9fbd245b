"""Tests of flaxgraph/pytreelib/tree_layout.py: the cached pytree layout of a Pytree
gives exactly what deciding data/static afresh gives, and the JAX keys are pinned."""

import dataclasses

import jax
import jax.numpy as jnp
import optax
from hypothesis import given, settings
from hypothesis import strategies as st

import flaxgraph as nnx
from flaxgraph.pytreelib.attribute_kinds import STATIC
from flaxgraph.pytreelib.objects import _is_data, sorted_items


def keys(tree):
    return [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


class Block(nnx.Module):
    def __init__(self, rngs):
        self.linear = nnx.Linear(2, 3, rngs=rngs)
        self.norm = nnx.BatchNorm(3, rngs=rngs)
        self.extra = {"a": nnx.Param(jnp.ones(1)), "b": [jnp.zeros(2), 3]}
        self.items = nnx.List([nnx.Variable(jnp.ones(1)), nnx.Param(jnp.ones(1))])
        self.name = "block"
        self.count = nnx.BatchStat(jnp.array(0))


# The keys as they were before the layouts were cached (recorded from the previous
# implementation): flatten_with_path must keep giving exactly these.
MODULE_KEYS = [
    ".count.value",
    ".extra['a'].value",
    ".extra['b'][0]",
    ".extra['b'][1]",
    ".items[0].value",
    ".items[1].value",
    ".linear.bias.value",
    ".linear.kernel.value",
    ".norm.bias.value",
    ".norm.mean.value",
    ".norm.scale.value",
    ".norm.var.value",
]
STATE_KEYS = [
    "['count'].value",
    "['extra']['a'].value",
    "['extra']['b'][0]",
    "['items'][0].value",
    "['items'][1].value",
    "['linear']['bias'].value",
    "['linear']['kernel'].value",
    "['norm']['bias'].value",
    "['norm']['mean'].value",
    "['norm']['scale'].value",
    "['norm']['var'].value",
]


def test_flatten_with_path_keys_are_pinned():
    m = Block(nnx.Rngs(0, params=1))
    for _ in range(2):  # the first flatten makes the layouts, the second uses them
        assert keys(m) == MODULE_KEYS
        assert keys(nnx.state(m)) == STATE_KEYS
        assert keys(nnx.split(m)) == ["[1]" + k for k in STATE_KEYS]
    copy = jax.tree.map(lambda x: x, m)  # objects made by unflatten: layout inherited
    assert keys(copy) == MODULE_KEYS
    assert keys(nnx.Rngs(0, params=1)) == [
        ".default.count.value",
        ".default.key.value",
        ".params.count.value",
        ".params.key.value",
    ]
    assert keys(nnx.Param(jnp.ones(1), out_sharding=("a",))) == [".value"]
    opt = nnx.Optimizer(nnx.Linear(1, 1, rngs=nnx.Rngs(0)), optax.adam(0.1), wrt=nnx.Param)
    assert keys(opt) == [
        ".opt_state[0].count.value",
        ".opt_state[0].mu['bias'].value",
        ".opt_state[0].mu['kernel'].value",
        ".opt_state[0].nu['bias'].value",
        ".opt_state[0].nu['kernel'].value",
        ".step.value",
    ]


def test_flatten_with_path_and_flatten_agree():
    m = Block(nnx.Rngs(0))
    leaves, treedef = jax.tree.flatten(m)
    pairs, treedef_keys = jax.tree_util.tree_flatten_with_path(m)
    assert treedef == treedef_keys
    assert all(a is b for a, (_, b) in zip(leaves, pairs, strict=True))


def test_in_place_mutation_of_a_plain_list_is_seen():
    class Holder(nnx.Pytree):
        def __init__(self):
            self.layers = []  # no data yet: static

    h = Holder()
    assert jax.tree.leaves(h) == []
    h.layers.append(nnx.Param(jnp.ones(2)))  # no assignment: the layout is volatile
    assert len(jax.tree.leaves(h)) == 1
    h.layers.clear()
    assert jax.tree.leaves(h) == []


def test_assignments_change_the_layout():
    m = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    n = len(jax.tree.leaves(m))
    m.extra = jnp.ones(3)
    assert len(jax.tree.leaves(m)) == n + 1
    m.extra = 1.0  # now static
    assert len(jax.tree.leaves(m)) == n
    del m.extra
    assert len(jax.tree.leaves(m)) == n
    m.forced = nnx.data(2)
    assert [x for x in jax.tree.leaves(m) if type(x) is int] == [2]


def test_register_data_type_after_a_flatten():
    @dataclasses.dataclass(frozen=True)
    class Tag:
        value: int

    class Holder(nnx.Pytree):
        def __init__(self):
            self.tag = Tag(1)

    h = Holder()
    assert jax.tree.leaves(h) == []
    nnx.register_data_type(Tag)
    assert jax.tree.leaves(h) == [Tag(1)]


def test_unflattened_objects_keep_data_attributes():
    # As in Flax NNX 0.12, which attributes are data is decided when they are
    # assigned, not by the values a tree.map puts there.
    m = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    zeros = jax.tree.map(lambda x: 0, m)
    assert jax.tree.structure(zeros) == jax.tree.structure(m)
    assert jax.tree.leaves(zeros) == [0, 0]


def test_variable_treedef_compares_metadata_by_value():
    a = nnx.Param(jnp.ones(1), out_sharding=("x",), tag=1)
    b = nnx.Param(jnp.zeros(1), tag=1, out_sharding=("x",))
    c = nnx.Param(jnp.zeros(1), tag=2, out_sharding=("x",))
    assert jax.tree.structure(a) == jax.tree.structure(b)
    assert jax.tree.structure(a) != jax.tree.structure(c)
    assert hash(jax.tree.structure(a)) == hash(jax.tree.structure(b))
    rebuilt = jax.tree.map(lambda x: x + 1, a)
    assert type(rebuilt) is nnx.Param and rebuilt.tag == 1 and rebuilt.out_sharding == ("x",)
    rebuilt.tag = 5  # a new metadata dict: the original is untouched
    assert a.tag == 1


def _expected_leaves(obj):
    """The leaves, deciding data/static afresh from the values (the specification)."""
    forced = dict(obj._obj_kinds)
    out = []
    for name, value in sorted_items(obj):
        kind = forced.get(name) or ("data" if _is_data(value) else "static")
        if kind == "data":
            out.extend(jax.tree.leaves(value))
    return out


VALUES = st.sampled_from(
    [
        lambda: jnp.ones(2),
        lambda: nnx.Param(jnp.zeros(1)),
        lambda: 3,
        lambda: "s",
        lambda: [],
        lambda: [jnp.ones(1)],
        lambda: (1, 2),
        lambda: nnx.Linear(1, 1, rngs=nnx.Rngs(0)),
        lambda: None,
    ]
)
ACTIONS = st.lists(
    st.tuples(
        st.sampled_from(["set", "del", "append", "flatten", "copy", "data", "static"]),
        st.sampled_from(["a", "b", "c"]),
        VALUES,
    ),
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(ACTIONS)
def test_cached_layout_matches_a_fresh_decision(actions):
    class Node(nnx.Pytree):
        pass

    node = Node()
    for action, name, make in actions:
        if action == "set":
            try:
                setattr(node, name, make())
            except ValueError:  # data into an attribute made static: refused
                assert dict(node._obj_kinds).get(name) == STATIC
        elif action == "del" and name in vars(node):
            delattr(node, name)
        elif action == "append" and isinstance(vars(node).get(name), list):
            getattr(node, name).append(make())
        elif action == "copy":
            node = jax.tree.map(lambda x: x, node)
        elif action == "data":  # a kind given by assignment (bumps the structure)
            setattr(node, name, nnx.data(make()))
        elif action == "static" and not _is_data(value := make()):
            setattr(node, name, nnx.static(value))
        leaves = jax.tree.leaves(node)
        assert len(leaves) == len(_expected_leaves(node))
        assert all(a is b for a, b in zip(leaves, _expected_leaves(node), strict=True))
        assert keys(node) == keys(node)  # stable between calls


def test_treedefs_pickle_and_copy():
    import copy
    import pickle

    m = Block(nnx.Rngs(0))
    leaves, treedef = jax.tree.flatten(m)
    for again in (pickle.loads(pickle.dumps(treedef)), copy.deepcopy(treedef)):
        assert again == treedef
        rebuilt = jax.tree.unflatten(again, leaves)
        assert keys(rebuilt) == MODULE_KEYS
