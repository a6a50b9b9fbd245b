"""The jit fast path: repeated calls skip the graph walk, and any structural change
made between calls is noticed (differential: every call behaves as the slow path,
i.e. as the eager function)."""

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import sgd_train_step

import flaxgraph as nnx


class Lin(nnx.Module):
    def __init__(self):
        self.w = nnx.Param(jnp.ones((2, 2)))
        self.extra = [nnx.Param(jnp.ones(2))]
        self.cfg = {"a": jnp.zeros(2)}
        self.raw = jnp.ones(2)

    def __call__(self, x):
        return x @ self.w + sum(p.value for p in self.extra) + self.cfg["a"] + self.raw


def body(m, x):
    m.w.value = m.w.value + 1
    m.raw = m.raw * 2
    return m(x)


def make():
    traces = []

    @nnx.jit
    def f(m, x):
        traces.append(1)
        return body(m, x)

    return f, traces


def eager(m, x):
    return body(m, x)


MUTATIONS = {
    "append_to_list": lambda m: m.extra.append(nnx.Param(jnp.full(2, 10.0))),
    "add_dict_key": lambda m: m.cfg.__setitem__("b", 1),
    "replace_dict_value": lambda m: m.cfg.__setitem__("a", jnp.full(2, 5.0)),
    "set_metadata": lambda m: m.w.set_metadata(out_sharding=("a", None)),
    "swap_variable": lambda m: setattr(m, "w", nnx.Param(jnp.zeros((2, 2)))),
    "new_attribute": lambda m: setattr(m, "z", nnx.BatchStat(jnp.ones(1))),
    "delete_attribute": lambda m: delattr(m, "raw"),
    "set_raw_array": lambda m: setattr(m, "raw", jnp.full(2, 3.0)),
    "set_variable_value": lambda m: setattr(m.w, "value", jnp.full((2, 2), 7.0)),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_changes_between_calls_are_seen(name):
    f, _ = make()
    a, b = Lin(), Lin()
    x = jnp.ones(2)
    for _ in range(3):  # warm up: the third call is on the fast path
        assert jnp.allclose(f(a, x), eager(b, x))
    MUTATIONS[name](a)
    MUTATIONS[name](b)
    if name == "delete_attribute":
        with pytest.raises(AttributeError):
            f(a, x)
        return
    for _ in range(2):
        assert jnp.allclose(f(a, x), eager(b, x))
    assert jnp.allclose(a.w.value, b.w.value)
    assert jnp.allclose(a.raw, b.raw)


def test_no_retrace_for_repeated_calls_and_new_instances():
    f, traces = make()
    x = jnp.ones(2)
    a = Lin()
    for _ in range(4):
        f(a, x)
    f(Lin(), x)
    f(a, x)
    assert len(traces) == 1


def test_structural_change_retraces_exactly_once():
    f, traces = make()
    a, x = Lin(), jnp.ones(2)
    f(a, x)
    f(a, x)
    a.extra.append(nnx.Param(jnp.ones(2)))
    f(a, x)
    f(a, x)
    f(a, x)
    assert len(traces) == 2


def test_outputs_keep_identity_on_the_fast_path():
    @nnx.jit
    def g(m):
        return m, m.w, (m.extra[0], 3)

    a = Lin()
    for _ in range(3):
        m, w, (e, three) = g(a)
        assert m is a and w is a.w and e is a.extra[0]
        assert int(three) == 3


def test_exception_on_the_fast_path_leaves_objects_unchanged():
    @nnx.jit
    def g(m, fail):
        m.w.value = m.w.value * 0
        return jax.lax.cond(fail, lambda: jnp.float32(jnp.nan), lambda: jnp.float32(1.0))

    a = Lin()
    g(a, False)
    g(a, False)
    before = a.w.value

    @nnx.jit
    def h(m, x):
        m.w.value = m.w.value + 1
        if x.shape[0] == 3:
            raise ValueError("boom")
        return x

    h(a, jnp.ones(2))
    h(a, jnp.ones(2))
    w = a.w.value
    with pytest.raises(ValueError, match="boom"):
        h(a, jnp.ones(3))  # new shapes: retrace, which raises
    assert jnp.array_equal(a.w.value, w)
    assert before is not None


def test_static_argnums_are_part_of_the_plans_record():
    @nnx.jit(static_argnums=2)
    def g(m, x, scale):
        m.w.value = m.w.value * scale
        return x * scale

    a = Lin()
    assert float(g(a, jnp.ones(()), 2)) == 2.0
    assert float(g(a, jnp.ones(()), 2)) == 2.0
    assert float(g(a, jnp.ones(()), 3)) == 3.0
    assert float(a.w.value[0, 0]) == 12.0


def test_plans_do_not_outlive_a_cache_of_four_models():
    f, traces = make()
    x = jnp.ones(2)
    models = [Lin() for _ in range(6)]
    for _ in range(2):
        for m in models:
            f(m, x)
    assert len(traces) == 1
    assert all(float(m.w.value[0, 0]) == 3.0 for m in models)


def test_plans_keep_no_reference_to_the_arguments_arrays():
    import gc
    import weakref

    f, _ = make()
    a = Lin()
    x = jnp.ones(2) * 3.0
    f(a, x)
    f(a, x)  # made a plan; used it
    ref = weakref.ref(x)
    del x
    gc.collect()
    assert ref() is None
    b = Lin()
    for _ in range(2):  # the two calls a had
        eager(b, jnp.ones(2))
    assert jnp.allclose(f(a, jnp.ones(2)), eager(b, jnp.ones(2)))  # the plan still works


def test_output_structure_depending_on_shapes_stays_right():
    # The OutStatic of one input structure differs between input shapes: the
    # compiled function switches to returning it through JAX (compiled.py), and
    # every call still behaves as the eager one.
    class Counter(nnx.Module):
        def __init__(self):
            self.count = nnx.BatchStat(jnp.array(0))

    def body(c, x):
        if x.shape[0] > 1:
            c.count.value = c.count.value + 1
            return x, x.sum()
        return x

    f = nnx.jit(body)
    a, b = Counter(), Counter()
    for n in (1, 1, 2, 1, 2, 2, 1, 3, 1):
        x = jnp.ones(n)
        got, want = f(a, x), body(b, x)
        assert jax.tree.structure(got) == jax.tree.structure(want)
        assert int(a.count.value) == int(b.count.value)


class Deep(nnx.Module):
    def __init__(self, n):
        self.layers = [Lin() for _ in range(n)]
        self.table = {f"k{i}": nnx.Param(jnp.full(2, float(i))) for i in range(30)}

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x) * 0.5
        return x + sum(p.value for p in self.table.values())


