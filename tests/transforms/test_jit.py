"""nnx.jit: objects in and out, update propagation, aliasing, closures, options, caching.

Most tests are differential: the jitted call on an object must have the same
effect as the plain Python call on a clone of it (``assert_graphs_equal``), and
array results must match plain ``jax.numpy`` on explicit arrays.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from graphs import corpus_params
from helpers import assert_unchanged, sgd_train_step, snapshot
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import flaxgraph as nnx
from flaxgraph.testing import Block, Node, assert_graphs_equal


class Count(nnx.Variable):
    pass


class Weights(nnx.Module):
    def __init__(self, kernel: Any, bias: Any, count: Any = 0):
        self.kernel, self.bias = nnx.Param(kernel), nnx.Param(bias)
        self.count = Count(jnp.asarray(count))


def make_weights(seed: int = 0) -> Weights:
    k = jax.random.uniform(jax.random.key(seed), (2, 3))
    return Weights(k, jnp.arange(3.0) / 10)


X = jnp.array([0.5, -1.0])


# -- 1. objects in, objects out -----------------------------------------------------------

identity = nnx.jit(lambda *args, **kwargs: (args, kwargs))
first = nnx.jit(lambda x, *rest: x)


def test_identity_returns_the_callers_object():
    m = make_weights()
    assert first(m) is m
    assert first(m.kernel) is m.kernel
    # the object is untouched
    assert_graphs_equal(m, make_weights())


def test_objects_nested_in_args_and_kwargs_come_back_as_the_same_objects():
    m, other = make_weights(), make_weights(1)
    args, kwargs = identity(
        {"a": [m, (m, other)], "b": m.kernel}, [other], key=(m, {"deep": [other.bias]})
    )
    (d, lst), kw = args, kwargs
    assert d["a"][0] is m and d["a"][1][0] is m and d["a"][1][1] is other
    assert d["b"] is m.kernel
    assert lst[0] is other
    assert kw["key"][0] is m and kw["key"][1]["deep"][0] is other.bias
    # containers are rebuilt (value semantics), with the same types
    assert type(d["a"]) is list and type(d["a"][1]) is tuple and type(kw["key"]) is tuple


@pytest.mark.parametrize("make", corpus_params())
def test_corpus_graph_identity_is_the_same_unchanged_graph(make):
    g = make()
    before, clone = snapshot(g), nnx.clone(g)
    assert first(g) is g
    assert_unchanged(g, before, clone)


def test_new_objects_created_inside_come_out_as_new_objects():
    m = make_weights()

    @nnx.jit
    def f(m, x):
        return Weights(m.kernel.value * x[0], m.bias.value + x[1], count=5)

    out = f(m, X)
    assert isinstance(out, Weights) and out is not m
    assert out.kernel is not m.kernel and out.bias is not m.bias
    np.testing.assert_allclose(out.kernel.value, m.kernel.value * X[0], rtol=1e-6)
    np.testing.assert_allclose(out.bias.value, m.bias.value + X[1], rtol=1e-6)
    assert int(out.count.value) == 5


def test_new_object_holding_an_input_variable_is_relinked_to_the_callers_variable():
    m = make_weights()
    out = nnx.jit(lambda m: (Node(w=m.kernel, inner=m), m.bias))(m)
    node, bias = out
    assert isinstance(node, Node)
    assert node.w is m.kernel and node.inner is m and bias is m.bias


def test_same_object_twice_is_one_object_inside():
    m = make_weights()

    @nnx.jit
    def f(a, b):
        assert a is b
        a.count.value = a.count.value + 1
        b.count.value = b.count.value + 1
        return a.count.value

    assert int(f(m, m)) == 2
    assert int(m.count.value) == 2


def test_shared_sub_object_across_arguments_stays_shared():
    child = Block(w=nnx.Param(jnp.ones(2)))
    a, b = Node(c=child), Node(c=child)

    @nnx.jit
    def f(a, b):
        assert a.c is b.c
        a.c.w.value = a.c.w.value * 3
        return b.c.w.value

    np.testing.assert_allclose(f(a, b), 3 * np.ones(2))
    assert a.c is child and b.c is child
    np.testing.assert_allclose(child.w.value, 3 * np.ones(2))


# -- 2. update propagation ------------------------------------------------------------------


def crazy_vector_dot(weights: Weights, x: jax.Array) -> jax.Array:
    """Seed 003, "Graph updates propagation"."""
    weights.count += 1
    y = x @ weights.kernel + weights.bias
    weights.some_property = ["a", 2, False]  # add attribute
    del weights.bias  # delete attribute
    weights.new_param = weights.kernel  # share reference
    return y


def test_graph_updates_propagate_like_the_eager_call():
    weights = make_weights()
    eager = nnx.clone(weights)
    kernel, count, bias = weights.kernel.value, weights.count, weights.bias.value
    kernel_var = weights.kernel

    y = nnx.jit(crazy_vector_dot)(weights, X)
    y_eager = crazy_vector_dot(eager, X)

    np.testing.assert_allclose(y, X @ kernel + bias, rtol=1e-6)
    np.testing.assert_allclose(y, y_eager, rtol=1e-6)
    assert_graphs_equal(weights, eager)
    # the effect the transforms guide shows, checked directly
    assert weights.count is count and int(weights.count.value) == 1
    assert weights.some_property == ["a", 2, False]
    assert not hasattr(weights, "bias")
    assert weights.new_param is weights.kernel is kernel_var


def test_swapped_submodules_and_new_shared_references_propagate():
    a, b = Block(w=nnx.Param(jnp.ones(2))), Block(w=nnx.Param(jnp.zeros(2)))
    root = Node(a=a, b=b, stat=nnx.BatchStat(jnp.zeros(2)))
    eager = nnx.clone(root)

    def f(root, x):
        root.a, root.b = root.b, root.a
        root.both = [root.a, root.b]
        root.alias = root.a.w
        root.stat.value = root.stat.value + x * root.b.w.value
        root.fresh = Node(p=nnx.Param(x))
        return root.stat.value

    y = nnx.jit(f)(root, X)
    np.testing.assert_allclose(y, f(eager, X))
    assert_graphs_equal(root, eager)
    assert root.a is b and root.b is a and root.both[0] is b and root.alias is b.w
    assert isinstance(root.fresh, Node)


class Noisy(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.w = nnx.Param(jnp.ones(3))
        self.rngs = rngs


def noisy(m: Noisy) -> jax.Array:
    a = jax.random.normal(m.rngs.dropout(), (3,))
    b = jax.random.normal(m.rngs.dropout(), (3,))
    return m.w.value + a + b


noisy_jit = nnx.jit(noisy)


def test_rng_counters_advance_as_in_the_eager_call():
    m = Noisy(nnx.Rngs(0, dropout=1))
    eager = nnx.clone(m)
    count = m.rngs.dropout.count

    y1 = noisy_jit(m)
    np.testing.assert_allclose(y1, noisy(eager), rtol=1e-6)
    assert m.rngs.dropout.count is count and int(count.value) == 2
    y2 = noisy_jit(m)
    np.testing.assert_allclose(y2, noisy(eager), rtol=1e-6)
    assert int(count.value) == 4
    assert not np.allclose(y1, y2)
    assert_graphs_equal(m, eager)


def test_nested_transforms_update_the_outer_objects():
    m = Weights(jnp.ones((2, 3)), jnp.zeros(3))

    def loss(m, x):
        m.count.value = m.count.value + 1
        return jnp.sum(x @ m.kernel.value)

    @nnx.jit
    def step(m, x):
        grads = nnx.grad(loss)(m, x)
        m.kernel.value = m.kernel.value - grads["kernel"].value
        return grads

    grads = step(m, X)
    expected = jax.grad(lambda k: jnp.sum(X @ k))(jnp.ones((2, 3)))
    np.testing.assert_allclose(grads["kernel"].value, expected)
    np.testing.assert_allclose(m.kernel.value, jnp.ones((2, 3)) - expected)
    assert int(m.count.value) == 1


# -- 3. consistent aliasing ---------------------------------------------------------------

MESH = Mesh(np.array(jax.devices()[:1]), ("x",))
S0 = NamedSharding(MESH, P())
S1 = NamedSharding(MESH, P("x"))


class W1(nnx.Module):
    def __init__(self, array: Any):
        self.param = nnx.Param(array)


def alias_lines(message: str, path: str) -> list[str]:
    """The message lines naming ``path`` followed by the prefix it received."""
    return [line.strip() for line in message.splitlines() if line.strip().startswith(path + ":")]


def test_inconsistent_input_shardings_list_every_alias():
    m = W1(jnp.arange(4.0))
    arg1 = {"a": {"b": m}, "c": m}
    arg2 = [(m, m), m]
    f = nnx.jit(lambda a, b: None, in_shardings=(S0, S1))
    before, clone = snapshot(m), nnx.clone(m)
    with pytest.raises(nnx.InconsistentAliasingError, match=re.escape("args[1][0][1].param")) as e:
        f(arg1, arg2)
    assert isinstance(e.value, ValueError)
    msg = str(e.value)
    assert "in_shardings" in msg
    for path, s in [
        ("args[0]['a']['b'].param", S0),
        ("args[0]['c'].param", S0),
        ("args[1][0][0].param", S1),
        ("args[1][0][1].param", S1),
        ("args[1][1].param", S1),
    ]:
        lines = alias_lines(msg, path)
        assert lines == [f"{path}: {s!r}"], (path, msg)
    assert_unchanged(m, before, clone)


def test_inconsistent_input_output_shardings_list_input_and_output_paths():
    m = W1(jnp.arange(4.0))
    f = nnx.jit(lambda a: a, in_shardings=S0, out_shardings=S1)
    with pytest.raises(ValueError, match=re.escape("output['c'].param")) as e:
        f({"a": {"b": m}, "c": m})
    msg = str(e.value)
    assert "out_shardings" in msg
    assert alias_lines(msg, "output['a']['b'].param") == [f"output['a']['b'].param: {S1!r}"]
    assert alias_lines(msg, "args[0]['c'].param") == [f"args[0]['c'].param: {S0!r}"]


def test_input_nested_in_a_new_output_object_must_keep_its_sharding():
    m = W1(jnp.arange(4.0))
    f = nnx.jit(lambda m: Node(inner=m), in_shardings=S0, out_shardings=S1)
    with pytest.raises(nnx.InconsistentAliasingError) as e:
        f(m)
    msg = str(e.value)
    assert alias_lines(msg, "output.inner.param") == [f"output.inner.param: {S1!r}"]
    assert alias_lines(msg, "args[0].param") == [f"args[0].param: {S0!r}"]


def test_shared_sub_object_with_different_shardings_is_rejected():
    shared = W1(jnp.ones(4))
    m1, m2 = Node(shared=shared), Node(shared=shared)
    f = nnx.jit(lambda a, b: None, in_shardings=(S0, S1))
    with pytest.raises(nnx.InconsistentAliasingError) as e:
        f(m1, m2)
    msg = str(e.value)
    assert alias_lines(msg, "args[0].shared.param") == [f"args[0].shared.param: {S0!r}"]
    assert alias_lines(msg, "args[1].shared.param") == [f"args[1].shared.param: {S1!r}"]


def test_consistent_aliases_are_accepted():
    m = W1(jnp.arange(4.0))
    f = nnx.jit(lambda a, b: (a, b["k"][0]), in_shardings=(S0, S0), out_shardings=S0)
    a, b = f(m, {"k": [m]})
    assert a is m and b is m
    # equal (but distinct) StateSharding instances count as the same prefix
    ss1, ss2 = nnx.StateSharding({nnx.Param: S1}), nnx.StateSharding({nnx.Param: S1})
    g = nnx.jit(lambda a, b: a, in_shardings=(ss1, ss2), out_shardings=ss1)
    assert g(m, m) is m


# -- 4. captured objects --------------------------------------------------------------------


def test_reading_a_captured_object_works_and_warns():
    m = make_weights()
    # the value is compiled in as a constant: flaxgraph says so (ClosureReadWarning)
    with pytest.warns(nnx.ClosureReadWarning, match=r"m\.kernel"):
        y = nnx.jit(lambda x: x @ m.kernel.value)(X)
    np.testing.assert_allclose(y, X @ m.kernel.value, rtol=1e-6)


def test_mutating_a_captured_variable_raises_and_changes_nothing():
    m = make_weights()
    before, clone = snapshot(m), nnx.clone(m)

    @nnx.jit
    def f(x):
        m.count.value = m.count.value + 1
        return x

    with pytest.raises(nnx.TraceContextError, match=r"Count.*captured by closure(.|\n)*argument"):
        f(X)
    assert_unchanged(m, before, clone)


def test_setting_an_attribute_of_a_captured_module_raises():
    m = make_weights()
    with pytest.raises(
        nnx.TraceContextError, match=r"attribute 'extra' of this Weights(.|\n)*argument"
    ):
        nnx.jit(lambda x: setattr(m, "extra", x))(X)
    assert not hasattr(m, "extra")


@pytest.mark.parametrize(
    "make_f, where",
    [
        (lambda m: lambda x: m, "output"),
        (lambda m: lambda x: [x, {"k": m.kernel}], r"output\[1\]\['k'\]"),
    ],
    ids=["module", "variable-in-container"],
)
def test_returning_a_captured_object_raises_naming_its_path(make_f, where):
    m = make_weights()
    with pytest.raises(
        nnx.TraceContextError, match=rf"at {where} was created outside(.|\n)*argument"
    ):
        nnx.jit(make_f(m))(X)


def test_storing_a_captured_object_into_an_argument_raises_and_changes_nothing():
    captured, m = make_weights(), make_weights(1)
    before, clone = snapshot(m), nnx.clone(m)

    def f(m):
        m.count.value = m.count.value + 1
        m.other = captured

    with pytest.raises(nnx.TraceContextError, match=re.escape("at args[0].other")):
        nnx.jit(f)(m)
    assert_unchanged(m, before, clone)


# -- 5. exception safety --------------------------------------------------------------------


def mutate_everything(m: Node) -> None:
    m.s.value = m.s.value + 1
    m.w.value = m.w.value * 3
    m.new = nnx.Param(jnp.ones(2))
    del m.child
    m.alias = m.w


def exception_safety_model() -> Node:
    return Node(
        w=nnx.Param(jnp.ones(2)),
        s=nnx.BatchStat(jnp.zeros(())),
        child=Block(b=nnx.Param(jnp.ones(1))),
    )


CAPTURED = Node(w=nnx.Param(jnp.ones(1)))


def raise_after_mutating(m: Node) -> None:
    mutate_everything(m)
    raise RuntimeError("boom")


def shape_error_after_mutating(m: Node) -> Any:
    mutate_everything(m)
    return m.w.value @ jnp.ones(3)  # (2,) @ (3,): a tracing error


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda m: nnx.jit(raise_after_mutating)(m), RuntimeError),
        (lambda m: nnx.jit(shape_error_after_mutating)(m), TypeError),
        # step 4 fails (a captured object is returned) after the function mutated m
        (
            lambda m: nnx.jit(lambda m: (mutate_everything(m), CAPTURED)[1])(m),
            nnx.TraceContextError,
        ),
        # step 4 fails (inconsistent output sharding) after the function mutated m
        (
            lambda m: nnx.jit(
                lambda m: (mutate_everything(m), m)[1], in_shardings=S0, out_shardings=S1
            )(m),
            nnx.InconsistentAliasingError,
        ),
    ],
    ids=["raises", "tracing-error", "returns-captured", "output-aliasing"],
)
def test_a_failing_call_leaves_the_callers_objects_exactly_as_before(call, error):
    m = exception_safety_model()
    before, clone = snapshot(m), nnx.clone(m)
    with pytest.raises(error):
        call(m)
    assert_unchanged(m, before, clone)


def test_a_failing_repeated_call_leaves_the_objects_as_before():
    @nnx.jit
    def f(m, x):
        m.s.value = m.s.value + 1
        m.w.value = m.w.value * x[0]
        if x.shape[0] != 2:
            raise RuntimeError("boom")
        return x

    m = exception_safety_model()
    for _ in range(3):  # the same structure again: the repeated-call path
        f(m, jnp.ones(2))
    assert float(m.s.value) == 3.0
    before, clone = snapshot(m), nnx.clone(m)
    with pytest.raises(RuntimeError, match="boom"):
        f(m, jnp.ones(3))  # a new shape retraces, and the trace fails
    assert_unchanged(m, before, clone)


# -- 6. StateSharding -----------------------------------------------------------------------


def test_state_sharding_in_and_out_on_a_one_device_mesh():
    m = make_weights()
    eager = nnx.clone(m)
    ss = nnx.StateSharding({nnx.Param: S0, Count: S0})

    def f(m, x):
        m.count.value = m.count.value + 1
        return Block(v=nnx.Param(x @ m.kernel.value), s=Count(jnp.zeros(2)))

    out = nnx.jit(f, in_shardings=(ss, S0), out_shardings=ss)(m, X)
    expected = f(eager, X)
    assert_graphs_equal(out, expected, rtol=1e-6)
    assert_graphs_equal(m, eager)
    for v in (out.v, out.s, m.count, m.kernel, m.bias):
        assert v.value.sharding == S0


def test_in_shardings_place_unchanged_variables_on_their_sharding():
    # Regression: Variables the function leaves unchanged kept their old placement
    # (and were transferred again on every call) instead of getting the requested one.
    m = make_weights()
    assert m.kernel.value.sharding != S1
    traces = []

    @nnx.jit(in_shardings=(nnx.StateSharding({nnx.PathContains("kernel"): S1, ...: S0}),))
    def f(m):
        traces.append(1)
        return jnp.sum(m.kernel.value)

    f(m)
    assert m.kernel.value.sharding == S1
    assert m.bias.value.sharding == S0 and m.count.value.sharding == S0
    placed = m.kernel.value
    f(m)
    assert m.kernel.value is placed and len(traces) == 1


def test_state_sharding_filter_matching_no_leaf_is_a_prefix_error():
    m = make_weights()
    f = nnx.jit(lambda m: None, in_shardings=(nnx.StateSharding({nnx.Param: S0}),))
    with pytest.raises(nnx.PrefixError, match=re.escape("The Count at args[0].count matches none")):
        f(m)


def test_state_sharding_for_a_container_is_a_prefix_error():
    f = nnx.jit(lambda ms: None, in_shardings=(nnx.StateSharding({...: S0}),))
    with pytest.raises(
        nnx.PrefixError,
        match=r"StateSharding can only be used for an object(.|\n)*list at args\[0\]",
    ):
        f([make_weights()])


def test_in_shardings_with_the_wrong_number_of_entries():
    f = nnx.jit(lambda a, b: None, in_shardings=(S0,))
    with pytest.raises(ValueError, match="in_shardings has 1 entries but the function got 2"):
        f(1.0, 2.0)


# -- 7. options -----------------------------------------------------------------------------


def test_decorator_forms():
    @nnx.jit
    def a(x):
        return x + 1

    @nnx.jit()
    def b(x):
        return x + 2

    @nnx.jit(static_argnums=1)
    def c(x, n):
        return x * n

    assert float(a(1.0)) == 2.0 and float(b(1.0)) == 3.0 and float(c(2.0, 3)) == 6.0
    assert a.__name__ == "a"


class Counter(nnx.Module):
    def __init__(self):
        self.w = nnx.Param(jnp.array(2.0))
        self.calls = nnx.BatchStat(jnp.array(0))

    traced: ClassVar[list[str]] = []

    @nnx.jit
    def __call__(self, x):
        Counter.traced.append("call")
        self.calls.value = self.calls.value + 1
        return self.w.value * x

    def plain(self, n, x):
        Counter.traced.append("plain")
        self.calls.value = self.calls.value + n
        return self.w.value**n * x


def test_jit_on_a_method():
    c = Counter()
    assert float(c(3.0)) == 6.0 and float(c(4.0)) == 8.0
    assert int(c.calls.value) == 2


def test_jit_on_a_module_instance_and_the_unbound_method():
    c = Counter()
    assert float(nnx.jit(c)(3.0)) == 6.0
    assert int(c.calls.value) == 1
    assert float(nnx.jit(Counter.plain)(c, 2, 3.0)) == 12.0
    assert int(c.calls.value) == 3


def test_a_bound_method_is_refused_and_the_module_left_alone():
    # Flax NNX 0.12: nnx.jit(model.method) raises a ValueError naming the fixes.
    c = Counter()
    with pytest.raises(ValueError, match=r"(?s)bound methods.*@nnx.jit.*nnx.jit\(Counter.plain\)"):
        nnx.jit(c.plain, static_argnums=0)
    assert int(c.calls.value) == 0


class Plain(nnx.Module):
    def __init__(self):
        self.w = nnx.Param(jnp.array(2.0))
        self.calls = nnx.BatchStat(jnp.array(0))

    def __call__(self, n, x):
        Counter.traced.append("plain")
        self.calls.value = self.calls.value + n
        return self.w.value**n * x


def test_module_instance_argnums_count_the_explicit_arguments():
    # Regression: static/donate argnums of nnx.jit(instance) counted `self` (so
    # static_argnums=0 made the Module static).
    c = Plain()
    Counter.traced.clear()
    f = nnx.jit(c, static_argnums=0)
    assert float(f(2, 3.0)) == 12.0 and int(c.calls.value) == 2
    assert float(f(2, 5.0)) == 20.0 and int(c.calls.value) == 4
    assert Counter.traced == ["plain"]  # n static, x and the module dynamic
    assert float(f(3, 1.0)) == 8.0 and Counter.traced == ["plain", "plain"]

    x = jnp.array(3.0)
    g = nnx.jit(c, donate_argnums=1)
    assert float(g(1, x)) == 6.0
    assert x.is_deleted()

    h = nnx.jit(c, in_shardings=(None, S0))
    assert float(h(1, jnp.array(1.0))) == 2.0


def test_trace_cache():
    traces = []

    @nnx.jit
    def f(m, x):
        traces.append(1)
        m.count.value = m.count.value + 1
        return x @ m.kernel.value

    m = make_weights()
    f(m, X)
    f(m, X + 1)
    assert len(traces) == 1  # same structure: no retrace
    f(make_weights(3), X)
    assert len(traces) == 1  # a new instance with the same structure: no retrace
    m.extra = nnx.BatchStat(jnp.zeros(1))
    f(m, X)
    assert len(traces) == 2  # a structural change retraces once
    f(m, X)
    f(m, X)
    assert len(traces) == 2
    assert int(m.count.value) == 5


def test_structural_change_inside_retraces_exactly_once():
    traces = []

    @nnx.jit
    def f(m):
        traces.append(1)
        if not hasattr(m, "flag"):
            m.flag = nnx.BatchStat(jnp.array(0))
        m.flag.value = m.flag.value + 1

    m = make_weights()
    for _ in range(4):
        f(m)
    assert len(traces) == 2 and int(m.flag.value) == 4


def test_static_argnums_and_argnames():
    traces = []

    def f(m, n, x, *, mode="add"):
        traces.append((n, mode))
        m.count.value = m.count.value + n
        return x * n + 1 if mode == "add" else x * n - 1

    g = nnx.jit(f, static_argnums=1, static_argnames="mode")
    m = make_weights()
    assert float(g(m, 2, 1.0)) == 3.0
    assert float(g(m, 2, 5.0)) == 11.0
    assert traces == [(2, "add")]
    assert float(g(m, 3, 1.0, mode="sub")) == 2.0
    assert traces == [(2, "add"), (3, "sub")]
    assert int(m.count.value) == 7
    h = nnx.jit(f, static_argnums=-1)  # negative argnums count from the end
    assert float(h(m, 1.0, 2)) == 3.0


def test_unhashable_static_argument_names_its_position():
    g = nnx.jit(lambda x, n, *, opt=None: x, static_argnums=1, static_argnames="opt")
    with pytest.raises(TypeError, match=r"args\[1\] is not(.|\n)*hashable"):
        g(1.0, [1])
    with pytest.raises(TypeError, match=r"kwargs\['opt'\] is not"):
        g(1.0, 1, opt={})


def sgd(m: Weights, x: jax.Array) -> jax.Array:
    m.kernel.value = m.kernel.value - 0.1 * x[:, None]
    return jnp.sum(m.kernel.value)


@pytest.mark.parametrize(
    "f, by_name",
    [(nnx.jit(sgd, donate_argnums=0), False), (nnx.jit(sgd, donate_argnames="m"), True)],
    ids=["argnums", "argnames"],
)
def test_donated_objects_get_their_new_values(f, by_name):
    m = make_weights()
    old = m.kernel.value
    expected = old - 0.1 * X[:, None]
    y = f(m=m, x=X) if by_name else f(m, X)
    assert old.is_deleted()
    np.testing.assert_allclose(m.kernel.value, expected, rtol=1e-6)
    np.testing.assert_allclose(y, jnp.sum(expected), rtol=1e-6)
    # the object stays usable
    f(m=m, x=X) if by_name else f(m, X)
    np.testing.assert_allclose(m.kernel.value, expected - 0.1 * X[:, None], rtol=1e-6)


def test_undonated_inputs_survive():
    m = make_weights()
    old = m.kernel.value
    nnx.jit(sgd)(m, X)
    assert not old.is_deleted()


def test_keep_unused():
    m = make_weights()
    kept = nnx.jit(lambda m, x: x + 1, keep_unused=True).lower(m, X).as_text()
    # Automatic donation passes unused Variables through (aliased, no copy): off here.
    dropped = nnx.jit(lambda m, x: x + 1, donate_variables=False).lower(m, X).as_text()
    main = re.compile(r"func\.func public @main\((.*?)\)")
    n_kept = main.search(kept).group(1).count("%arg")  # type: ignore[union-attr]
    n_dropped = main.search(dropped).group(1).count("%arg")  # type: ignore[union-attr]
    assert n_kept == 1 + len(jax.tree.leaves(nnx.state(m)))
    assert n_dropped == 1


@pytest.mark.filterwarnings("ignore:backend and device argument:DeprecationWarning")
def test_device_and_backend():
    dev = jax.devices()[0]
    m = make_weights()
    y = nnx.jit(lambda m, x: x @ m.kernel.value, device=dev)(m, X)
    assert y.devices() == {dev}
    y = nnx.jit(lambda m, x: x @ m.kernel.value, backend=dev.platform)(m, X)
    assert y.devices() == {dev}
    np.testing.assert_allclose(y, X @ m.kernel.value, rtol=1e-6)


def test_inline():
    m = make_weights()

    def primitives(inline: bool) -> set[str]:
        f = nnx.jit(lambda m, x: x @ m.kernel.value, inline=inline)
        jaxpr = jax.make_jaxpr(lambda x: f(m, x))(X)
        return {e.primitive.name for e in jaxpr.jaxpr.eqns}

    assert "jit" in primitives(False) or "pjit" in primitives(False)
    assert not {"jit", "pjit"} & primitives(True)


def test_compiler_options_are_passed_to_xla():
    m = make_weights()
    ok = nnx.jit(
        lambda m, x: x @ m.kernel.value, compiler_options={"xla_cpu_enable_fast_math": False}
    )
    np.testing.assert_allclose(ok(m, X), X @ m.kernel.value, rtol=1e-6)
    bad = nnx.jit(lambda m, x: x, compiler_options={"no_such_option_here": True})
    with pytest.raises(Exception, match="no_such_option_here"):
        bad(m, X)


def test_python_scalars_are_dynamic_arguments():
    traces = []

    @nnx.jit
    def f(x):
        traces.append(1)
        return x * 2

    assert float(f(1.0)) == 2.0 and float(f(2.0)) == 4.0
    assert len(traces) == 1


# -- repeated calls (the per-call fast path) ------------------------------------------------

Pair = collections.namedtuple("Pair", "a b")


@dataclasses.dataclass
class Tagged:
    x: jax.Array
    tag: str = dataclasses.field(metadata={"static": True})


jax.tree_util.register_dataclass(Tagged)


def container_model() -> Node:
    return Node(
        w=nnx.Param(jnp.ones(2)),
        raw=jnp.zeros(2),
        t=(jnp.zeros(2), 2),
        nt=Pair(jnp.zeros(2), jnp.ones(2)),
        dc=Tagged(jnp.zeros(2), "t"),
        items=[jnp.zeros(2), {"k": jnp.zeros(2)}],
        child=Block(s=nnx.BatchStat(jnp.zeros(()))),
    )


def bump_everything(m: Node) -> jax.Array:
    m.raw = m.raw + 1
    m.t = (m.t[0] + 2, 2)
    m.nt = Pair(m.nt.a + 3, m.nt.b)
    m.dc = Tagged(m.dc.x + 4, "t")
    m.items[0] = m.items[0] + 5
    m.items[1]["k"] = m.items[1]["k"] + 6
    m.child.s.value = m.child.s.value + 1
    return m.w.value * m.child.s.value


@pytest.mark.parametrize(
    "between",
    [
        None,
        lambda m, i: setattr(m, "raw", m.raw * 2),
        lambda m, i: setattr(m, "w", nnx.Param(jnp.full(2, float(i)))),
        lambda m, i: m.items.__setitem__(0, jnp.full(2, float(i))),
        lambda m, i: m.items[1].__setitem__("k", jnp.full(2, -float(i))),
        lambda m, i: m.w.set_metadata(step=i),
        lambda m, i: setattr(m, f"extra{i % 2}", nnx.BatchStat(jnp.ones(1))),
    ],
    ids=[
        "plain",
        "raw-array",
        "new-variable",
        "list-item",
        "dict-item",
        "metadata",
        "new-attribute",
    ],
)
def test_repeated_calls_behave_like_repeated_eager_calls(between):
    # Regression: on repeated calls, updates to arrays held in tuples were lost and
    # namedtuple / dataclass attributes crashed the call.
    m = container_model()
    eager = nnx.clone(m)
    f = nnx.jit(bump_everything)
    for i in range(4):
        if between is not None:
            between(m, i)
            between(eager, i)
        np.testing.assert_allclose(f(m), bump_everything(eager))
        assert_graphs_equal(m, eager)


def test_repeated_calls_with_a_shared_object_and_scalars():
    @nnx.jit
    def f(a, b, k, flag=None):
        a.w.value = a.w.value + k
        return b.w.value

    m, other = Node(w=nnx.Param(jnp.zeros(2))), Node(w=nnx.Param(jnp.ones(2)))
    for k in range(1, 4):
        np.testing.assert_allclose(f(m, m, float(k)), m.w.value)
    np.testing.assert_allclose(m.w.value, np.full(2, 6.0))
    # same positions, different sharing: must not reuse the shared-argument plan
    np.testing.assert_allclose(f(m, other, 1.0), np.ones(2))
    np.testing.assert_allclose(m.w.value, np.full(2, 7.0))
    np.testing.assert_allclose(f(m, other, 1.0, flag="x"), np.ones(2))


def test_lists_and_dicts_of_the_caller_survive_a_train_step():
    # Updates inside the step (grad, update) rebuild the containers they write back;
    # the caller's lists and dicts are kept when their items are the same objects, so
    # references to them stay valid (and the structure is unchanged).
    class Net(nnx.Module):
        def __init__(self):
            self.layers = [nnx.Linear(2, 2, rngs=nnx.Rngs(i)) for i in range(2)]
            self.extra = {"scale": nnx.Param(jnp.ones(2)), "nested": [nnx.Param(jnp.ones(2))]}

        def __call__(self, x):
            for layer in self.layers:
                x = layer(x)
            return x * self.extra["scale"].value[None] + self.extra["nested"][0].value[None]

    step = sgd_train_step()
    model = Net()
    layers, extra, nested = model.layers, model.extra, model.extra["nested"]
    kernel = model.layers[0].kernel.value
    for _ in range(3):
        step(model, jnp.ones((1, 2)))
    assert model.layers is layers and model.extra is extra and model.extra["nested"] is nested
    assert not jnp.allclose(model.layers[0].kernel.value, kernel)
    layers.append(nnx.Linear(2, 2, rngs=nnx.Rngs(5)))  # the caller's list is the model's
    assert len(model.layers) == 3


def test_static_and_donated_arguments_by_name_or_by_position():
    # As jax.jit: static_argnames also covers the argument passed by position, and
    # in_shardings then counts the dynamic arguments only.
    traces = []

    def f(x, scale, use_relu):
        traces.append(use_relu)
        y = x * scale
        return jnp.maximum(y, 0).sum() if use_relu else y.sum()

    g = nnx.jit(f, static_argnames="use_relu", in_shardings=(S0, None))
    x = jnp.linspace(-1.0, 1.0, 4)
    assert float(g(x, 0.5, True)) != float(g(x, 0.5, False))
    assert float(g(x, 0.5, use_relu=True)) == float(g(x, 0.5, True))
    assert traces == [True, False, True]  # by keyword is its own trace, as in jax.jit

    h = nnx.jit(lambda v: v + 1, donate_argnames="v")
    y = jnp.ones(3)
    np.testing.assert_allclose(h(v=y), 2.0)
    y2 = jnp.ones(3)
    np.testing.assert_allclose(h(y2), 2.0)
    assert y2.is_deleted()


def test_lower_compile_runs_on_objects_and_writes_updates_back():
    # Flax NNX 0.12: nnx.jit(f).lower(m, x).compile()(m, x) updates m like f(m, x).
    for graph, updates in ((True, True), (True, False), (False, False)):
        c = Counter()
        f = nnx.jit(lambda m, x: m.w.value * x + 0 * m.calls.value, graph=graph)

        @nnx.jit(graph=graph, graph_updates=updates)
        def g(m, x):
            m.calls.value = m.calls.value + 1
            return m.w.value * x

        compiled = g.lower(c, jnp.array(3.0)).compile()
        assert compiled.cost_analysis() is not None and compiled.as_text()
        assert float(compiled(c, jnp.array(3.0))) == 6.0 and int(c.calls.value) == 1
        compiled(c, jnp.array(1.0))
        assert int(c.calls.value) == 2 and float(f(c, 1.0)) == 2.0


def test_jit_returns_a_ref_it_created_as_a_new_ref_and_an_input_ref_as_itself() -> None:
    r = jax.new_ref(jnp.array(1.0))

    @nnx.jit
    def f(r: jax.Ref) -> tuple[jax.Ref, jax.Ref]:
        r[...] += 1.0
        return jax.new_ref(r[...] * 10), r

    for step in (2.0, 3.0):  # the second call takes the fast path
        made, same = f(r)
        assert same is r and float(r[...]) == step
        assert isinstance(made, jax.Ref) and made is not r and float(made[...]) == 10 * step
