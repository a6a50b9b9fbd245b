"""Tests of flaxgraph/pytreelib/objects.py: reference semantics, trace guard, pytree view, data/static."""

import copy
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx
from flaxgraph.pytreelib.objects import structure_version


class Box(nnx.Pytree):
    def __init__(self):
        self.w = nnx.Param(jnp.ones(2))
        self.raw = jnp.arange(3.0)
        self.sub = Inner()
        self.items = [nnx.BatchStat(jnp.zeros(1)), 7]
        self.features = [3, 4]
        self.name = "box"
        self.fn = jnp.tanh


class Inner(nnx.Pytree):
    def __init__(self):
        self.v = nnx.Variable(jnp.array(1.0))


# -- reference semantics ----------------------------------------------------------------------


def test_any_attribute_assignment_and_reference_semantics():
    b = Box()
    alias = b
    b.anything = {"x": [1, 2]}
    b.other = b.sub
    assert alias.anything == {"x": [1, 2]}
    b.sub.v.value = jnp.array(5.0)
    assert float(b.other.v.value) == 5.0


def test_init_is_not_needed_for_slots():
    class Bare(nnx.Pytree):
        pass

    bare = Bare()
    bare.x = 1
    assert bare.x == 1
    del bare.x
    assert not hasattr(bare, "x")


def test_delete_attribute():
    b = Box()
    del b.name
    assert "name" not in vars(b)
    with pytest.raises(AttributeError):
        del b.name


# -- trace guard --------------------------------------------------------------------------------


def test_setattr_on_captured_object_inside_jit_raises_and_object_is_unchanged():
    b = Box()
    w = b.w

    @jax.jit
    def f(x):
        b.w = nnx.Param(x)
        return x

    with pytest.raises(
        nnx.TraceContextError, match=r"Cannot set attribute 'w' of this Box: .*captured by closure"
    ):
        f(jnp.zeros(2))
    assert b.w is w
    np.testing.assert_array_equal(b.w.value, np.ones(2))


def test_inplace_on_captured_variable_inside_jit_raises():
    b = Box()

    @jax.jit
    def f(x):
        b.sub.v += x
        return x

    with pytest.raises(nnx.TraceContextError, match=r"nnx\.jit\(f\)\(model, x\)"):
        f(1.0)
    assert float(b.sub.v.value) == 1.0


def test_delattr_on_captured_object_inside_jit_raises():
    b = Box()

    @jax.jit
    def f(x):
        del b.name
        return x

    with pytest.raises(nnx.TraceContextError, match="Cannot delete attribute 'name' of this Box"):
        f(1.0)
    assert b.name == "box"


@pytest.mark.parametrize("transform", [jax.jit, jax.grad, jax.vmap])
def test_trace_guard_under_several_transforms(transform):
    b = Box()

    def f(x):
        b.extra = x
        return jnp.sum(x)

    with pytest.raises(nnx.TraceContextError):
        transform(f)(jnp.ones(2))
    assert "extra" not in vars(b)


def test_reading_captured_object_inside_jit_is_fine():
    b = Box()
    out = jax.jit(lambda x: x * b.w + b.raw[:2])(jnp.ones(2))
    np.testing.assert_array_equal(out, [1.0, 2.0])


def test_object_created_inside_trace_is_mutable_there():
    @jax.jit
    def f(x):
        b = Inner()
        b.v.value = x
        b.y = x * 2
        return b.y + b.v.value

    assert float(f(1.0)) == 3.0


def test_object_passed_through_plain_jit_is_mutable_inside_with_value_semantics():
    b = Box()

    @jax.jit
    def f(box):
        box.w.value = box.w.value + 1
        box.new = box.raw * 2
        return box

    out = f(b)
    assert out is not b and type(out) is Box
    np.testing.assert_array_equal(out.w.value, 2 * np.ones(2))
    np.testing.assert_array_equal(out.new, 2 * np.arange(3.0))
    np.testing.assert_array_equal(b.w.value, np.ones(2))  # value semantics
    assert "new" not in vars(b)
    out.w.value = jnp.zeros(2)  # the returned object belongs to the outer trace


# -- pytree view ---------------------------------------------------------------------------------


def test_data_attributes_are_children_and_the_rest_static():
    b = Box()
    keyed = jax.tree_util.tree_flatten_with_path(b)[0]
    paths = [jax.tree_util.keystr(p) for p, _ in keyed]
    assert paths == [
        ".items[0].value",
        ".items[1]",  # a container holding data is data as a whole, as in JAX
        ".raw",
        ".sub.v.value",
        ".w.value",
    ]


