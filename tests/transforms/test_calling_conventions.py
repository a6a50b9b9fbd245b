"""The shape of a transformed callable: decorators, methods, static arguments
(``flaxgraph/transforms/calling_conventions.py``)."""

from __future__ import annotations

import functools

import jax.numpy as jnp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flaxgraph as nnx
from flaxgraph.testing import Node
from flaxgraph.transforms.calling_conventions import (
    decorator,
    merge_static,
    normalize_argnames,
    normalize_argnums,
    split_static,
    unbind,
)
from flaxgraph.transforms.transformed import Wrapped


@decorator
def tagging(f, tag="t", *, times=1):
    """A toy transform: returns f with a tag."""

    def g(*args, **kwargs):
        return (tag * times, f(*args, **kwargs))

    return g


def test_decorator_three_ways():
    def f(x):
        return x + 1

    assert tagging(f)(1) == ("t", 2)
    assert tagging(f, "u", times=2)(1) == ("uu", 2)

    @tagging
    def a(x):
        return x

    @tagging()
    def b(x):
        return x

    @tagging(times=3)
    def c(x):
        return x

    assert a(0) == ("t", 0) and b(0) == ("t", 0) and c(0) == ("ttt", 0)
    assert tagging.__name__ == "tagging" and "toy transform" in tagging.__doc__


class Mod(nnx.Module):
    def __init__(self):
        self.w = nnx.Param(jnp.ones(1))

    def __call__(self, x):
        return ("call", self, x)

    def method(self, x):
        return ("method", self, x)


def test_unbind_module_instance_and_bound_method():
    m = Mod()
    f, bound = unbind(m)
    assert f is Mod.__call__ and bound == (m,) and bound[0] is m
    # Flax NNX 0.12: a bound method is refused, naming it and the two fixes
    with pytest.raises(ValueError, match=r"nnx.jit does not support bound methods.*Mod\.method"):
        unbind(m.method, "jit")
    with pytest.raises(ValueError, match=r"@nnx.grad .*nnx.grad\(Mod.method\)\(instance"):
        unbind(functools.partial(m.method, 1), "grad")
    g = lambda x: x
    assert unbind(g) == (g, ())
    assert unbind(Mod.method) == (Mod.method, ())


def test_unbind_leaves_methods_of_non_graph_objects_alone():
    class Plain:
        def method(self, x):
            return x

    p = Plain()
    f, bound = unbind(p.method)
    assert bound == () and f == p.method


def test_bind_prepends_the_bound_arguments():
    m = Mod()
    f, bound = unbind(m)
    call = Wrapped(f, f, bound)
    assert call(3) == ("call", m, 3)
    assert Wrapped(f, f)(m, 3) == ("call", m, 3)


def test_normalize():
    assert normalize_argnums(None) == ()
    assert normalize_argnums(2) == (2,)
    assert normalize_argnums([0, -1]) == (0, -1)
    assert normalize_argnames(None) == ()
    assert normalize_argnames("x") == ("x",)
    assert normalize_argnames(["x", "y"]) == ("x", "y")


def test_split_and_merge_static_round_trip():
    args = (1.0, "mode", 3, (4, 5))
    kwargs = {"a": 1, "b": "static"}
    dyn_args, dyn_kwargs, statics = split_static(args, kwargs, (1, -1), ("b",))
    assert dyn_args == (1.0, 3)
    assert dyn_kwargs == {"a": 1}
    hash(statics)
    assert merge_static(dyn_args, dyn_kwargs, statics) == (args, kwargs)


def test_split_static_ignores_missing_and_out_of_range_positions():
    args, kwargs = (1, 2), {"x": 3}
    dyn_args, dyn_kwargs, statics = split_static(args, kwargs, (5,), ("absent",))
    assert dyn_args == args and dyn_kwargs == kwargs
    assert merge_static(dyn_args, dyn_kwargs, statics) == (args, kwargs)
    assert split_static(args, kwargs, (), ()) == (args, kwargs, ())


def test_static_values_that_compare_equal_give_equal_keys():
    _, _, s1 = split_static((0, (1, 2)), {}, (1,), ())
    _, _, s2 = split_static((9, (1, 2)), {}, (1,), ())
    assert s1 == s2 and hash(s1) == hash(s2)


def test_unhashable_static_arguments_are_named():
    with pytest.raises(TypeError, match=r"args\[0\], kwargs\['k'\] is not"):
        split_static(([1], 2), {"k": {}}, (0,), ("k",))


def test_an_object_can_be_a_static_argument():
    # Objects hash by identity, so they can be static (a new object retraces).
    n = Node()
    dyn_args, _, statics = split_static((n, 1), {}, (0,), ())
    assert dyn_args == (1,) and merge_static(dyn_args, {}, statics)[0][0] is n


def test_infer_argnums_and_argnames_as_jax_jit():
    from flaxgraph.transforms.calling_conventions import infer_argnums_and_argnames

    def f(x, n, /, *, k=1):
        return x

    def g(x, n, use_relu=False):
        return x

    assert infer_argnums_and_argnames(g, (), ("use_relu",)) == ((2,), ("use_relu",))
    assert infer_argnums_and_argnames(g, (1,), ()) == ((1,), ("n",))
    assert infer_argnums_and_argnames(g, (-1,), ()) == ((-1,), ("use_relu",))
    # positional-only parameters have no name to pass; keyword-only ones no position
    assert infer_argnums_and_argnames(f, (1,), ()) == ((1,), ())
    assert infer_argnums_and_argnames(f, (), ("k",)) == ((), ("k",))
    # both given, or neither: unchanged
    assert infer_argnums_and_argnames(g, (0,), ("n",)) == ((0,), ("n",))
    assert infer_argnums_and_argnames(g, (), ()) == ((), ())


@settings(deadline=None)
@given(st.integers(1, 6), st.data())
def test_inferred_argnames_give_back_the_argnums(n_params, data):
    # Property: for positional-or-keyword parameters, argnums -> argnames -> argnums
    # is the identity on the (non-negative) positions, and the names are those
    # parameters' names in the same order.
    import inspect

    from flaxgraph.transforms.calling_conventions import infer_argnums_and_argnames

    names = [f"p{i}" for i in range(n_params)]
    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]

    def f(*args):
        return args

    f.__signature__ = inspect.Signature(params)
    nums = tuple(data.draw(st.lists(st.integers(0, n_params - 1), unique=True, min_size=1)))
    got_nums, got_names = infer_argnums_and_argnames(f, nums, ())
    assert got_nums == nums and got_names == tuple(names[i] for i in nums)
    back, same_names = infer_argnums_and_argnames(f, (), got_names)
    assert back == nums and same_names == got_names
