"""Tests of the graph API (flaxgraph/graphlib/split_merge.py, update.py, descendants.py, pure_methods.py,
contexts.py): split, merge, update, state, graphdef, clone, pop, iter_graph, recursive_map,
find_duplicates, call and the split/merge contexts."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx


class Linear(nnx.Module):
    def __init__(self, n_in, n_out, scale=1.0):
        self.kernel = nnx.Param(jnp.full((n_in, n_out), scale))
        self.bias = nnx.Param(jnp.zeros(n_out))
        self.n_out = n_out

    def __call__(self, x):
        return x @ self.kernel + self.bias


class Model(nnx.Module):
    def __init__(self):
        self.linear = Linear(2, 3)
        self.mean = nnx.BatchStat(jnp.zeros(3))
        self.count = nnx.Variable(jnp.array(0))
        self.raw = jnp.arange(2.0)
        self.name = "model"

    def __call__(self, x):
        self.count += 1
        return self.linear(x) + self.mean


def paths(state):
    return set(state.flat_state().paths)


# -- split ---------------------------------------------------------------------------------------


def test_split_without_filters_returns_one_state_with_the_models_variables():
    m = Model()
    graphdef, state = nnx.split(m)
    assert isinstance(graphdef, nnx.GraphDef) and isinstance(state, nnx.State)
    assert paths(state) == {
        ("linear", "kernel"),
        ("linear", "bias"),
        ("mean",),
        ("count",),
        ("raw",),
    }
    assert state.linear.kernel is m.linear.kernel  # the model's own Variable (NNX 0.12)
    assert state.raw is m.raw
    state.linear.kernel.value = jnp.zeros((2, 3))  # writing through the State writes the model
    np.testing.assert_array_equal(m.linear.kernel.value, np.zeros((2, 3)))


def test_split_with_filters_first_match_wins():
    m = Model()
    graphdef, params, variables, rest = nnx.split(m, nnx.Param, nnx.Variable, ...)
    assert paths(params) == {("linear", "kernel"), ("linear", "bias")}
    assert paths(variables) == {("mean",), ("count",)}
    assert paths(rest) == {("raw",)}
    assert graphdef == nnx.graphdef(m)


def test_split_filter_that_matches_nothing_gives_empty_state():
    _, params, empty, rest = nnx.split(Model(), nnx.Param, nnx.Cache, ...)
    assert len(empty) == 0 and len(params.flat_state()) == 2 and len(rest.flat_state()) == 3


def test_split_unmatched_leaf_names_path_and_fix():
    with pytest.raises(
        nnx.UnmatchedLeafError, match=r"The Variable at node\.count matches none of the filters"
    ):
        nnx.split(Model(), nnx.Param, nnx.BatchStat, jax.Array)
    with pytest.raises(ValueError, match=r"end the filters with `\.\.\.`"):
        nnx.split(Model(), nnx.Param)


def test_split_unmatched_leaf_in_list_path():
    m = nnx.Dict(layers=[nnx.Param(1.0), nnx.BatchStat(2.0)])
    with pytest.raises(nnx.UnmatchedLeafError, match=r"at node\.layers\[1\]"):
        nnx.split(m, nnx.Param)


@pytest.mark.parametrize("bad", [1, 2.0, object()])
def test_split_invalid_filter_is_type_error(bad):
    with pytest.raises(TypeError, match="Invalid filter"):
        nnx.split(Model(), nnx.Param, bad)
    with pytest.raises(nnx.InvalidFilterError):
        nnx.state(Model(), bad)


def test_split_shared_variable_appears_once_at_first_path():
    m = nnx.Dict(a=nnx.Param(jnp.ones(1)))
    m.b = m.a
    _, state = nnx.split(m)
    assert paths(state) == {("a",)}


def test_split_plain_containers():
    tree = [nnx.Param(1.0), {"a": nnx.BatchStat(2.0), "s": "static"}]
    graphdef, state = nnx.split(tree)
    assert paths(state) == {(0,), (1, "a")}
    out = nnx.merge(graphdef, state)
    assert type(out) is list and out[1]["s"] == "static" and out[1]["a"].value == 2.0


def test_split_and_merge_a_variable_root():
    v = nnx.Param(jnp.ones(2), out_sharding=("a",))
    graphdef, state = nnx.split(v)
    assert type(state) is nnx.Param and state is v and state.out_sharding == ("a",)
    out = nnx.merge(graphdef, state)
    assert out is v
    out = nnx.merge(graphdef, state, copy=True)
    assert type(out) is nnx.Param and out is not v and out.out_sharding == ("a",)
    np.testing.assert_array_equal(out.value, np.ones(2))
    graphdef, params, rest = nnx.split(v, nnx.BatchStat, ...)
    assert len(params) == 0 and type(rest) is nnx.Param
    assert type(nnx.merge(graphdef, params, rest)) is nnx.Param
    assert nnx.state(v).value is v.value


# -- merge ---------------------------------------------------------------------------------------


def test_merge_roundtrip_builds_new_objects():
    m = Model()
    graphdef, state = nnx.split(m)
    new = nnx.merge(graphdef, state)
    assert type(new) is Model and new is not m and new.linear is not m.linear
    assert new.name == "model" and new.linear.n_out == 3
    x = jnp.ones(2)
    np.testing.assert_allclose(new(x), m(x))
    assert new.linear.kernel is state.linear.kernel  # the State's Variables (NNX 0.12)
    copied = nnx.merge(graphdef, state, copy=True)
    assert copied.linear.kernel is not state.linear.kernel
    assert copied.linear.kernel.value is state.linear.kernel.value


def test_merge_states_in_any_order_and_from_dicts():
    m = Model()
    graphdef, params, rest = nnx.split(m, nnx.Param, ...)
    a = nnx.merge(graphdef, rest, params)
    np.testing.assert_array_equal(a.linear.kernel.value, np.ones((2, 3)))
    b = nnx.merge(graphdef, params.to_pure_dict(), dict(rest))
    assert type(b.linear.kernel) is nnx.Param


def test_merge_with_changed_values():
    graphdef, state = nnx.split(Model())
    state = jax.tree.map(lambda x: x + 1, state)
    new = nnx.merge(graphdef, state)
    np.testing.assert_array_equal(new.linear.kernel.value, 2 * np.ones((2, 3)))
    np.testing.assert_array_equal(new.raw, np.arange(2.0) + 1)


def test_merge_restores_sharing_and_cycles():
    m = Model()
    m.alias = m.linear
    m.self_ref = m
    m.linear.tied = m.mean
    new = nnx.merge(*nnx.split(m))
    assert new.alias is new.linear and new.self_ref is new and new.linear.tied is new.mean


def test_merge_missing_leaves_names_paths():
    graphdef, _params, rest = nnx.split(Model(), nnx.Param, ...)
    with pytest.raises(
        nnx.GraphStructureError, match=r"missing leaves at linear/bias, linear/kernel"
    ):
        nnx.merge(graphdef, rest)
    # As in Flax 0.12 (merge(graphdef, state, /, *states)): no State at all is a TypeError.
    with pytest.raises(TypeError, match=r"missing 1 required positional argument: 'state'"):
        nnx.merge(graphdef)


def test_merge_extra_leaves_names_paths():
    graphdef, state = nnx.split(Model())
    state["linear"]["extra"] = jnp.ones(1)
    with pytest.raises(nnx.GraphStructureError, match=r"no place for: linear/extra"):
        nnx.merge(graphdef, state)


def test_merge_state_from_other_structure():
    graphdef, _ = nnx.split(Model())
    _, other = nnx.split(Linear(2, 3))
    with pytest.raises(nnx.GraphStructureError, match="do not match the GraphDef"):
        nnx.merge(graphdef, other)


def test_merge_duplicate_path_in_two_states():
    graphdef, params, rest = nnx.split(Model(), nnx.Param, ...)
    with pytest.raises(nnx.GraphStructureError, match=r"linear/kernel appears in more than one"):
        nnx.merge(graphdef, params, rest, nnx.State({"linear": {"kernel": jnp.ones((2, 3))}}))


def test_merge_non_state_argument():
    graphdef, state = nnx.split(Model())
    with pytest.raises(TypeError, match="merge expects States after the GraphDef, got a tuple"):
        nnx.merge(graphdef, (1, 2))
    with pytest.raises(nnx.GraphStructureError, match=r"needs 5 .* the list given to merge has 2"):
        nnx.merge(graphdef, [1, 2])
    with pytest.raises(TypeError, match="a list of leaves and 1 more state"):
        nnx.merge(graphdef, jax.tree.leaves(state), nnx.State({}))


def test_merge_reports_many_missing_leaves_briefly():
    m = nnx.Dict(**{f"p{i:02d}": nnx.Param(float(i)) for i in range(13)})
    graphdef, _ = nnx.split(m)
    with pytest.raises(nnx.GraphStructureError, match=r"p09 \(and 3 more\)"):
        nnx.merge(graphdef, nnx.State({}))


# -- state / graphdef / clone ----------------------------------------------------------------------


def test_state_all_and_filtered():
    m = Model()
    assert paths(nnx.state(m)) == paths(nnx.split(m)[1])
    params = nnx.state(m, nnx.Param)
    assert isinstance(params, nnx.State) and paths(params) == {
        ("linear", "kernel"),
        ("linear", "bias"),
    }
    _, stats = nnx.state(m, nnx.Param, nnx.BatchStat)  # unmatched leaves are dropped
    assert paths(stats) == {("mean",)}


def test_graphdef_matches_split():
    m = Model()
    assert nnx.graphdef(m) == nnx.split(m)[0]


def test_clone_is_deep_and_independent():
    m = Model()
    m.alias = m.linear
    c = nnx.clone(m)
    assert c is not m and c.linear is not m.linear and c.alias is c.linear
    c.linear.kernel.value = jnp.zeros((2, 3))
    np.testing.assert_array_equal(m.linear.kernel.value, np.ones((2, 3)))


# -- update ----------------------------------------------------------------------------------------


def test_update_writes_in_place_and_keeps_references():
    m = Model()
    kernel = m.linear.kernel
    _, state = nnx.split(m)
    state = jax.tree.map(lambda x: x * 0 + 7, state)
    nnx.update(m, state)
    assert m.linear.kernel is kernel
    np.testing.assert_array_equal(kernel.value, np.full((2, 3), 7.0))
    np.testing.assert_array_equal(m.raw, np.full(2, 7.0))
    assert int(m.count.value) == 7


def test_update_from_several_states_and_partial():
    m = Model()
    _, params, rest = nnx.split(m, nnx.Param, ...)
    params = jax.tree.map(lambda x: x + 1, params)
    nnx.update(m, params, rest)
    np.testing.assert_array_equal(m.linear.bias.value, np.ones(3))
    nnx.update(m, {"mean": jnp.full(3, 2.0)})
    np.testing.assert_array_equal(m.mean.value, np.full(3, 2.0))
    np.testing.assert_array_equal(m.linear.bias.value, np.ones(3))


def test_update_with_variable_leaf_takes_metadata():
    m = Model()
    nnx.update(m, {"mean": nnx.BatchStat(jnp.ones(3), out_sharding=("x",))})
    assert m.mean.out_sharding == ("x",)
    nnx.update(m, {"mean": jnp.zeros(3)})  # raw value keeps the metadata
    assert m.mean.out_sharding == ("x",)


def test_update_adds_new_attributes():
    m = Model()
    nnx.update(m, {"new_param": nnx.Param(jnp.ones(1)), "new_raw": jnp.ones(2)})
    assert type(m.new_param) is nnx.Param
    np.testing.assert_array_equal(m.new_raw, np.ones(2))


def test_update_leaves_in_lists_and_dicts():
    m = nnx.Dict(items=[jnp.zeros(1), nnx.Param(jnp.zeros(1))], table={"a": jnp.zeros(1)})
    p = m.items[1]
    nnx.update(m, {"items": {0: jnp.ones(1), 1: jnp.ones(1)}, "table": {"a": jnp.ones(1)}})
    np.testing.assert_array_equal(m.items[0], np.ones(1))
    assert m.items[1] is p and float(p.value[0]) == 1.0
    np.testing.assert_array_equal(m.table["a"], np.ones(1))


def test_update_a_variable_root():
    v = nnx.Param(1.0)
    nnx.update(v, nnx.Param(3.0, tag="t"))
    assert v.value == 3.0 and v.tag == "t"
    with pytest.raises(nnx.GraphStructureError, match="update got a Param for a Model"):
        nnx.update(Model(), nnx.Param(1.0))


def test_update_substate_where_node_has_a_leaf():
    m = Model()
    with pytest.raises(
        nnx.GraphStructureError,
        match=r"sub-state at mean, but the node has a BatchStat leaf at node\.mean",
    ):
        nnx.update(m, {"mean": {"x": jnp.ones(1)}})


def test_update_substate_through_missing_node():
    with pytest.raises(
        nnx.GraphStructureError,
        match=r"sub-state at ghost, but the node has nothing at node\.ghost",
    ):
        nnx.update(Model(), {"ghost": {"x": {"y": jnp.ones(1)}}})


def test_update_leaf_where_node_has_a_subgraph():
    with pytest.raises(
        nnx.GraphStructureError, match=r"leaf \(.*\) at linear, but the node has a Linear there"
    ):
        nnx.update(Model(), {"linear": jnp.ones(1)})


def test_update_raw_leaf_in_tuple_cannot_be_written():
    m = nnx.Dict(pair=(jnp.zeros(1), 1))
    with pytest.raises(nnx.GraphStructureError, match=r"node\.pair\[0\].*immutable tuple"):
        nnx.update(m, {"pair": {0: jnp.ones(1)}})


def test_update_non_mapping_is_type_error():
    with pytest.raises(TypeError, match="update expects States"):
        nnx.update(Model(), [jnp.ones(1)])


def test_failing_update_changes_nothing():
    m = Model()
    kernel = m.linear.kernel
    bad = {
        "linear": {"kernel": jnp.full((2, 3), 5.0), "bias": jnp.full(3, 5.0)},
        "raw": jnp.full(2, 5.0),
        "new": jnp.ones(1),
        "mean": {"oops": jnp.ones(1)},  # malformed second part
    }
    with pytest.raises(nnx.GraphStructureError, match="mean"):
        nnx.update(m, bad)
    assert m.linear.kernel is kernel
    np.testing.assert_array_equal(kernel.value, np.ones((2, 3)))
    np.testing.assert_array_equal(m.raw, np.arange(2.0))
    assert "new" not in vars(m)


def test_failing_second_state_changes_nothing():
    m = Model()
    with pytest.raises(nnx.GraphStructureError):
        nnx.update(m, {"raw": jnp.zeros(2)}, {"count": {"x": 1}})
    np.testing.assert_array_equal(m.raw, np.arange(2.0))


def test_update_captured_object_inside_jit_raises_and_changes_nothing():
    m = Model()

    @jax.jit
    def f(x):
        nnx.update(m, {"linear": {"kernel": x}})
        return x

    with pytest.raises(nnx.TraceContextError, match="captured by closure"):
        f(jnp.zeros((2, 3)))
    np.testing.assert_array_equal(m.linear.kernel.value, np.ones((2, 3)))


def test_update_mixed_trace_graph_changes_nothing():
    captured = nnx.Dict(x=jnp.zeros(1))
    seen = {}

    @jax.jit
    def f(a):
        local = nnx.Dict(own=jnp.zeros(1), other=captured)
        with pytest.raises(nnx.TraceContextError):
            nnx.update(local, {"own": a, "other": {"x": a}})
        seen["own_unchanged"] = local.own is not a
        return a

    f(jnp.ones(1))
    assert seen["own_unchanged"]
    np.testing.assert_array_equal(captured.x, np.zeros(1))


# -- pop ---------------------------------------------------------------------------------------------


def test_pop_removes_and_returns():
    m = Model()
    m.sow(nnx.Intermediate, "y", jnp.ones(1))
    m.linear.sow(nnx.Intermediate, "z", jnp.ones(2))
    popped = nnx.pop(m, nnx.Intermediate)
    assert paths(popped) == {("y",), ("linear", "z")}
    assert "y" not in vars(m) and "z" not in vars(m.linear)
    assert nnx.state(m, nnx.Intermediate).flat_state() == ()


def test_pop_several_filters_and_dict_parent():
    m = nnx.Dict(table={"a": nnx.Cache(1.0), "b": nnx.Param(2.0)}, c=nnx.Cache(3.0))
    caches, params = nnx.pop(m, nnx.Cache, nnx.Param)
    assert paths(caches) == {("table", "a"), ("c",)} and paths(params) == {("table", "b")}
    assert m.table == {} and "c" not in m


def test_pop_without_filters():
    with pytest.raises(ValueError, match="pop needs at least one filter"):
        nnx.pop(Model())


def test_pop_from_list_raises_and_removes_nothing():
    m = nnx.Dict(c=nnx.Cache(0.0), items=[nnx.Cache(1.0), nnx.Param(2.0)])
    with pytest.raises(nnx.GraphStructureError, match=r"Cannot pop the leaf at node\.items\[0\]"):
        nnx.pop(m, nnx.Cache)
    assert "c" in m and len(m.items) == 2


def test_pop_from_nnx_list_items():
    m = nnx.List([nnx.Param(1.0)])
    m.cache = nnx.Cache(2.0)
    popped = nnx.pop(m, nnx.Cache)
    assert paths(popped) == {("cache",)}


# -- iteration ---------------------------------------------------------------------------------------


def test_iter_graph_children_first_each_node_once():
    m = Model()
    m.alias = m.linear
    got = [(p, type(v).__name__) for p, v in nnx.iter_graph(m)]
    assert got[-1] == ((), "Model")
    # the shared Linear is yielded once, at its first path in sorted attribute order
    assert (("alias",), "Linear") in got and (("linear",), "Linear") not in got
    assert sum(1 for _, v in nnx.iter_graph(m) if v is m.linear) == 1
    assert [p for p, _ in got].index(("alias", "kernel")) < [p for p, _ in got].index(("alias",))
    assert (("name",), "str") in got and (("raw",), "ArrayImpl") in got


def test_iter_graph_cycles_terminate():
    m = Model()
    m.me = m
    assert sum(1 for _, v in nnx.iter_graph(m) if v is m) == 1


def test_find_duplicates():
    m = Model()
    assert nnx.find_duplicates(m) == []
    m.alias = m.linear
    m.items = [m.mean]
    dups = nnx.find_duplicates(m)
    assert sorted(dups) == sorted([[("alias",), ("linear",)], [("mean",), ("items", 0)]])


def test_recursive_map_replaces_children_first_and_keeps_sharing():
    class Wrapped(nnx.Module):
        def __init__(self, inner):
            self.inner = inner

    m = Model()
    m.alias = m.linear
    m.layers = [m.linear]
    seen = []

    def f(path, x):
        seen.append(path)
        return Wrapped(x) if isinstance(x, Linear) else x

    out = nnx.recursive_map(f, m)
    assert type(out) is Model
    assert type(out.linear) is Wrapped and out.alias is out.linear and out.layers[0] is out.linear
    assert type(out.linear.inner) is Linear
    assert seen[-1] == ()
    assert seen.index(("alias", "kernel")) < seen.index(("alias",))


def test_recursive_map_variables_mapped_once():
    m = Model()
    m.tied = m.mean
    out = nnx.recursive_map(
        lambda p, x: x.replace(x.value + 1) if isinstance(x, nnx.BatchStat) else x, m
    )
    assert out.tied is out.mean
    np.testing.assert_array_equal(out.mean.value, np.ones(3))


def test_recursive_map_root_replacement():
    out = nnx.recursive_map(lambda p, x: "replaced" if p == () else x, Model())
    assert out == "replaced"


# -- call -------------------------------------------------------------------------------------------


def test_call_returns_output_and_new_state():
    m = Model()
    graphdef, state = nnx.split(m)
    x = jnp.ones(2)
    out, (graphdef2, state2) = nnx.call((graphdef, state))(x)
    np.testing.assert_allclose(out, x @ jnp.ones((2, 3)))
    # the proxy merges with the State's own Variables (NNX 0.12): `state` sees the call
    assert int(state2.count.value) == 1 and state2.count is state.count
    assert graphdef2 == graphdef


def test_call_nested_method():
    graphdef, state = nnx.split(Model())
    out, _ = nnx.call((graphdef, state)).linear(jnp.ones(2))
    np.testing.assert_allclose(out, jnp.full(3, 2.0))


def test_call_with_several_states():
    graphdef, params, rest = nnx.split(Model(), nnx.Param, ...)
    out, (_, state) = nnx.call((graphdef, params, rest))(jnp.zeros(2))
    np.testing.assert_allclose(out, jnp.zeros(3))
    assert int(state.count.value) == 1


# -- contexts ----------------------------------------------------------------------------------------


def test_split_and_merge_contexts_share_references():
    a = Linear(2, 2)
    b = Model()
    b.shared = a
    with nnx.split_context() as ctx:
        ga, sa = ctx.split(a)
        gb, sb = ctx.split(b)
    assert ("shared", "kernel") not in paths(sb)  # already in sa
    with nnx.merge_context() as ctx:
        a2 = ctx.merge(ga, sa)
        b2 = ctx.merge(gb, sb)
    assert b2.shared is a2 and a2 is not a


def test_context_split_filters_and_errors():
    with nnx.split_context() as ctx:
        _, params, _ = ctx.split(Model(), nnx.Param, ...)
        assert paths(params) == {("linear", "kernel"), ("linear", "bias")}
        with pytest.raises(nnx.UnmatchedLeafError, match=r"node\.count"):
            ctx.split(Model(), nnx.Param, nnx.BatchStat)


def test_merge_outside_context_of_dependent_graphdef():
    a = Linear(2, 2)
    b = nnx.Dict(shared=a)
    with nnx.split_context() as ctx:
        ctx.split(a)
        gb, sb = ctx.split(b)
    with pytest.raises(nnx.GraphStructureError, match="merge both inside one merge_context"):
        nnx.merge(gb, sb)


def test_update_hands_a_missing_childs_substate_to_a_lazy_node() -> None:
    # A node type may keep the sub-state of a child it has not created yet
    # (bridge.Module does); update calls its `_graph_keep_substate(node, key, state)`.
    class Lazy(nnx.Module):
        @staticmethod
        def _graph_keep_substate(node, key, sub):
            object.__setattr__(node, "kept", (key, sorted(sub)))

    node = Lazy()
    nnx.update(node, nnx.State({"later": nnx.State({"w": nnx.Param(jnp.ones(2))})}))
    assert node.kept == ("later", ["w"])
    with pytest.raises(nnx.GraphStructureError, match=r"has nothing at node\.later"):
        nnx.update(nnx.Module(), nnx.State({"later": nnx.State({"w": nnx.Param(jnp.ones(2))})}))


def test_call_reaches_items_and_attributes():
    class Counter(nnx.Module):
        def __init__(self) -> None:
            self.count = nnx.Param(jnp.zeros(()))

        def increment(self) -> int:
            self.count[...] += 1
            return 1

    graphdef, state = nnx.split({"a": Counter(), "b": nnx.Dict(c=Counter())})
    out, (graphdef, state) = nnx.call((graphdef, state))["b"].c.increment()
    nodes = nnx.merge(graphdef, state)
    assert out == 1
    assert nodes["a"].count[...] == 0 and nodes["b"]["c"].count[...] == 1


def test_flatten_pytree_one_level_round_trip():
    import collections

    Point = collections.namedtuple("Point", ["y", "x"])
    children, treedef = nnx.graphlib._flatten_pytree(Point(1, {"a": 2}))
    assert children == [("y", 1), ("x", {"a": 2})]
    assert nnx.graphlib._unflatten_pytree(children, treedef) == Point(1, {"a": 2})
    with pytest.raises(ValueError, match="pytree leaf"):
        nnx.graphlib._flatten_pytree(jnp.ones(1))
