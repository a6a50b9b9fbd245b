"""Tests of Ref-backed Variables (flaxgraph/variablelib/refs.py and the Ref storage of
flaxgraph/variablelib/variable.py): ``ref=True``, ``hijax=True``, ``mutable=False``."""

import copy
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import flaxgraph as nnx

FLAG_SETS = [dict(ref=True), dict(hijax=True), dict(ref=True, hijax=True)]


# -- construction and storage ------------------------------------------------------------


@pytest.mark.parametrize("flags", FLAG_SETS)
def test_value_lives_in_a_ref(flags):
    v = nnx.Param(jnp.arange(3.0), **flags)
    assert isinstance(v.get_raw_value(), jax.Ref)
    assert v.ref is bool(flags.get("ref")) and v.hijax is bool(flags.get("hijax"))
    assert v.mutable
    for read in (v[...], v.value, v.get_value(), v.raw_value):
        assert isinstance(read, jax.Array) and not isinstance(read, jax.Ref)
        np.testing.assert_array_equal(read, np.arange(3.0))


def test_plain_variable_has_no_ref_and_no_flags():
    v = nnx.Param(jnp.ones(2))
    assert (v.ref, v.hijax, v.mutable) == (False, False, True)
    assert v.get_raw_value() is v.raw_value
    assert v.get_metadata(exclude_required=True) == {}


def test_flags_appear_in_metadata_only_when_not_default():
    v = nnx.Param(jnp.ones(2), ref=True, mutable=False, note=1)
    assert v.get_metadata() == {
        "note": 1,
        "ref": True,
        "mutable": False,
        "hijax": False,
        "eager_sharding": True,
    }
    assert v.get_metadata(exclude_required=True) == {"note": 1}


@pytest.mark.parametrize("flags", FLAG_SETS)
def test_writes_go_into_the_same_ref(flags):
    v = nnx.Param(jnp.zeros(3), **flags)
    r = v.get_raw_value()
    v[...] = jnp.ones(3)
    v.value = v.value * 2
    v.set_value(v[...] + 1)
    v[1] = 10.0
    v[...] += 1.0
    assert v.get_raw_value() is r
    np.testing.assert_array_equal(r[...], np.array([4.0, 11.0, 4.0]))


def test_inplace_operator_keeps_the_variable():
    v = nnx.Param(jnp.ones(2), ref=True)
    w = v
    w += 1
    assert w is v
    np.testing.assert_array_equal(v[...], [2.0, 2.0])


def test_a_given_ref_becomes_the_storage():
    r = jax.new_ref(jnp.zeros(2))
    v = nnx.Variable(r)
    assert v.ref and v.get_raw_value() is r
    v[...] = jnp.ones(2)
    np.testing.assert_array_equal(r[...], [1.0, 1.0])


def test_a_ref_with_ref_false_is_an_error():
    with pytest.raises(ValueError, match="ref=False"):
        nnx.Variable(jax.new_ref(jnp.zeros(2)), ref=False)


@pytest.mark.parametrize("value", [None, [1.0, 2.0], {"a": 1}, "text"])
def test_explicit_ref_needs_an_array(value):
    with pytest.raises(TypeError, match="array or a number"):
        nnx.Variable(value, ref=True)


def test_bad_flag_type():
    with pytest.raises(TypeError, match="True, False or None"):
        nnx.Variable(1.0, ref=1)


def test_numbers_and_numpy_arrays_can_live_in_a_ref():
    for value, dtype in [(1.0, jnp.float32), (3, jnp.int32), (np.ones(2, np.float32), jnp.float32)]:
        v = nnx.Variable(value, ref=True)
        assert isinstance(v.get_raw_value(), jax.Ref) and v[...].dtype == dtype


# -- shape and dtype are fixed --------------------------------------------------------------


@pytest.mark.parametrize(
    "new",
    [jnp.ones(4), jnp.ones((3, 1)), jnp.ones(3, jnp.int32), 0.0],
    ids=["longer", "rank", "dtype", "scalar"],
)
def test_a_ref_keeps_shape_and_dtype(new):
    v = nnx.Param(jnp.zeros(3), ref=True)
    with pytest.raises(ValueError, match=r"Param\(shape=\(3,\), dtype=float32\)"):
        v[...] = new
    np.testing.assert_array_equal(v[...], np.zeros(3))


