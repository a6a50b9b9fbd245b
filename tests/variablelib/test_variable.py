"""Tests of flaxgraph/variablelib/variable.py: Variable, its kinds, operators, metadata."""

import copy
import operator
import pickle
import typing
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx

KINDS = [nnx.Param, nnx.BatchStat, nnx.Cache, nnx.Intermediate, nnx.Perturbation]


# -- kinds -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_builtin_kinds_are_variables(kind):
    v = kind(jnp.ones(2))
    assert isinstance(v, nnx.Variable)
    assert v.type is kind
    # Only Perturbation has a parent kind: it is an Intermediate (as in Flax NNX 0.12).
    parents = {nnx.Perturbation: {nnx.Intermediate}}.get(kind, set())
    assert {k for k in KINDS if k is not kind and isinstance(v, k)} == parents


def test_user_subclass_is_a_new_kind():
    class Count(nnx.Variable):
        pass

    c = Count(jnp.array(0))
    assert isinstance(c, nnx.Variable) and not isinstance(c, nnx.Param)
    assert c.type is Count
    # and it is a pytree with its kind kept
    out = jax.tree.map(lambda x: x + 1, c)
    assert type(out) is Count and int(out.value) == 1


# -- value -----------------------------------------------------------------------------


def test_value_read_write():
    x = jnp.arange(3.0)
    v = nnx.Param(x)
    assert v.value is x and v.raw_value is x and v.get_value() is x
    v.value = x * 2
    np.testing.assert_array_equal(v.value, np.arange(3.0) * 2)
    v.set_value(jnp.zeros(3))
    np.testing.assert_array_equal(v.value, np.zeros(3))


def test_setting_a_variable_as_value_unboxes_it():
    v = nnx.Param(1.0)
    v.value = nnx.BatchStat(5.0)
    assert v.value == 5.0 and not isinstance(v.raw_value, nnx.Variable)


def test_ellipsis_getitem_and_setitem():
    v = nnx.Param(jnp.arange(4.0))
    np.testing.assert_array_equal(v[...], np.arange(4.0))
    v[...] = jnp.ones(4)
    np.testing.assert_array_equal(v.value, np.ones(4))


def test_indexed_setitem_on_jax_array_is_functional_update():
    x = jnp.zeros(3)
    v = nnx.Param(x)
    v[1] = 7.0
    np.testing.assert_array_equal(v.value, [0.0, 7.0, 0.0])
    np.testing.assert_array_equal(x, np.zeros(3))  # the old array is untouched


def test_setitem_on_numpy_value_is_in_place():
    v = nnx.Variable(np.zeros(3))
    v[2] = 4.0
    np.testing.assert_array_equal(v.value, [0.0, 0.0, 4.0])


def test_setitem_on_dict_value():
    v = nnx.Variable({"a": 1})
    v["b"] = 2
    assert v.value == {"a": 1, "b": 2}