DEEP_MUTATIONS = {
    "append_layer": lambda m: m.layers.append(Lin()),
    "swap_layer": lambda m: m.layers.__setitem__(30, Lin()),
    "swap_variable": lambda m: setattr(m.layers[35], "w", nnx.Param(jnp.zeros((2, 2)))),
    "set_metadata": lambda m: m.layers[33].w.set_metadata(out_sharding=("a", None)),
    "replace_table_entry": lambda m: m.table.__setitem__("k20", nnx.Param(jnp.ones(2))),
    "set_raw_array": lambda m: setattr(m.layers[39], "raw", jnp.full(2, 3.0)),
}


@pytest.mark.parametrize("name", sorted(DEEP_MUTATIONS))
def test_large_graphs_and_keyword_arguments_take_the_fast_path_safely(name):
    # More objects, Variables and list items than the generated code unrolls
    # (plan_code.UNROLL), passed by keyword.
    @nnx.jit
    def f(x, *, model):
        model.layers[0].w.value = model.layers[0].w.value + 1
        return model(x)

    def eager(x, *, model):
        model.layers[0].w.value = model.layers[0].w.value + 1
        return model(x)

    a, b = Deep(40), Deep(40)
    x = jnp.ones(2)
    for _ in range(3):
        assert jnp.allclose(f(x, model=a), eager(x, model=b))
    DEEP_MUTATIONS[name](a)
    DEEP_MUTATIONS[name](b)
    for _ in range(2):
        assert jnp.allclose(f(x, model=a), eager(x, model=b))
    assert jnp.allclose(a.layers[0].w.value, b.layers[0].w.value)