def test_tree_map_keeps_static_attributes_and_kinds():
    b = Box()
    out = jax.tree.map(lambda x: x + 1, b)
    assert type(out) is Box and out is not b
    assert out.features == [3, 4] and out.name == "box" and out.fn is jnp.tanh
    assert out.items[1] == 8 and type(out.items[0]) is nnx.BatchStat
    assert type(out.sub) is Inner and type(out.w) is nnx.Param
    np.testing.assert_array_equal(out.raw, np.arange(3.0) + 1)
    np.testing.assert_array_equal(b.raw, np.arange(3.0))


def test_plain_jit_does_not_retrace_for_equal_statics():
    traces = []

    @jax.jit
    def f(box):
        traces.append(1)
        return box.w.value * 2

    f(Box())
    f(Box())
    assert len(traces) == 1
    other = Box()
    other.name = "other"
    f(other)
    assert len(traces) == 2


def test_data_and_static_markers_override_pytree_classification():
    class Marked(nnx.Pytree):
        def __init__(self):
            self.step = nnx.data(3)
            self.table = nnx.static((1, 2))
            self.w = jnp.ones(1)

    m = Marked()
    assert m.step == 3 and m.table == (1, 2)  # the marker is unwrapped
    leaves = jax.tree.leaves(m)
    assert leaves == [3, m.w]
    out = jax.tree.map(lambda x: x + 1, m)
    assert out.step == 4 and out.table is m.table


def test_data_in_a_static_attribute_is_an_error_at_assignment():
    # As in Flax NNX 0.12.8 (module_test PytreeTest); the object is left unchanged.
    class Marked(nnx.Pytree):
        def __init__(self):
            self.n = nnx.static(3)

    m = Marked()
    with pytest.raises(ValueError, match=r"Found data in value of type 'ArrayImpl' annotated"):
        m.table = nnx.static(jnp.ones(2))
    with pytest.raises(ValueError, match=r"Found data on value of type 'list' assigned to static"):
        m.n = ["hi", jnp.ones(1)]
    assert m.n == 3 and "table" not in vars(m)
    m.n = nnx.data(jnp.ones(1))  # an explicit nnx.data changes the kind
    assert len(jax.tree.leaves(m)) == 1


def test_markers_in_graph_view():
    class Marked(nnx.Pytree):
        def __init__(self):
            self.step = nnx.data(3)
            self.count = nnx.static(5)

    m = Marked()
    graphdef, state = nnx.split(m)
    assert state.to_pure_dict() == {"step": 3}
    new = nnx.merge(graphdef, nnx.State({"step": 4}))
    assert new.step == 4 and new.count == 5
    assert jax.tree.leaves(new) == [4]  # kinds survive the merge


def test_data_marked_none_is_no_state_leaf():
    # found by the differential oracle (tests/oracle): None is JAX's empty pytree, so
    # Flax NNX 0.12.8 has no State leaf for `nnx.data(None)`; neither do we.
    class Marked(nnx.Module):
        def __init__(self):
            self.head = nnx.data(None)
            self.w = nnx.Param(jnp.ones(1))

    m = Marked()
    graphdef, state = nnx.split(m)
    assert list(state.to_pure_dict()) == ["w"]
    assert nnx.merge(graphdef, state).head is None
    assert jax.tree.leaves(m) == [m.w.value]


def test_static_marker_on_unhashable_value_is_rejected_where_the_graphdef_is_hashed():
    class Marked(nnx.Pytree):
        def __init__(self):
            self.table = nnx.static([1, 2])

    graphdef, _ = nnx.split(Marked())  # split/merge do not need a hashable GraphDef
    with pytest.raises(nnx.StaticAttributeError, match=r"node\.table is a list"):
        hash(graphdef)  # a cache key (jit) does


def test_reassigning_marked_attribute_keeps_kind_until_deleted():
    class Marked(nnx.Pytree):
        pass

    m = Marked()
    m.step = nnx.data(1)
    m.step = 2
    assert jax.tree.leaves(m) == [2]
    del m.step
    m.step = 2
    assert jax.tree.leaves(m) == []


def test_nnx_list_pytree_keypaths():
    items = nnx.List([nnx.Param(jnp.ones(1)), jnp.zeros(2)])
    keyed = jax.tree_util.tree_flatten_with_path(items)[0]
    assert [jax.tree_util.keystr(p) for p, _ in keyed] == ["[0].value", "[1]"]
    out = jax.tree.map(lambda x: x + 1, items)
    assert type(out) is nnx.List and len(out) == 2


# -- structure version ---------------------------------------------------------------------------


def test_structure_version_tracks_structure_not_values():
    b = Box()
    v0 = structure_version(b)
    b.w.value = jnp.zeros(2)
    b.w += 1
    b.raw = jnp.ones(3)  # array -> array: same structure
    b.w = b.w  # same object
    assert structure_version(b) == v0
    b.extra = 1
    v1 = structure_version(b)
    assert v1 > v0
    b.w = nnx.Param(jnp.ones(2))  # another Variable
    v2 = structure_version(b)
    assert v2 > v1
    del b.extra
    assert structure_version(b) > v2


