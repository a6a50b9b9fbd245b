"""Tests of flaxgraph/module_class.py (Flax's ``nnx.module`` path): iter_modules, iter_children, sow, perturb,
set_attributes, train and eval."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx
from flaxgraph.errors import SharedReferenceError


class Dropout(nnx.Module):
    def __init__(self):
        self.deterministic = False


class BatchNorm(nnx.Module):
    def __init__(self):
        self.use_running_average = False
        self.mean = nnx.BatchStat(jnp.zeros(2))


class Block(nnx.Module):
    def __init__(self):
        self.w = nnx.Param(jnp.arange(4.0).reshape(2, 2))
        self.drop = Dropout()
        self.bn = BatchNorm()

    def __call__(self, x):
        h = x @ self.w
        h = self.perturb("h", h)
        self.sow(nnx.Intermediate, "h_out", h)
        return jnp.sum(h**2)


class Model(nnx.Module):
    def __init__(self):
        self.a = Block()
        self.b = Block()
        self.shared = self.a
        self.plain = nnx.Object()
        self.rngs = nnx.Rngs(0)


# -- iteration ------------------------------------------------------------------------------------


def test_iter_modules_children_first_each_once():
    m = Model()
    got = list(m.iter_modules())
    modules = [mod for _, mod in got]
    assert got[-1] == ((), m)
    assert sum(1 for mod in modules if mod is m.a) == 1
    assert all(isinstance(mod, nnx.Module) for mod in modules)
    assert m.plain not in modules
    assert (("a", "drop"), m.a.drop) in got and (("b",), m.b) in got
    assert modules.index(m.a.drop) < modules.index(m.a)
    assert len(modules) == 1 + 3 + 3 + 1  # root, two blocks with two children, rngs


def test_iter_modules_through_containers():
    m = nnx.Module()
    m.layers = [Dropout(), {"x": BatchNorm()}]
    paths = [p for p, _ in m.iter_modules()]
    assert paths == [("layers", 0), ("layers", 1, "x"), ()]


def test_iter_children_direct_modules_only():
    m = Model()
    children = list(m.iter_children())
    assert children == [("a", m.a), ("b", m.b), ("rngs", m.rngs), ("shared", m.a)]


# -- sow -----------------------------------------------------------------------------------------


def test_sow_collects_in_a_tuple():
    block = Block()
    x = jnp.ones(2)
    block(x)
    block(2 * x)
    assert type(block.h_out) is nnx.Intermediate
    h = x @ jnp.arange(4.0).reshape(2, 2)
    assert len(block.h_out.value) == 2
    np.testing.assert_allclose(block.h_out.value[0], h)
    np.testing.assert_allclose(block.h_out.value[1], 2 * h)


def test_sow_keeps_the_same_variable():
    m = nnx.Module()
    m.sow(nnx.Intermediate, "y", 1)
    v = m.y
    m.sow(nnx.Intermediate, "y", 2)
    assert m.y is v and v.value == (1, 2)


def test_sow_custom_reduce_and_init():
    m = nnx.Module()
    for i in range(1, 4):
        m.sow(
            nnx.Intermediate,
            "total",
            jnp.array(float(i)),
            reduce_fn=lambda a, b: a + b,
            init_fn=lambda: 0.0,
        )
    assert float(m.total.value) == 6.0


def test_sow_by_collection_name():
    m = nnx.Module()
    m.sow("intermediates", "y", 1)
    assert type(m.y) is nnx.Intermediate
    m.sow("cache", "c", 1)
    assert type(m.c) is nnx.Cache


def test_sow_into_an_attribute_of_another_kind_raises():
    block = Block()
    with pytest.raises(
        ValueError,
        match=r"Cannot sow into Block\.w: expected 'w' to be of type 'Intermediate', got Param",
    ):
        block.sow(nnx.Intermediate, "w", 1)
    assert type(block.w) is nnx.Param


def test_sown_values_are_popped():
    block = Block()
    block(jnp.ones(2))
    popped = nnx.pop(block, nnx.Intermediate)
    # Perturbation is a kind of Intermediate (Flax NNX 0.12): both are popped.
    assert set(popped.flat_state().paths) == {("h",), ("h_out",)}
    assert type(popped["h"]) is nnx.Perturbation
    assert "h_out" not in vars(block) and "h" not in vars(block)


def test_perturbations_alone_are_popped_with_their_own_filter():
    block = Block()
    block(jnp.ones(2))
    popped = nnx.pop(block, nnx.Perturbation)
    assert set(popped.flat_state().paths) == {("h",)}
    assert type(block.h_out) is nnx.Intermediate


# -- perturb --------------------------------------------------------------------------------------------


def test_perturb_creates_zero_perturbation_and_is_identity():
    block = Block()
    h = jnp.arange(2.0)
    out = block.perturb("p", h)
    assert type(block.p) is nnx.Perturbation
    np.testing.assert_array_equal(block.p.value, np.zeros(2))
    np.testing.assert_array_equal(out, h)


def test_perturb_gradient_is_gradient_of_the_intermediate():
    block = Block()
    x = jnp.array([1.0, 2.0])
    block(x)  # creates the perturbation
    nnx.pop(block, nnx.All(nnx.Intermediate, nnx.Not(nnx.Perturbation)))
    graphdef, perturbations, rest = nnx.split(block, nnx.Perturbation, ...)

    def loss(p, x):
        return nnx.merge(graphdef, p, rest)(x)

    grads = jax.grad(loss)(perturbations, x)
    h = x @ jnp.arange(4.0).reshape(2, 2)
    np.testing.assert_allclose(grads["h"].value, 2 * h)  # d/dh sum(h**2)


def test_perturb_custom_kind():
    m = nnx.Module()
    m.perturb("p", jnp.ones(1), variable_type=nnx.Intermediate)
    assert type(m.p) is nnx.Intermediate


# -- set_attributes / train / eval ---------------------------------------------------------------------------


def test_set_attributes_on_every_module_that_has_them():
    m = Model()
    m.set_attributes(deterministic=True)
    assert m.a.drop.deterministic is True and m.b.drop.deterministic is True
    assert m.a.bn.use_running_average is False


def test_set_attributes_with_filters():
    m = Model()
    m.set_attributes(
        Dropout, deterministic=True, use_running_average=True, raise_if_not_found=False
    )
    assert m.a.drop.deterministic is True
    assert m.a.bn.use_running_average is False
    m.set_attributes(nnx.PathContains("b"), use_running_average=True)
    assert m.b.bn.use_running_average is True and m.a.bn.use_running_average is False


def test_set_attributes_missing_raises():
    m = Model()
    with pytest.raises(
        ValueError,
        match=r"Could not find at least one instance of the following attributes: \['nope'\]",
    ):
        m.set_attributes(nope=1)
    m.set_attributes(nope=1, raise_if_not_found=False)
    assert all("nope" not in vars(mod) for _, mod in m.iter_modules())


def test_set_attributes_finds_class_attributes():
    class WithClassAttr(nnx.Module):
        deterministic = False

    m = WithClassAttr()
    m.set_attributes(deterministic=True)
    assert m.deterministic is True


def test_set_attributes_does_not_touch_rngs_default_fallback():
    m = Model()
    m.set_attributes(deterministic=True)
    assert "deterministic" not in vars(m.rngs)
    assert isinstance(m.rngs.deterministic, nnx.RngStream)  # still the default stream


def test_train_and_eval():
    m = Model()
    assert m.eval() is m
    assert m.a.drop.deterministic is True and m.b.bn.use_running_average is True
    assert m.train() is m
    assert m.a.drop.deterministic is False and m.b.bn.use_running_average is False
    assert set(vars(m.rngs)) == {"default"}
    assert "deterministic" not in vars(m.a)


def test_train_eval_extra_attributes():
    m = Model()
    m.a.mode = "x"
    m.eval(mode="eval")
    assert m.a.mode == "eval"
    with pytest.raises(ValueError, match="missing_attr"):
        m.train(missing_attr=1)


def test_train_eval_on_module_without_flags():
    m = nnx.Module()
    assert m.eval() is m and vars(m) == {}


def test_iter_modules_function_graph_and_tree_mode():
    class Pair(nnx.Module):
        def __init__(self, share):
            self.a = nnx.Linear(1, 1, rngs=nnx.Rngs(0))
            self.b = self.a if share else nnx.Linear(1, 1, rngs=nnx.Rngs(1))

    assert [p for p, _ in nnx.iter_modules(Pair(True))] == [("a",), ()]
    assert [p for p, _ in nnx.iter_modules(Pair(False), graph=False)] == [("a",), ("b",), ()]
    with pytest.raises(SharedReferenceError):
        list(nnx.iter_modules(Pair(True), graph=False))


def test_set_attributes_takes_graph_and_changes_nothing_when_it_raises():
    model = nnx.Sequential(nnx.Dropout(0.5), nnx.BatchNorm(2, rngs=nnx.Rngs(0)))
    model.set_attributes(use_running_average=False, graph=True)
    model.set_attributes(deterministic=True, graph=False)
    assert model.layers[0].deterministic is True
    with pytest.raises(ValueError, match=r"following attributes: \['nope'\]"):
        model.set_attributes(deterministic=False, nope=1)
    assert model.layers[0].deterministic is True  # unchanged