def test_getitem_forwards():
    v = nnx.Param(jnp.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(v[1], np.arange(3.0, 6.0))
    np.testing.assert_array_equal(v[:, 0], [0.0, 3.0])


# -- forwarding ----------------------------------------------------------------------------


def test_shape_dtype_and_value_attributes_forward():
    x = jnp.ones((2, 3), dtype=jnp.float16)
    v = nnx.Param(x)
    assert v.shape == (2, 3) and v.dtype == jnp.float16 and v.ndim == 2
    assert v.T.shape == (3, 2)
    assert float(v.sum()) == 6.0


def test_linear_layer_expression():
    x = jnp.arange(3.0)
    kernel = nnx.Param(jnp.arange(12.0).reshape(3, 4))
    bias = nnx.Param(jnp.ones(4))
    expected = x @ jnp.arange(12.0).reshape(3, 4) + jnp.ones(4)
    np.testing.assert_allclose(x @ kernel + bias, expected)
    np.testing.assert_allclose(jnp.dot(x, kernel) + bias, expected)


BINARY = [
    operator.add,
    operator.sub,
    operator.mul,
    operator.truediv,
    operator.floordiv,
    operator.mod,
    operator.pow,
]
INT_BINARY = [operator.and_, operator.or_, operator.xor, operator.lshift, operator.rshift]
COMPARE = [operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne]


@pytest.mark.parametrize("op", BINARY + COMPARE)
def test_binary_operators_forward_both_ways(op):
    a, b = jnp.array([1.0, 2.0, 5.0]), jnp.array([2.0, 2.0, 3.0])
    np.testing.assert_allclose(op(nnx.Param(a), b), op(a, b))
    np.testing.assert_allclose(op(a, nnx.Param(b)), op(a, b))
    np.testing.assert_allclose(op(nnx.Param(a), nnx.Param(b)), op(a, b))
    np.testing.assert_allclose(op(3.0, nnx.Param(b)), op(3.0, b))


@pytest.mark.parametrize("op", INT_BINARY)
def test_integer_operators_forward(op):
    a, b = jnp.array([1, 6, 12]), jnp.array([1, 2, 3])
    np.testing.assert_array_equal(op(nnx.Variable(a), b), op(a, b))
    np.testing.assert_array_equal(op(a, nnx.Variable(b)), op(a, b))
    np.testing.assert_array_equal(op(5, nnx.Variable(b)), op(5, b))


def test_matmul_both_ways():
    a, b = jnp.arange(6.0).reshape(2, 3), jnp.arange(3.0)
    np.testing.assert_allclose(nnx.Param(a) @ b, a @ b)
    np.testing.assert_allclose(a @ nnx.Param(b), a @ b)


def test_divmod_both_ways():
    a = jnp.array([7.0, 9.0])
    q, r = divmod(nnx.Param(a), 4.0)
    np.testing.assert_allclose(q, [1.0, 2.0])
    np.testing.assert_allclose(r, [3.0, 1.0])
    q, r = divmod(20.0, nnx.Param(a))
    np.testing.assert_allclose(q, [2.0, 2.0])
    np.testing.assert_allclose(r, [6.0, 2.0])


def test_unary_operators_forward():
    a = jnp.array([-1.0, 2.0])
    v = nnx.Param(a)
    np.testing.assert_allclose(-v, -a)
    np.testing.assert_allclose(+v, a)
    np.testing.assert_allclose(abs(v), jnp.abs(a))
    np.testing.assert_array_equal(~nnx.Variable(jnp.array([1, 0])), ~jnp.array([1, 0]))


def test_scalar_conversions_and_sequence_protocol():
    assert int(nnx.Variable(jnp.array(3))) == 3
    assert float(nnx.Variable(jnp.array(2.5))) == 2.5
    assert complex(nnx.Variable(jnp.array(1.5))) == 1.5 + 0j
    assert [10, 11, 12][nnx.Variable(jnp.array(2))] == 12
    with pytest.raises(TypeError):  # as in Flax 0.12.8: truth is len(), a scalar has none
        bool(nnx.Variable(jnp.array(0)))
    v = nnx.Param(jnp.arange(3.0))
    assert len(v) == 3
    assert [float(x) for x in v] == [0.0, 1.0, 2.0]


def test_array_protocols():
    v = nnx.Param(jnp.arange(3.0))
    np.testing.assert_array_equal(np.asarray(v), np.arange(3.0))
    assert np.asarray(v, dtype=np.int32).dtype == np.int32
    np.testing.assert_array_equal(jnp.asarray(v), np.arange(3.0))
    assert float(jnp.sum(v)) == 3.0
    assert v.__jax_array__() is v.value


def test_variables_hash_by_identity_despite_elementwise_eq():
    a, b = nnx.Param(1.0), nnx.Param(1.0)
    assert hash(a) != hash(b) or a is b
    d = {a: "a", b: "b"}
    assert d[a] == "a" and d[b] == "b"


# -- in-place operators ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "start", "other", "expected"),
    [
        (operator.iadd, 3.0, 2.0, 5.0),
        (operator.isub, 3.0, 2.0, 1.0),
        (operator.imul, 3.0, 2.0, 6.0),
        (operator.itruediv, 3.0, 2.0, 1.5),
        (operator.ifloordiv, 7.0, 2.0, 3.0),
        (operator.imod, 7.0, 4.0, 3.0),
        (operator.ipow, 3.0, 2.0, 9.0),
    ],
)
def test_inplace_operators_keep_the_same_variable(op, start, other, expected):
    v = nnx.Param(jnp.array(start))
    alias = v
    result = op(v, other)
    assert result is alias
    assert float(alias.value) == expected


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        (operator.iand, 12 & 10),
        (operator.ior, 12 | 10),
        (operator.ixor, 12 ^ 10),
        (operator.ilshift, 12 << 10),
        (operator.irshift, 12 >> 10),
    ],
)
def test_inplace_integer_operators(op, expected):
    v = nnx.Variable(jnp.array(12))
    assert op(v, 10) is v
    assert int(v.value) == expected