@pytest.mark.parametrize("start", ["empty", "with_attribute"])
def test_structure_version_moves_when_a_transform_writes_new_attributes_back(start):
    # A transform's write-back sets the attributes of the caller's object in one
    # step; giving an object without attributes its first one is a change of
    # structure too (the fast path's checks rely on it).
    obj = nnx.Pytree()
    if start == "with_attribute":
        obj.n = 1
    v0 = structure_version(obj)

    def add(o):
        o.w = nnx.Param(jnp.ones(2))

    nnx.jit(add)(obj)
    assert isinstance(obj.w, nnx.Param)
    assert structure_version(obj) != v0


@pytest.mark.parametrize("built", ["empty", "with_attribute"])
def test_structure_version_moves_for_an_object_merge_built(built):
    # merge fills the objects it creates without moving their version; an object
    # it built empty, later given its first attribute by a write-back, still moves.
    source = nnx.Pytree()
    if built == "with_attribute":
        source.n = 1
    obj = nnx.merge(*nnx.split(source))
    v0 = structure_version(obj)

    def add(o):
        o.w = nnx.Param(jnp.ones(2))

    nnx.jit(add)(obj)
    assert isinstance(obj.w, nnx.Param)
    assert structure_version(obj) != v0


# -- copy / pickle ------------------------------------------------------------------------------


def test_deepcopy_and_pickle_preserve_sharing():
    b = Box()
    b.alias = b.sub
    for other in (copy.deepcopy(b), pickle.loads(pickle.dumps(Inner()))):
        assert type(other) in (Box, Inner)
    c = copy.deepcopy(b)
    assert c.alias is c.sub and c.sub is not b.sub
    c.sub.v.value = jnp.array(9.0)
    assert float(b.sub.v.value) == 1.0
    c.new = 1  # copies are usable in the current trace


def test_marked_kinds_survive_copy():
    class Marked(nnx.Pytree):
        pass

    m = Marked()
    m.step = nnx.data(1)
    assert jax.tree.leaves(copy.deepcopy(m)) == [1]


# -- Pytree and Object (Flax NNX 0.12) ---------------------------------------------------------


def test_object_is_a_graph_node_but_not_a_pytree():
    class Counter(nnx.Object):
        def __init__(self):
            self.n = nnx.Variable(jnp.array(0))

    c = Counter()
    assert issubclass(nnx.Object, nnx.Pytree) and not issubclass(nnx.Module, nnx.Object)
    assert jax.tree.leaves(c) == [c]  # one opaque leaf
    graphdef, state = nnx.split(c)  # the graph view is unchanged
    assert list(state) == ["n"] and type(nnx.merge(graphdef, state)) is Counter

    class Sub(Counter):  # the choice is inherited
        pass

    assert jax.tree.leaves(Sub()) != []
    assert len(jax.tree.leaves(Sub())) == 1 and isinstance(jax.tree.leaves(Sub())[0], Sub)


def test_pytree_false_and_back():
    class Opaque(nnx.Pytree, pytree=False):
        def __init__(self):
            self.w = jnp.ones(1)

    class Again(Opaque, pytree=True):
        pass

    o, a = Opaque(), Again()
    assert jax.tree.leaves(o) == [o]
    assert len(jax.tree.leaves(a)) == 1 and jax.tree.leaves(a)[0] is a.w


def test_object_matches_flax_class_relations():
    fnnx = pytest.importorskip("flax.nnx")
    for lib in (nnx, fnnx):
        assert issubclass(lib.Object, lib.Pytree)
        assert not issubclass(lib.Module, lib.Object) and issubclass(lib.Module, lib.Pytree)


def test_marks_in_a_pytree_false_object_are_dropped_as_in_flax():
    """A ``pytree=False`` object classifies each attribute by its value, marks dropped:
    ``nnx.data(1.5)`` stays static (a Python float inside ``nnx.jit``), a list marked
    ``nnx.static`` holding an array is walked. Compared with the real Flax NNX 0.12.8."""
    fnnx = pytest.importorskip("flax.nnx")

    def observe(lib):
        class Opaque(lib.Module, pytree=False):
            def __init__(self):
                self.scale = lib.data(1.5)
                self.arrays = lib.static([jnp.ones(2)])
                self.name = lib.data("x")

        model = Opaque()
        graphdef, state = lib.split(model)
        paths = sorted(tuple(map(str, path)) for path, _ in lib.to_flat_state(state))

        @lib.jit
        def read(m):
            return m.arrays[0] * 2 if isinstance(m.scale, float) and m.scale > 1 else m.arrays[0]

        merged = lib.merge(graphdef, state)
        return paths, merged.scale, merged.name, np.asarray(read(model)).tolist()

    assert observe(nnx) == observe(fnnx) == ([("arrays", "0")], 1.5, "x", [2.0, 2.0])