def test_graph_nodes_of_other_registered_types_take_the_general_path():
    # Only Objects keep a structure version: a plan is never made for a graph with
    # nodes of another registered type, and every call still updates it.
    class Box:
        def __init__(self):
            self.items = {}

    nnx.register_graph_node_type(  # Flax's signature (nnx.graphlib's, the same function)
        Box,
        flatten=lambda b: (sorted(b.items.items()), None),
        set_key=lambda b, k, v: b.items.__setitem__(k, v),
        pop_key=lambda b, k: b.items.pop(k),
        create_empty=lambda aux: Box(),
        clear=lambda b: b.items.clear(),
        init=lambda b, items: b.items.update(items),
    )
    box = Box()
    box.items["w"] = nnx.Param(jnp.ones(2))

    @nnx.jit
    def f(b, x):
        b.items["w"].value = b.items["w"].value + x
        return x

    for _ in range(3):
        f(box, 1.0)
    assert jnp.allclose(box.items["w"].value, 4.0)


class MLP(nnx.Module):
    def __init__(self, n):
        self.layers = [nnx.Linear(2, 2, rngs=nnx.Rngs(i)) for i in range(n)]

    def __call__(self, x):
        for layer in self.layers:
            x = jnp.tanh(layer(x))
        return x


def test_a_train_step_stays_on_the_fast_path():
    step = sgd_train_step()
    model, x = MLP(3), jnp.ones((4, 2))
    losses = [float(step(model, x)) for _ in range(6)]
    assert step.cache_info().general_calls == 1
    assert step.cache_info().plans == 1
    assert losses == sorted(losses, reverse=True)  # it trains
    model.layers.append(nnx.Linear(2, 2, rngs=nnx.Rngs(9)))  # structural change
    step(model, x)
    step(model, x)
    assert step.cache_info().general_calls == 2