def test_inplace_matmul():
    v = nnx.Param(jnp.eye(2) * 2)
    v @= jnp.array([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_allclose(v.value, [[2.0, 4.0], [6.0, 8.0]])


def test_inplace_with_variable_operand():
    v = nnx.Param(jnp.array(1.0))
    v += nnx.Param(jnp.array(2.0))
    assert float(v.value) == 3.0 and not isinstance(v.raw_value, nnx.Variable)


def test_attribute_inplace_keeps_variable_and_all_references_see_it():
    class Weights(nnx.Module):
        def __init__(self):
            self.count = nnx.Variable(jnp.array(0))

    weights = Weights()
    count = weights.count
    weights.count += 1
    weights.count += 1
    assert weights.count is count
    assert int(count.value) == 2


def test_ellipsis_inplace():
    v = nnx.Param(jnp.ones(3))
    alias = v
    v[...] += jnp.arange(3.0)
    assert v is alias
    np.testing.assert_allclose(alias.value, 1.0 + np.arange(3.0))


# -- metadata -----------------------------------------------------------------------------


def test_metadata_from_kwargs_readable_as_attributes():
    v = nnx.Param(jnp.ones((2, 2)), out_sharding=("a", None), note="x")
    assert v.out_sharding == ("a", None)
    assert v.note == "x"
    assert v.get_metadata(exclude_required=True) == {"out_sharding": ("a", None), "note": "x"}
    assert v.get_metadata("note") == "x"
    with pytest.raises(KeyError, match="absent"):
        v.get_metadata("absent")
    assert v.get_metadata("absent", 3) == 3


def test_get_metadata_returns_a_copy():
    v = nnx.Param(1.0, a=1)
    v.get_metadata()["a"] = 2
    assert v.a == 1


def test_metadata_shadows_value_attributes():
    v = nnx.Param(jnp.ones(3), shape="meta")
    # `shape` is found in metadata first
    assert v.shape == "meta"


def test_attribute_assignment_sets_metadata_and_delete_removes():
    v = nnx.Param(1.0)
    v.lr_scale = 0.5
    assert v.get_metadata(exclude_required=True) == {"lr_scale": 0.5}
    del v.lr_scale
    assert v.get_metadata(exclude_required=True) == {}
    with pytest.raises(AttributeError, match="lr_scale"):
        del v.lr_scale


def test_set_metadata_forms():
    v = nnx.Param(1.0, a=1)
    v.set_metadata("b", 2)
    assert v.get_metadata(exclude_required=True) == {"a": 1, "b": 2}
    v.set_metadata(c=3)
    assert v.get_metadata(exclude_required=True) == {"a": 1, "b": 2, "c": 3}
    v.set_metadata({"z": 0})
    assert v.get_metadata(exclude_required=True) == {"z": 0}


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [(("a", 1, 2), {}), (("a", 1), {"b": 2}), (({"a": 1},), {"b": 2}), ((3,), {})],
)
def test_set_metadata_bad_arguments(args, kwargs):
    v = nnx.Param(1.0)
    with pytest.raises(TypeError, match="set_metadata takes"):
        v.set_metadata(*args, **kwargs)
    assert v.get_metadata(exclude_required=True) == {}


def test_set_metadata_does_not_mutate_shared_dict():
    v = nnx.Param(1.0, a=1)
    c = v.copy()
    v.set_metadata("a", 2)
    assert c.a == 1


def test_internal_slots_cannot_be_set_as_attributes():
    v = nnx.Param(1.0)
    with pytest.raises(AttributeError, match=r"through `\.value` only"):
        v.raw_value = 2.0
    with pytest.raises(AttributeError):
        v._var_metadata = {}
    assert v.value == 1.0


def test_missing_attribute_raises_attribute_error():
    v = nnx.Param(jnp.ones(2))
    with pytest.raises(AttributeError, match="nope"):
        _ = v.nope
    assert not hasattr(v, "__missing_dunder__")


def test_construct_from_variable_merges_metadata():
    src = nnx.Param(jnp.ones(2), a=1, b=2)
    v = nnx.BatchStat(src, b=3)
    assert type(v) is nnx.BatchStat
    assert v.value is src.value
    assert v.get_metadata(exclude_required=True) == {"a": 1, "b": 3}


# -- replace / copy ------------------------------------------------------------------------


def test_replace_value_and_metadata():
    v = nnx.Param(jnp.ones(2), a=1)
    r = v.replace(jnp.zeros(2), b=2)
    assert type(r) is nnx.Param and r is not v
    np.testing.assert_array_equal(r.value, np.zeros(2))
    assert r.get_metadata(exclude_required=True) == {"a": 1, "b": 2}
    np.testing.assert_array_equal(v.value, np.ones(2))
    assert v.get_metadata(exclude_required=True) == {"a": 1}


def test_replace_metadata_only_keeps_value():
    x = jnp.ones(2)
    r = nnx.Cache(x).replace(a=3)
    assert r.value is x and r.a == 3 and type(r) is nnx.Cache


def test_copy_is_independent():
    v = nnx.BatchStat(jnp.ones(2), a=1)
    c = v.copy()
    assert type(c) is nnx.BatchStat and c is not v and c.value is v.value
    c.value = jnp.zeros(2)
    c.a = 5
    np.testing.assert_array_equal(v.value, np.ones(2))
    assert v.a == 1


def test_copy_module_copy_deepcopy_and_pickle():
    v = nnx.Param(jnp.arange(3.0), out_sharding=("a",))
    for other in (copy.copy(v), copy.deepcopy(v), pickle.loads(pickle.dumps(v))):
        assert type(other) is nnx.Param and other is not v
        np.testing.assert_array_equal(other.value, np.arange(3.0))
        assert other.get_metadata(exclude_required=True) == {"out_sharding": ("a",)}
        other.value = jnp.zeros(3)  # usable (trace recorded)
    np.testing.assert_array_equal(v.value, np.arange(3.0))


# -- axis metadata --------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["sharding", "sharding_names"])
def test_older_sharding_keys_are_stored_as_out_sharding_with_a_deprecation_warning(key):
    # As in Flax 0.12 (variablelib's remapping of `sharding`/`sharding_names`): every
    # way of giving metadata stores the names under out_sharding and warns.
    match = f"{key!r} is deprecated"
    with pytest.deprecated_call(match=match):
        v = nnx.Param(jnp.ones((2, 3)), **{key: ("a", None)}, note=1)
    assert v.get_metadata(exclude_required=True) == {"out_sharding": ("a", None), "note": 1}
    # `.sharding` is no metadata now: it reads the names, with a deprecation warning
    # (guides/from_flax.md: the Axis Metadata FLIP's and the guide's read)
    with pytest.deprecated_call(match="out_sharding"):
        assert v.sharding == ("a", None)
    with pytest.deprecated_call(match=match):
        v.set_metadata(key, (None, "b"))
    assert v.out_sharding == (None, "b") and not v.has_metadata(key)
    with pytest.deprecated_call(match=match):
        v.set_metadata(**{key: ("c", None)})
    assert v.out_sharding == ("c", None)
    with pytest.deprecated_call(match=match):
        v.set_metadata({key: ("d", None), "note": 2})
    assert v.get_metadata(exclude_required=True) == {"out_sharding": ("d", None), "note": 2}
    with pytest.deprecated_call(match=match):
        w = v.replace(**{key: ("e", None)})
    assert w.out_sharding == ("e", None) and v.out_sharding == ("d", None)
    with pytest.deprecated_call(match=match):
        init = nnx.with_metadata(jax.nn.initializers.ones, **{key: ("f", None)})
        p = nnx.Param(init(jax.random.key(0), (2, 3)))
    assert p.get_metadata(exclude_required=True) == {"out_sharding": ("f", None)}


def test_out_sharding_warns_nothing_and_keeps_its_key():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        v = nnx.Param(jnp.ones((2, 3)), out_sharding=("a", None))
        v.set_metadata(out_sharding=("b", None))
        w = v.replace(out_sharding=("c", None)).copy(out_sharding=("d", None))
    assert (v.out_sharding, w.out_sharding) == (("b", None), ("d", None))
    assert set(w.get_metadata(exclude_required=True)) == {"out_sharding"}


def test_add_and_remove_axis_update_out_sharding():
    v = nnx.Param(jnp.ones((2, 3)), out_sharding=("a", "b"))
    v.add_axis(0, {nnx.PARTITION_NAME: "batch"})
    assert v.out_sharding == ("batch", "a", "b")
    v.remove_axis(0, {nnx.PARTITION_NAME: "batch"})
    assert v.out_sharding == ("a", "b")


def test_add_axis_negative_index_and_no_name():
    v = nnx.Param(jnp.ones((2, 3)), out_sharding=("a", "b"))
    v.add_axis(-1, {})
    assert v.out_sharding == ("a", "b", None)
    v.remove_axis(-1, {})
    assert v.out_sharding == ("a", "b")
    v.add_axis(1, {nnx.PARTITION_NAME: "m"})
    assert v.out_sharding == ("a", "m", "b")


def test_axis_methods_ignore_missing_sharding():
    v = nnx.Param(jnp.ones(2), other=1)
    v.add_axis(0, {nnx.PARTITION_NAME: "x"})
    v.remove_axis(0, {})
    assert v.get_metadata(exclude_required=True) == {"other": 1}


# -- trace guard -----------------------------------------------------------------------------


def test_set_value_from_another_trace_raises_and_leaves_value():
    v = nnx.Param(jnp.ones(2))

    @jax.jit
    def f(x):
        v.value = x
        return x

    with pytest.raises(nnx.TraceContextError, match=r"Cannot set the value of Param\(shape=\(2,\)"):
        f(jnp.zeros(2))
    np.testing.assert_array_equal(v.value, np.ones(2))


@pytest.mark.parametrize(
    "mutate",
    [
        lambda v, x: v.__iadd__(x),
        lambda v, x: v.__setitem__(0, x[0]),
        lambda v, x: v.__setitem__(..., x),
        lambda v, x: setattr(v, "tag", "x"),
        lambda v, x: v.set_metadata(a=1),
        lambda v, x: delattr(v, "meta"),
    ],
)
def test_every_mutation_from_another_trace_raises(mutate):
    v = nnx.Param(jnp.ones(2), meta=0)

    @jax.jit
    def f(x):
        mutate(v, x)
        return x

    with pytest.raises(nnx.TraceContextError, match="captured by closure"):
        f(jnp.zeros(2))
    np.testing.assert_array_equal(v.value, np.ones(2))
    assert v.get_metadata(exclude_required=True) == {"meta": 0}


def test_reading_from_another_trace_is_allowed():
    v = nnx.Param(jnp.ones(2))
    out = jax.jit(lambda x: x + v)(jnp.ones(2))
    np.testing.assert_array_equal(out, 2 * np.ones(2))


def test_variable_created_inside_trace_is_mutable_there():
    @jax.jit
    def f(x):
        v = nnx.Param(x)
        v += 1
        v.value = v.value * 2
        return v.value

    np.testing.assert_array_equal(f(jnp.ones(2)), 4 * np.ones(2))


# -- pytree ---------------------------------------------------------------------------------------


def test_variable_is_a_pytree_with_metadata_static():
    v = nnx.Param(jnp.ones(2), out_sharding=("a",))
    leaves, treedef = jax.tree.flatten(v)
    assert len(leaves) == 1 and leaves[0] is v.value
    out = jax.tree.unflatten(treedef, [jnp.zeros(2)])
    assert type(out) is nnx.Param and out.out_sharding == ("a",)
    ((path, _),) = jax.tree_util.tree_flatten_with_path(v)[0]
    assert jax.tree_util.keystr(path) == ".value"


def test_variable_through_jit_and_grad():
    v = nnx.Param(jnp.arange(3.0))
    out = jax.jit(lambda p: p.replace(p.value * 2))(v)
    assert type(out) is nnx.Param
    np.testing.assert_allclose(out.value, 2 * np.arange(3.0))
    g = jax.grad(lambda p: jnp.sum(p.value**2))(v)
    assert type(g) is nnx.Param
    np.testing.assert_allclose(g.value, 2 * np.arange(3.0))


def test_different_metadata_gives_different_treedef():
    a = jax.tree.structure(nnx.Param(1.0, a=1))
    b = jax.tree.structure(nnx.Param(1.0, a=2))
    c = jax.tree.structure(nnx.BatchStat(1.0, a=1))
    assert a != b and a != c
    assert a == jax.tree.structure(nnx.Param(2.0, a=1))


# -- the 0.12 metadata API ---------------------------------------------------------------


def test_get_metadata_missing_key_names_the_fix():
    v = nnx.Param(1.0, a=1)
    with pytest.raises(KeyError, match=r"get_metadata\('b', None\)"):
        v.get_metadata("b")
    assert v.get_metadata("b", None) is None


def test_has_and_del_metadata():
    v = nnx.Param(1.0, a=1)
    assert v.has_metadata("a") and not v.has_metadata("b")
    v.del_metadata("a")
    assert not v.has_metadata("a")
    with pytest.raises(AttributeError):
        v.del_metadata("a")


def test_flags_cannot_be_set_or_deleted_as_metadata():
    v = nnx.Param(jnp.ones(2), ref=True, note=0)
    for call in (
        lambda: v.set_metadata(ref=False),
        lambda: v.set_metadata("hijax", True),
        lambda: v.set_metadata(mutable=False),
        lambda: v.del_metadata("ref"),
        lambda: v.replace(ref=False),
    ):
        with pytest.raises(ValueError, match="with_vars"):
            call()
    assert v.get_metadata() == {"note": 0, "ref": True, "hijax": False, "eager_sharding": True}
    v.set_metadata(ref=True, note=1)  # an unchanged flag is accepted
    assert v.get_metadata() == {"note": 1, "ref": True, "hijax": False, "eager_sharding": True}


def test_set_metadata_mapping_keeps_the_flags():
    v = nnx.Param(jnp.ones(2), ref=True, mutable=False, a=1)
    v.set_metadata({"b": 2})
    assert v.get_metadata() == {
        "b": 2,
        "ref": True,
        "mutable": False,
        "hijax": False,
        "eager_sharding": True,
    }


def test_replace_keeps_flags_with_a_new_ref():
    v = nnx.Param(jnp.ones(2), ref=True, a=1)
    r = v.replace(value=jnp.zeros(2), a=2)
    assert r.ref and r.get_raw_value() is not v.get_raw_value()
    np.testing.assert_array_equal(r[...], np.zeros(2))
    np.testing.assert_array_equal(v[...], np.ones(2))
    assert r.a == 2 and v.a == 1


def test_get_and_set_value_with_index():
    for flags in ({}, {"ref": True}):
        v = nnx.Param(jnp.arange(4.0), **flags)
        assert float(v.get_value(index=2)) == 2.0
        v.set_value(9.0, index=1)
        np.testing.assert_array_equal(v[...], [0.0, 9.0, 2.0, 3.0])


def test_metadata_api_matches_flax():
    flax_nnx = pytest.importorskip("flax.nnx")
    ours, theirs = nnx.Param(jnp.ones(2), a=1), flax_nnx.Param(jnp.ones(2), a=1)
    for v in (ours, theirs):
        v.set_metadata("b", 2)
        v.set_metadata(c=3)
        v.del_metadata("b")
    excluded = theirs.get_metadata(exclude_required=True)
    assert ours.get_metadata(exclude_required=True) == excluded == {"a": 1, "c": 3}
    for v in (ours, theirs):
        with pytest.raises(KeyError):
            v.get_metadata("missing")
        assert v.get_metadata("missing", 7) == 7
        r = v.replace(jnp.zeros(2), d=4)
        assert type(r).__name__ == "Param" and r.get_metadata("d") == 4
        np.testing.assert_array_equal(r[...], np.zeros(2))
        v.set_metadata({"z": 1})
        assert v.get_metadata(exclude_required=True) == {"z": 1}


def test_calling_a_variable_calls_its_value():
    import typing

    class Scale(typing.NamedTuple):
        k: int

        def __call__(self, x):
            return self.k * x

    assert nnx.Param(Scale(2))(3) == 6
    with pytest.raises(TypeError, match="'Param' object is not callable: its value is a"):
        nnx.Param(jnp.ones(2))(1)


def test_copy_with_a_value_and_metadata_updates():
    v = nnx.Param(jnp.ones(2), note="a")
    w = v.copy(jnp.zeros(2), note="b")
    assert type(w) is nnx.Param and w.note == "b" and v.note == "a"
    np.testing.assert_array_equal(w.value, jnp.zeros(2))
    r = v.copy(ref=True)
    assert r.ref and not v.ref and r.note == "a"
    np.testing.assert_array_equal(r[...], v[...])
    assert not r.copy(ref=False).ref


def test_from_metadata_round_trips_get_metadata():
    v = nnx.Param(jnp.ones(2), note="x")
    w = nnx.Param.from_metadata(jnp.zeros(2), v.get_metadata())
    assert type(w) is nnx.Param and w.note == "x" and not w.hijax
    assert w.get_metadata() == v.get_metadata()
    assert nnx.Param.from_metadata(1.0, {"hijax": True}).hijax


def test_hijax_variable_is_an_isinstance_check():
    from flaxgraph.variablelib import HijaxVariable

    assert isinstance(nnx.Param(jnp.ones(2), hijax=True), HijaxVariable)
    assert not isinstance(nnx.Param(jnp.ones(2)), HijaxVariable)
    assert not isinstance(jnp.ones(2), HijaxVariable)
    with pytest.raises(TypeError, match="no separate HijaxVariable class"):
        HijaxVariable(1.0)


def test_shape_resolves_in_one_place():
    """``shape``: a ``shape`` metadata entry, else the storage's shape (a Ref's without
    reading its content); a value without one raises AttributeError naming its type."""
    assert nnx.Param(jnp.ones((2, 3))).shape == (2, 3)
    assert nnx.Param(jnp.ones((2, 3)), shape="meta").shape == "meta"
    assert nnx.Param(jnp.ones((4,)), ref=True).shape == (4,)
    v = nnx.Param([1, 2])
    assert not hasattr(v, "shape")
    with pytest.raises(AttributeError, match=r"Param.shape .*\(list\)"):
        v.shape  # noqa: B018


def test_variable_members_live_on_the_class_itself():
    """Variable has no mixin bases: every public member is defined in its own body."""
    assert nnx.Variable.__mro__ == (nnx.Variable, typing.Generic, object)
    own = vars(nnx.Variable)
    for name in (
        "get_metadata",
        "set_metadata",
        "copy",
        "replace",
        "update_from_state",
        "add_axis",
        "remove_axis",
        "shape",
        "__getitem__",
        "__add__",
        "__iadd__",
    ):
        assert name in own, name


@pytest.mark.parametrize("value", [2.7, -2.5, 3, np.float64(1.5), jnp.array(-0.5)])
def test_rounding_functions_apply_to_the_value(value):
    """``math.trunc/floor/ceil`` and ``round`` of a Variable are those of its value
    (Flax NNX 0.12's ``__trunc__``/``__floor__``/``__ceil__``/``__round__``)."""
    import math

    def outcome(f, x):
        try:
            return float(f(x))
        except TypeError as e:  # e.g. math.trunc of a JAX array: no __trunc__
            return type(e)

    v = nnx.Param(value)
    for f in (math.trunc, math.floor, math.ceil):
        assert outcome(f, v) == outcome(f, value)
    assert float(round(v, 1)) == float(round(value, 1))
    assert float(round(v)) == float(round(value, 0))