def test_plain_variable_may_change_shape():
    v = nnx.Param(jnp.zeros(3))
    v[...] = jnp.ones(4)
    assert v.shape == (4,)


# -- read-only ---------------------------------------------------------------------------------


@pytest.mark.parametrize("flags", [{}, dict(ref=True), dict(hijax=True)])
def test_mutable_false_refuses_every_write(flags):
    v = nnx.Param(jnp.zeros(2), mutable=False, **flags)
    writes = [
        lambda: v.__setitem__(..., jnp.ones(2)),
        lambda: v.__setitem__(0, 1.0),
        lambda: v.set_value(jnp.ones(2)),
        lambda: setattr(v, "value", jnp.ones(2)),
    ]
    for write in writes:
        with pytest.raises(ValueError, match="read-only"):
            write()
    with pytest.raises(ValueError, match="read-only"):
        v += 1
    np.testing.assert_array_equal(v[...], np.zeros(2))
    assert not v.mutable


# -- copies ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make_copy",
    [
        copy.copy,
        copy.deepcopy,
        lambda v: pickle.loads(pickle.dumps(v)),
        lambda v: v.copy(),
        lambda v: v.replace(),
        nnx.clone,
    ],
    ids=["copy", "deepcopy", "pickle", "method", "replace", "clone"],
)
def test_copies_get_their_own_ref(make_copy):
    v = nnx.Param(jnp.arange(2.0), ref=True, note="n")
    c = make_copy(v)
    assert type(c) is nnx.Param and c.ref and c.note == "n"
    assert isinstance(c.get_raw_value(), jax.Ref) and c.get_raw_value() is not v.get_raw_value()
    c[...] = jnp.zeros(2)
    np.testing.assert_array_equal(v[...], [0.0, 1.0])


def test_split_shares_refs_and_merge_copy_makes_new_ones():
    # As in Flax NNX 0.12: split's State holds the model's own Variables (so its
    # Refs); merge(copy=True) builds new Variables, each with a Ref of its own.
    class M(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.ones(2), ref=True)

    m = M()
    graphdef, state = nnx.split(m)
    assert state["w"] is m.w and state["w"].get_raw_value() is m.w.get_raw_value()
    m2 = nnx.merge(graphdef, state, copy=True)
    assert m2.w.ref and isinstance(m2.w.get_raw_value(), jax.Ref)
    assert m2.w.get_raw_value() is not m.w.get_raw_value()
    m2.w[...] = jnp.zeros(2)
    np.testing.assert_array_equal(m.w[...], [1.0, 1.0])


def test_update_writes_into_the_ref():
    class M(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.ones(2), ref=True)

    m = M()
    r = m.w.get_raw_value()
    nnx.update(m, {"w": jnp.full(2, 3.0)})
    assert m.w.get_raw_value() is r
    np.testing.assert_array_equal(r[...], [3.0, 3.0])


def test_update_with_wrong_shape_changes_nothing():
    class M(nnx.Module):
        def __init__(self):
            self.a = nnx.Param(jnp.ones(2), ref=True)
            self.b = nnx.Param(jnp.ones(2), ref=True)

    m = M()
    with pytest.raises(ValueError, match="keeps the shape"):
        nnx.update(m, {"a": jnp.zeros(2), "b": jnp.zeros(5)})
    np.testing.assert_array_equal(m.a[...], [1.0, 1.0])


# -- as a JAX pytree ------------------------------------------------------------------------


def test_pytree_leaf_is_the_ref_and_raw_jit_updates_it():
    v = nnx.Param(jnp.zeros(()), ref=True)
    (leaf,) = jax.tree.leaves(v)
    assert leaf is v.get_raw_value()

    @jax.jit
    def inc(v):
        v[...] += 1.0

    inc(v)
    inc(v)
    assert float(v[...]) == 2.0


def test_read_only_pytree_leaf_is_the_value_so_jax_grad_works():
    v = nnx.Param(jnp.array([1.0, 2.0]), ref=True, mutable=False)
    (leaf,) = jax.tree.leaves(v)
    assert not isinstance(leaf, jax.Ref)
    g = jax.grad(lambda v: (v[...] ** 2).sum())(v)
    np.testing.assert_allclose(g[...], [2.0, 4.0])