def test_eager_vmap_and_scan_take_the_fast_path():
    model, xs = MLP(2), jnp.ones((5, 2))
    mapped = nnx.vmap(lambda m, x: m(x), in_axes=(None, 0))
    expected = jax.vmap(lambda x: model(x))(xs)
    for _ in range(4):
        np.testing.assert_allclose(mapped(model, xs), expected, rtol=1e-6)
    assert mapped.cache_info().general_calls == 1

    layers = nnx.vmap(lambda key: nnx.Linear(2, 2, rngs=nnx.Rngs(key)))(jnp.arange(3))
    scanned = nnx.scan(lambda x, layer: layer(x), in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
    outs = [scanned(jnp.ones(2), layers) for _ in range(4)]
    assert scanned.cache_info().general_calls == 1
    assert all(jnp.array_equal(o, outs[0]) for o in outs)


# -- arguments that are lists, tuples and dicts (a Flax-style batch dict) ----------------


class Counter(nnx.Module):
    def __init__(self) -> None:
        self.w = nnx.Param(jnp.ones(2))
        self.calls = nnx.BatchStat(jnp.array(0))


def step_on_batch(m: Counter, batch: dict) -> jax.Array:
    m.calls[...] += 1
    return jnp.sum(batch["x"] * m.w[...]) + batch["scale"]


def test_a_batch_dict_argument_takes_the_fast_path_with_its_new_arrays():
    m = Counter()
    f = nnx.jit(step_on_batch)
    for i in range(5):
        x = jnp.full(2, float(i))
        assert float(f(m, {"x": x, "scale": 1.0})) == 2 * i + 1.0
    assert int(m.calls[...]) == 5
    assert f.cache_info().general_calls == 1


@pytest.mark.parametrize(
    ("other", "general"),
    [
        ({"x": jnp.ones(2), "scale": 1.0, "extra": 0.0}, 1),  # one more key
        ({"scale": 1.0, "x": jnp.ones(2)}, 1),  # other key order: another GraphDef
        # A NumPy array for a jax.Array: the same plan, found by key (both are leaves).
        ({"x": np.ones(2, np.float32), "scale": 1.0}, 0),
        ({"x": jnp.ones(2), "scale": None}, 1),  # a static value
    ],
    ids=["extra-key", "key-order", "leaf-type", "static"],
)
def test_a_batch_of_another_structure_misses_the_plan_and_is_still_right(other, general):
    m = Counter()
    f = nnx.jit(step_on_batch)
    f(m, {"x": jnp.ones(2), "scale": 1.0})
    before = f.cache_info().general_calls
    out = f(m, other) if other["scale"] is not None else None
    if other["scale"] is None:
        with pytest.raises(TypeError):
            f(m, other)
        return
    assert f.cache_info().general_calls == before + general
    assert float(out) == 3.0 and int(m.calls[...]) == 2


def test_objects_inside_a_tuple_argument_are_checked_by_identity_and_updated():
    a, b = Counter(), Counter()

    @nnx.jit
    def bump(pair: tuple, x: jax.Array) -> jax.Array:
        for m in pair:
            m.calls[...] += 1
        return x.sum()

    for _ in range(3):
        bump((a, b), jnp.ones(3))
    assert int(a.calls[...]) == int(b.calls[...]) == 3
    assert bump.cache_info().general_calls == 1
    c = Counter()
    bump((a, c), jnp.ones(3))  # another object at the same place: the plan misses
    assert bump.cache_info().general_calls == 2
    assert int(c.calls[...]) == 1 and int(b.calls[...]) == 3


@functools.partial(
    jax.tree_util.register_dataclass, data_fields=["x", "mask"], meta_fields=["scale"]
)
@dataclasses.dataclass(frozen=True)
class Batch:
    """A batch as a registered dataclass (as ``flax.struct.dataclass`` makes them)."""

    x: jax.Array
    mask: jax.Array | None
    scale: float


class PairBatch(NamedTuple):
    x: jax.Array
    mask: jax.Array | None


def step_on_attributes(m: Counter, batch: Any) -> jax.Array:
    m.calls[...] += 1
    masked = batch.x if batch.mask is None else batch.x * batch.mask
    return jnp.sum(masked * m.w[...]) * getattr(batch, "scale", 1.0)


@pytest.mark.parametrize("make_batch", [Batch, PairBatch], ids=["dataclass", "namedtuple"])
def test_a_pytree_batch_of_attributes_takes_the_fast_path_through_cached_partial(make_batch):
    # A trainer's step bound to its model by cached_partial, called on a new batch
    # object (a registered dataclass or a namedtuple) every step.
    m = Counter()
    f = nnx.jit(step_on_attributes)
    step = nnx.cached_partial(f, m)
    extra = (2.0,) if make_batch is Batch else ()
    for i in range(5):
        batch = make_batch(jnp.full(2, float(i)), jnp.ones(2), *extra)
        expected = step_on_attributes(Counter(), batch)
        assert float(step(batch)) == float(expected)
    assert int(m.calls[...]) == 5
    assert f.cache_info().general_calls == 1
    # Another structure (no mask): a miss, then the fast path again.
    assert float(step(make_batch(jnp.ones(2), None, *extra))) == 2.0 * (extra or (1.0,))[0]
    assert float(step(make_batch(jnp.ones(2), None, *extra))) == 2.0 * (extra or (1.0,))[0]
    assert f.cache_info().general_calls == 2
    assert int(m.calls[...]) == 7


def test_a_static_field_change_of_a_dataclass_batch_misses_the_plan():
    m = Counter()
    f = nnx.jit(step_on_attributes)
    assert float(f(m, Batch(jnp.ones(2), None, 2.0))) == 4.0
    assert float(f(m, Batch(jnp.ones(2), None, 2.0))) == 4.0
    assert f.cache_info().general_calls == 1
    assert float(f(m, Batch(jnp.ones(2), None, 3.0))) == 6.0  # the treedef differs
    assert f.cache_info().general_calls == 2


def test_a_dataclass_argument_holding_an_object_takes_the_general_path():
    m = Counter()
    f = nnx.jit(lambda b: step_on_attributes(b.x, PairBatch(jnp.ones(2), None)))
    holder = PairBatch(m, None)
    for _ in range(2):
        assert float(f(holder)) == 2.0
    assert int(m.calls[...]) == 2
    assert f.cache_info().general_calls == 2


@functools.partial(jax.tree_util.register_dataclass, data_fields=["x"], meta_fields=["names"])
@dataclasses.dataclass
class Tagged:
    x: jax.Array
    names: list  # a static field compared by value


def test_a_dataclass_batch_with_a_list_static_field_misses_when_it_changes():
    seen = []

    def body(m: Counter, b: Tagged) -> jax.Array:
        seen.append(list(b.names))
        return step_on_attributes(m, PairBatch(b.x, None)) * len(b.names)

    m = Counter()
    f = nnx.jit(body)
    assert [float(f(m, Tagged(jnp.full(2, float(i)), ["a"]))) for i in range(3)] == [0, 2, 4]
    assert f.cache_info().general_calls == 1
    assert float(f(m, Tagged(jnp.ones(2), ["a", "b"]))) == 4.0  # retraced with two names
    assert seen == [["a"], ["a", "b"]] and int(m.calls[...]) == 4


@pytest.mark.parametrize("inner", ["vmap", "jit"])
def test_a_nested_transform_adding_a_node_to_an_empty_object_misses_the_plan(inner):
    # The inner transform's write-back gives the bare (attribute-less) object its
    # first attribute inside the outer jit's trace; the outer plan must see that the
    # structure changed, so the next call (on an object that now has `a`) is traced
    # again and adds `a` to the new sub-node, as the eager run does.
    def add(root: Any) -> Any:
        objects = [n for _, n in nnx.iter_graph(root) if isinstance(n, nnx.Module)]
        objects[0].a = nnx.Module()  # the first node in iter_graph order: the deepest
        objects[0].a.w = nnx.Param(jnp.zeros(2))
        return jnp.zeros(())

    if inner == "vmap":
        lifted = nnx.vmap(add, in_axes=None, out_axes=None, axis_size=2)
    else:
        lifted = nnx.jit(add)
    f = nnx.jit(lambda root: lifted(root))
    model, eager = nnx.Module(), nnx.Module()
    for _ in range(3):
        f(model)
        add(eager)
    depth = lambda m: 0 if not hasattr(m, "a") else 1 + depth(m.a)
    assert depth(model) == depth(eager) == 3
    assert f.cache_info().general_calls == 3


@pytest.mark.parametrize("inner", ["jit", "vmap"])
@pytest.mark.parametrize("held", ["array", "variable"])
def test_swapped_attributes_are_swapped_on_every_call(inner, held):
    # Two attributes exchanging their input values: each output leaf is an input leaf
    # from another place, which the write-back must move there on every call.
    wrap = nnx.Param if held == "variable" else (lambda x: x)
    node = nnx.Module()
    node.a, node.b = wrap(jnp.array(0.0)), wrap(jnp.array(0.25))
    eager = nnx.clone(node)

    def swap(root):
        root.a, root.b = root.b, root.a

    if inner == "vmap":
        step = nnx.vmap(swap, in_axes=None, out_axes=None, axis_size=2)
    else:
        step = nnx.jit(swap)
    outer = nnx.jit(lambda root: step(root))
    for _ in range(3):
        outer(node)
        swap(eager)
        assert (float(node.a[...]), float(node.b[...])) == (
            float(eager.a[...]),
            float(eager.b[...]),
        )


def test_alternating_argument_structures_each_keep_their_plan():
    # No key is computed from a call's arguments: a call that misses the most recent
    # plan tries the others (PlanCache.run_any), each deciding by its own record.
    # Three structures alternating take the general path once each, and every call
    # computes what the eager call does.
    f = nnx.jit(lambda m, v: m.w[...].sum() + jax.tree.reduce(lambda a, b: a + b.sum(), v, 0.0))
    m = Lin()
    calls = [jnp.ones(2), (jnp.ones(2), jnp.full(3, 2.0)), {"a": jnp.full(1, 5.0)}]
    for round in range(3):
        for i, v in enumerate(calls):
            v = jax.tree.map(lambda a: a * (round + 1), v)
            expected = m.w[...].sum() + jax.tree.reduce(lambda a, b: a + b.sum(), v, 0.0)
            assert float(f(m, v)) == pytest.approx(float(expected)), (round, i)
    assert f.cache_info() == (3, 3)


def test_a_pytree_argument_with_an_unhashable_static_field_has_a_plan():
    # Its record cannot be a dict key (plan.record_key gives it a key of its own); the
    # plan is made and replayed all the same, and a new static value misses it.
    @jax.tree_util.register_dataclass
    @dataclasses.dataclass
    class Batch:
        x: jax.Array
        names: list = dataclasses.field(metadata={"static": True})

    f = nnx.jit(lambda m, b: m.w[...].sum() * len(b.names) + b.x.sum())
    m = Lin()
    for n in (1.0, 2.0, 3.0):
        assert float(f(m, Batch(jnp.full(2, n), ["a"]))) == pytest.approx(4.0 + 2 * n)
    assert f.cache_info() == (1, 1)
    assert float(f(m, Batch(jnp.ones(2), ["a", "b"]))) == pytest.approx(10.0)
    assert f.cache_info().general_calls == 2
