"""Box-backed Variables (``hijax=True`` with a pytree value) through the flaxgraph
transforms: each program runs on a model whose dict-valued Variable is plain and on
one where it is box-backed, and must have the same effect; the box is updated in
place. Also: a plain Variable's dict written by key inside a transform comes back."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx
from flaxgraph.variablelib import boxes

pytestmark = pytest.mark.skipif(not boxes.AVAILABLE, reason=boxes.UNAVAILABLE_REASON)


class Model(nnx.Module):
    def __init__(self, hijax):
        self.w = nnx.Param(jnp.ones(3), hijax=hijax)  # Ref-backed when hijax
        self.metrics = nnx.Variable({"n": jnp.array(0.0), "last": jnp.array(0.0)}, hijax=hijax)

    def __call__(self, x):
        self.metrics["n"] += 1.0
        self.metrics["last"] = x.sum()
        return (x * self.w).sum()


def values(tree):
    """``tree`` with every Variable replaced by its value, as NumPy arrays."""
    is_var = lambda x: isinstance(x, nnx.Variable)
    tree = jax.tree.map(lambda x: x[...] if is_var(x) else x, tree, is_leaf=is_var)
    return jax.tree.map(np.asarray, tree)


def contents(m):
    return jax.tree.map(lambda x: np.asarray(x).tolist(), (m.w[...], m.metrics.value))


PROGRAMS = {
    "jit": lambda m, x: nnx.jit(lambda m, x: m(x))(m, x),
    "grad": lambda m, x: nnx.grad(lambda m, x: m(x))(m, x),
    "cond": lambda m, x: nnx.cond(x.sum() > 0, lambda m, x: m(x), lambda m, x: -m(x), m, x),
    "remat": lambda m, x: nnx.remat(lambda m, x: m(x))(m, x),
    "jit_of_grad": lambda m, x: nnx.jit(nnx.grad(lambda m, x: m(x)))(m, x),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_box_backed_and_plain_models_agree(name):
    plain, boxed = Model(hijax=False), Model(hijax=True)
    box = boxed.metrics.get_raw_value()
    assert boxes.is_box(box) and type(plain.metrics.get_raw_value()) is dict
    for i in range(3):  # repeated calls: the fast path must not skip the box
        x = jnp.arange(3.0) + i
        out_plain, out_boxed = PROGRAMS[name](plain, x), PROGRAMS[name](boxed, x)
        jax.tree.map(np.testing.assert_allclose, values(out_plain), values(out_boxed))
    assert contents(plain) == contents(boxed)
    assert boxed.metrics.get_raw_value() is box and sorted(box.get()) == ["last", "n"]


def test_scan_and_vmap_agree():
    plain, boxed = Model(hijax=False), Model(hijax=True)
    for m in (plain, boxed):

        @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=(nnx.Carry, 0))
        def run(m, x):
            return m, m(x)

        run(m, jnp.ones((4, 3)))
        stacked = nnx.Variable({"a": jnp.arange(3.0)}, hijax=m is boxed)
        nnx.vmap(lambda v: v.__setitem__("b", v["a"] * 2))(stacked)
        assert jax.tree.map(np.ndarray.tolist, jax.tree.map(np.asarray, stacked.value)) == {
            "a": [0.0, 1.0, 2.0],
            "b": [0.0, 2.0, 4.0],
        }
    assert contents(plain) == contents(boxed)


def test_plain_dict_variable_written_by_key_inside_jit_comes_back():
    # The lift compares values by identity to skip unchanged ones; a dict written by
    # key is a new dict (variable._updated), so the change comes back.
    v = nnx.Variable({"n": jnp.array(0)})
    f = nnx.jit(lambda v: v.__setitem__("n", v["n"] + 1))
    for _ in range(3):
        f(v)
    assert int(v["n"]) == 3
    items = nnx.Variable([jnp.array(0)])
    nnx.jit(lambda v: v.__setitem__(0, v[0] + 5))(items)
    assert int(items[0]) == 5


@pytest.mark.parametrize("hijax", [False, True])
def test_scan_reading_a_broadcast_dict_variable_does_not_warn(hijax, recwarn):
    table = nnx.Variable({"scale": jnp.array(2.0)}, hijax=hijax)

    @nnx.scan(in_axes=(None, nnx.Carry, 0), out_axes=(nnx.Carry, 0))
    def run(table, c, x):
        return c + x * table["scale"], x

    c, _ = run(table, jnp.array(0.0), jnp.arange(3.0))
    assert float(c) == 6.0
    assert not [w for w in recwarn if "broadcast" in str(w.message)]


# -- the fast path: the box is read (a fresh container) and set with the new content --------


def test_box_backed_calls_take_the_fast_path_and_stay_correct():
    m = Model(hijax=True)
    step = nnx.jit(lambda m, x: m(x))
    for i in range(10):
        step(m, jnp.full(3, float(i)))
    assert step.cache_info() == (1, 1)
    assert contents(m)[1] == {"n": 10.0, "last": 27.0}


def test_fast_path_sees_writes_made_between_calls_and_keeps_unchanged_boxes():
    v = nnx.Variable({"a": jnp.array(1.0)}, hijax=True)
    box = v.get_raw_value()
    read = nnx.jit(lambda v: v["a"] * 2)  # reads only: the box keeps its content
    assert float(read(v)) == 2.0
    v["a"] = jnp.array(5.0)
    assert float(read(v)) == 10.0
    assert float(read(v)) == 10.0 and read.cache_info().general_calls == 1
    assert v.get_raw_value() is box and float(box.get()["a"]) == 5.0


def test_fast_path_with_a_structure_that_grows_every_call():
    v = nnx.Variable({}, hijax=True)
    grow = nnx.jit(lambda v, x: v.__setitem__(f"k{len(v)}", x))
    for i in range(4):
        grow(v, jnp.array(float(i)))
    assert {k: float(x) for k, x in v.value.items()} == {f"k{i}": float(i) for i in range(4)}


def test_fast_path_returning_the_content_and_writing_it():
    v = nnx.Variable({"a": jnp.array(1.0)}, hijax=True)

    @nnx.jit
    def step(v):
        v["a"] = v["a"] + 1
        return v[...], v["a"]

    for i in range(3):
        whole, a = step(v)
        assert float(a) == i + 2 and float(whole["a"]) == i + 2
    whole["a"] = 0  # the returned dict is the caller's own
    assert float(v["a"]) == 4.0


def test_vmap_fast_path_with_a_box():
    v = nnx.Variable({"a": jnp.zeros(3)}, hijax=True)
    add = nnx.vmap(lambda v, x: v.__setitem__("a", v["a"] + x))
    for _ in range(3):
        add(v, jnp.arange(3.0))
    assert v["a"].tolist() == [0.0, 3.0, 6.0]