@given(st.lists(st.floats(-10, 10, width=32), min_size=1, max_size=5), st.integers(0, 4))
def test_ref_and_plain_variables_agree_on_a_sequence_of_writes(xs, k):
    xs = np.asarray(xs, np.float32)
    plain = nnx.Param(jnp.asarray(xs))
    ref = nnx.Param(jnp.asarray(xs), ref=True)
    for v in (plain, ref):
        v[...] = v[...] * 2
        v[k % len(xs)] = -1.0
        v[...] += 3.0
    np.testing.assert_array_equal(plain[...], ref[...])
    expected = xs * 2
    expected[k % len(xs)] = -1.0
    np.testing.assert_allclose(ref[...], expected + 3.0)


# -- trace rules ---------------------------------------------------------------------------


def test_variable_made_inside_a_transform_holds_the_traced_value():
    seen = {}

    @jax.jit
    def f(x):
        v = nnx.Param(x, ref=True)
        seen["raw"] = type(v.get_raw_value())
        seen["ref"] = v.ref
        v[...] = x + 1
        return v[...]

    assert float(f(1.0)) == 2.0
    assert seen["ref"] and not issubclass(seen["raw"], jax.Ref)


def test_captured_ref_written_under_jax_jit_works_and_under_vmap_names_the_fix():
    v = nnx.BatchStat(jnp.zeros(()), ref=True)

    @jax.jit
    def add(x):
        v[...] += x
        return x

    add(2.0)
    assert float(v[...]) == 2.0

    def add_mapped(x):
        v[...] += x
        return x

    with pytest.raises(nnx.TraceContextError, match="pass the object") as info:
        jax.vmap(add_mapped)(jnp.ones(3))
    assert "BatchStat(shape=(), dtype=float32)" in str(info.value)
    assert float(v[...]) == 2.0


@pytest.mark.parametrize("flags", [dict(ref=True), dict(hijax=True)])
def test_raw_jax_jit_training_step_as_in_the_hijax_guide(flags):
    import optax

    x = jax.random.uniform(jax.random.key(1), (4, 2))
    y = jax.random.uniform(jax.random.key(2), (4, 3))

    def loss_fn(m):
        return jnp.mean((m(x) - y) ** 2)

    # raw JAX: the Ref-backed model and optimizer are captured; updates go into the Refs
    with nnx.var_defaults(**flags):
        model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
        optimizer = nnx.Optimizer(model, optax.adamw(1e-2), wrt=nnx.Param)

    @jax.jit
    def train_step():
        loss, grads = jax.value_and_grad(loss_fn)(nnx.with_vars(model, mutable=False))
        optimizer.update(model, nnx.state(grads, nnx.Param))
        return loss

    # the same with plain Variables and flaxgraph transforms
    plain = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    plain_opt = nnx.Optimizer(plain, optax.adamw(1e-2), wrt=nnx.Param)

    @nnx.jit
    def plain_step(m, opt):
        loss, grads = nnx.value_and_grad(loss_fn)(m)
        opt.update(m, grads)
        return loss

    for _ in range(3):
        np.testing.assert_allclose(train_step(), plain_step(plain, plain_opt), rtol=1e-6)
    np.testing.assert_allclose(model.kernel[...], plain.kernel[...], rtol=1e-6)


def test_array_attributes_of_a_ref_backed_variable():
    v = nnx.Param(jnp.ones((2, 3), jnp.bfloat16), ref=True)
    assert (v.shape, v.dtype, v.ndim, v.size) == ((2, 3), jnp.bfloat16, 2, 6)
    assert v.T.shape == (3, 2)  # other attributes come from the value


def test_hijax_variable_filled_by_a_broadcasting_value_under_jit():
    # Flax NNX 0.12 mutable_array_test::test_variable_to_hijax_clean: a hijax Variable
    # of shape (1,) set to a scalar under plain jax.jit; its Ref keeps shape (1,).
    v = nnx.Param(jnp.array([1]), hijax=True)

    @jax.jit
    def set_to(v, a):
        v[...] = a

    set_to(v, 10)
    assert v.shape == (1,) and int(v[0]) == 10
    with pytest.raises(ValueError, match=r"Param\(shape=\(1,\), dtype=int32\)"):
        v[...] = jnp.ones(3, jnp.int32)
