"""Flax NNX's small modules at their paths behave as Flax's: ``reprlib``, ``tracers``,
``proxy_caller``, ``deprecations``, ``transforms.transforms.resolve_kwargs``, and the
stand-ins for Flax-internal names. Where Flax is installed the same inputs run on both."""

from __future__ import annotations

import functools
import pickle
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given
from hypothesis import strategies as st

import flaxgraph as nnx
from flaxgraph import deprecations, proxy_caller, reprlib, tracers
from flaxgraph.errors import FlaxInternalError
from flaxgraph.transforms import iteration
from flaxgraph.transforms import transforms as fg_transforms

flax_nnx = pytest.importorskip("flax.nnx")
from flax.nnx import reprlib as flax_reprlib  # noqa: E402
from flax.nnx.transforms import transforms as flax_transforms  # noqa: E402

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.floats(-2, 2), st.text(max_size=3)
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=2), inner, max_size=2),
    ),
    max_leaves=6,
)


def _point_class(lib: Any) -> type:
    class Point(lib.Representable):
        def __init__(self, attrs: dict[str, Any], same_line: bool, inner: Any = None):
            self.attrs, self.same_line, self.inner = attrs, same_line, inner

        def __nnx_repr__(self):
            yield lib.Object(type=type(self), same_line=self.same_line, comment=" # c")
            for key, value in self.attrs.items():
                yield lib.Attr(key, value)
            if self.inner is not None:
                yield lib.Attr("inner", self.inner)

    return Point


@given(
    attrs=st.dictionaries(st.sampled_from("abc"), values, max_size=3),
    same_line=st.booleans(),
    nested=st.booleans(),
)
def test_reprlib_renders_as_flax_does(attrs: dict[str, Any], same_line: bool, nested: bool) -> None:
    ours, theirs = _point_class(reprlib), _point_class(flax_reprlib)
    inner_ours = ours(attrs, not same_line) if nested else None
    inner_theirs = theirs(attrs, not same_line) if nested else None
    assert repr(ours(attrs, same_line, inner_ours)) == repr(theirs(attrs, same_line, inner_theirs))
    mapping = {"x": attrs, "y": 1}
    assert repr(reprlib.PrettyMapping(mapping)) == repr(flax_reprlib.PrettyMapping(mapping))
    seq = list(attrs.values())
    assert repr(reprlib.PrettySequence(seq)) == repr(flax_reprlib.PrettySequence(seq))
    colors = (reprlib.COLOR, flax_reprlib.COLOR)
    reprlib.REPR_CONTEXT.current_color, flax_reprlib.REPR_CONTEXT.current_color = colors
    assert reprlib.colorized(attrs) == flax_reprlib.colorized(attrs)


def test_reprlib_depth_limit_is_the_flax_configuration() -> None:
    Point = _point_class(reprlib)
    deep = Point({"a": 1}, False, Point({"b": 2}, False))
    nnx.config.update("flax_max_repr_depth", 1)
    try:
        assert repr(deep).endswith("inner=Point(...)\n)")
    finally:
        nnx.config.update("flax_max_repr_depth", None)
    assert "b=2" in repr(deep)


def test_reprlib_refuses_a_malformed_stream() -> None:
    class Bad(reprlib.Representable):
        def __nnx_repr__(self):
            yield reprlib.Attr("a", 1)

    with pytest.raises(TypeError, match=r"must yield a reprlib\.Object first"):
        repr(Bad())
    with pytest.raises(TypeError, match="not representable"):
        reprlib.get_repr(1)  # type: ignore[arg-type]


def test_trace_state_is_valid_only_in_its_own_trace() -> None:
    outer = tracers.TraceState()
    assert outer.is_valid() and outer == tracers.TraceState()
    seen = {}

    @jax.jit
    def f(x):
        inner = tracers.TraceState()
        seen["outer"], seen["inner"], seen["equal"] = (
            outer.is_valid(),
            inner.is_valid(),
            inner == outer,
        )
        return x

    f(1.0)
    assert seen == {"outer": False, "inner": True, "equal": False}
    assert pickle.loads(pickle.dumps(outer)) == outer
    assert "jax_trace=" in repr(outer)
    assert jax.tree.leaves(outer) == [] and jax.tree.map(lambda x: x, outer) == outer
    from flaxgraph import tracing

    assert tracers.TraceState is tracing.TraceState


def test_proxy_caller_records_and_replays_lookups() -> None:
    accessor = proxy_caller.DelayedAccessor().layers[1].bias
    model = nnx.List([nnx.Linear(2, 2, rngs=nnx.Rngs(0)), nnx.Linear(2, 3, rngs=nnx.Rngs(1))])
    assert accessor(nnx.Dict(layers=model)) is model[1].bias
    assert accessor == proxy_caller.DelayedAccessor(
        (proxy_caller.GetAttr("layers"), proxy_caller.GetItem(1), proxy_caller.GetAttr("bias"))
    )
    assert jax.tree.leaves(accessor) == [] and hash(accessor) == hash(accessor)
    calls = []
    proxy = proxy_caller.CallableProxy(lambda acc, *a, **k: calls.append((acc, a, k)) or "out")
    assert proxy.a["b"](1, c=2) == "out"
    assert calls == [(proxy_caller.DelayedAccessor().a["b"], (1,), {"c": 2})]


def test_deprecated_warns_and_delegates_as_flax_does() -> None:
    from flax.nnx.deprecations import deprecated as flax_deprecated

    def new(x, y=1):
        """Adds."""
        return x + y

    for make in (deprecations.deprecated, flax_deprecated):
        old = make(new)
        with pytest.warns(DeprecationWarning, match="Use .*new instead") as caught:
            assert old(2, y=3) == 5
        assert caught[0].filename == __file__
        assert old.__name__ == "new" and old.__doc__.endswith("Adds.")
    assert deprecations.deprecated(new).__doc__ == flax_deprecated(new).__doc__


def _fn_positional(a, b, c=3):
    return None


def _fn_keyword_only(a, *, b=2):
    return None


@pytest.mark.parametrize(
    "fun, args, kwargs",
    [
        (_fn_positional, (1,), {"b": 2}),
        (_fn_positional, (1, 2, 4), {}),
        (_fn_positional, (), {"a": 1, "b": 2, "c": 5}),
        (_fn_keyword_only, (1,), {}),
        (_fn_positional, (1,), {}),
        (functools.partial(_fn_positional, 1), (2,), {}),
        (functools.partial(_fn_positional, 1), (), {"b": 2}),
    ],
)
def test_resolve_kwargs_matches_flax(fun: Any, args: tuple, kwargs: dict) -> None:
    def outcome(resolve: Any) -> Any:
        try:
            return resolve(fun, args, kwargs)
        except (TypeError, ValueError) as error:
            return type(error)

    assert outcome(fg_transforms.resolve_kwargs) == outcome(flax_transforms.resolve_kwargs)


def test_resolve_kwargs_decorator_calls_with_positions() -> None:
    @fg_transforms.resolve_kwargs()
    def f(*args):
        return args

    assert f(1) == (1,)

    @fg_transforms.resolve_kwargs()
    def g(a, b=2):
        return (a, b)

    assert g(b=5, a=1) == (1, 5)


def test_lifted_module_calls_through_nested_lifts() -> None:
    class Lift(fg_transforms.LiftedModule):
        def __init__(self, inner):
            self.inner = inner

        @property
        def _submodule(self):
            return self.inner

        def _call(self, accessor, *args):
            return accessor(self.inner)(*args)

    class Doubler(nnx.Module):
        def __call__(self, x):
            return x + 1

        def double(self, x):
            return 2 * x

    lifted = Lift(Lift(Doubler()))
    assert lifted(1) == 2 and lifted.call.double(3) == 6


def test_value_metadata_is_a_pytree_with_one_leaf() -> None:
    vm = fg_transforms.ValueMetadata(nnx.Param, jnp.ones(2), {"b": 1, "a": 2})
    leaves, treedef = jax.tree.flatten(vm)
    assert len(leaves) == 1 and jax.tree.unflatten(treedef, leaves) == vm


def test_broadcasted_is_a_pytree_node_of_its_data() -> None:
    b = iteration.Broadcasted({"a": jnp.ones(2), "b": 3})
    assert len(jax.tree.leaves(b)) == 2
    assert jax.tree.map(lambda x: x * 2, b).data["b"] == 6


@pytest.mark.parametrize("name", ["VmapFn", "SimpleScanFn", "WhileLoopCondFn"])
def test_a_stand_in_can_be_named_but_not_built(name: str) -> None:
    stand_in = getattr(iteration, name)
    assert stand_in.__name__ == name and stand_in.__module__ == "flaxgraph.transforms.iteration"
    assert not isinstance(nnx.vmap(lambda x: x), stand_in)
    assert stand_in[int] is stand_in
    with pytest.raises(
        FlaxInternalError, match=rf"flax\.nnx\.transforms\.iteration\.{name} .* use nnx\."
    ):
        stand_in(lambda x: x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert isinstance(FlaxInternalError("x"), NotImplementedError)


def test_the_ahead_of_time_stages_are_flaxs_classes_at_flaxs_path() -> None:
    from flaxgraph.transforms import compilation

    model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    jitted = nnx.jit(lambda m, x: m(x))
    traced = jitted.trace(model, jnp.ones(2))
    lowered = traced.lower()
    compiled = lowered.compile()
    assert isinstance(traced, compilation.Traced) and isinstance(compiled, compilation.Compiled)
    assert isinstance(lowered, compilation.Lowered)
    assert all(isinstance(s, compilation.Stage) for s in (traced, lowered, compiled))
    assert not isinstance(jitted, compilation.Stage)
    assert compilation.jit_partial is nnx.jit_partial and compilation.shard_map is nnx.shard_map
    assert isinstance(nnx.custom_vjp(lambda x: x), nnx.transforms.autodiff.CustomVjp)


def test_module_path_has_flaxs_helpers() -> None:
    from flaxgraph import module

    assert module.view is nnx.view and module.capture is nnx.capture
    assert module.iter_children is nnx.iter_children and module.Module is nnx.Module
    assert module.tuple_reduce(module.tuple_init(), 1) == (1,)
    assert module.first_from(None, 0, error_msg="x") == 0
    with pytest.raises(ValueError, match="nothing given"):
        module.first_from(None, None, error_msg="nothing given")

    import abc

    class Meta(module.ModuleMeta, abc.ABCMeta):
        pass

    class Abstract(nnx.Module, metaclass=Meta):
        @abc.abstractmethod
        def f(self): ...

    with pytest.raises(TypeError, match="abstract"):
        Abstract()


def test_flaxs_annotation_strings_declare_data_and_static() -> None:
    import typing

    from flaxgraph import pytreelib

    def init(self):
        self.n, self.arr = 3, 2.5

    annotations = {  # evaluated, as without `from __future__ import annotations`
        "n": typing.Annotated[int, pytreelib.DataAnnotation],
        "arr": typing.Annotated[Any, pytreelib.StaticAnnotation],
    }
    Foo = type("Foo", (nnx.Pytree,), {"__annotations__": annotations, "__init__": init})
    assert jax.tree.leaves(Foo()) == [3]
    assert pytreelib.DATA_REGISTRY is pytreelib.attribute_kinds.DATA_TYPES
    shape = jnp.ones((2, 3))
    assert repr(pytreelib.ArrayRepr.from_array(shape)) == repr(
        flax_nnx.pytreelib.ArrayRepr.from_array(shape)
    )
    assert repr(pytreelib.MutableArrayRepr.from_array(shape)) == repr(
        flax_nnx.pytreelib.MutableArrayRepr.from_array(shape)
    )


def test_spmd_path_has_the_abstract_models_and_the_tree_axis_helpers() -> None:
    from flaxgraph import spmd

    assert spmd.get_abstract_model is nnx.get_abstract_model
    assert spmd.as_abstract is nnx.as_abstract
    seen = []

    class Tracked(nnx.Param):
        def add_axis(self, axis_index, axis_name):
            seen.append(("add", axis_index, axis_name))

        def remove_axis(self, axis_index, axis_name):
            seen.append(("remove", axis_index, axis_name))

    state = nnx.State({"w": Tracked(jnp.ones((2, 3)), out_sharding=("a", "b")), "x": 1})
    assert spmd.add_axis(state, 1, {nnx.PARTITION_NAME: "layers"}) is state
    assert state["w"].out_sharding == ("a", "layers", "b")
    spmd.remove_axis(state, 1, {nnx.PARTITION_NAME: "layers"})
    assert state["w"].out_sharding == ("a", "b")
    assert seen == [("add", 1, "layers"), ("remove", 1, "layers")]


def test_compat_iter_modules_walks_in_graph_mode() -> None:
    class Pair(nnx.Module):
        def __init__(self):
            self.a = nnx.Linear(1, 1, rngs=nnx.Rngs(0))
            self.b = self.a

    paths = [p for p, _ in nnx.compat.iter_modules(Pair())]
    assert paths == [p for p, _ in nnx.iter_modules(Pair(), graph=True)]


paths = st.lists(
    st.tuples(st.sampled_from(["a", "b", 0, 1]), st.sampled_from(["k", "bias", 2])), max_size=4
)


@given(paths=paths, probe=st.tuples(st.sampled_from(["a", "b", 0]), st.sampled_from(["k", 2])))
def test_path_in_matches_as_flaxs(paths: list, probe: tuple) -> None:
    ours, theirs = nnx.filterlib.PathIn(*paths), flax_nnx.filterlib.PathIn(*paths)
    assert ours(probe, None) == theirs(probe, None)
    assert ours == nnx.filterlib.PathIn(*reversed(paths)) and hash(ours) == hash(
        nnx.filterlib.PathIn(*paths)
    )
    assert nnx.filterlib.to_predicate(ours)(probe, None) == theirs(probe, None)


@given(st.dictionaries(st.sampled_from("abc"), st.integers(0, 2), min_size=1))
def test_create_path_filters_as_flaxs(values: dict) -> None:
    ours = nnx.statelib.create_path_filters(nnx.State({"x": dict(values), "y": 1}))
    theirs = flax_nnx.statelib.create_path_filters(flax_nnx.State({"x": dict(values), "y": 1}))
    assert {v: f.paths for f, v in ours.items()} == {v: f.paths for f, v in theirs.items()}


def test_helpers_ids_and_summary_records() -> None:
    from flax.nnx import helpers as flax_helpers

    for fn in (lambda x, *, rngs: x, lambda rngs: 0, lambda **kw: 0, lambda *, other: 0):
        assert nnx.helpers.has_keyword_arg(fn, "rngs") == flax_helpers.has_keyword_arg(fn, "rngs")
    assert nnx.helpers.TrainState is nnx.TrainState
    make = nnx.ids.UUIDManager()
    assert make() != make() and isinstance(make(), nnx.ids.UUID)
    size = nnx.summary.SizeBytes.from_any({"a": jnp.ones((2, 3)), "b": 1})
    assert (size.size, size.bytes, bool(nnx.summary.SizeBytes(0, 0))) == (6, 24, False)
    assert repr(size) == repr(flax_nnx.summary.SizeBytes.from_any({"a": jnp.ones((2, 3))}))
    assert repr(nnx.summary.SimpleObjectRepr(nnx.Rngs(0))) == "Rngs(...)"
    assert isinstance(nnx.summary.in_ipython, bool) and isinstance(
        nnx.visualization.in_ipython, bool
    )


def test_bridge_names_at_flaxs_paths() -> None:
    from flax import linen

    from flaxgraph import bridge
    from flaxgraph.bridge import module as bridge_module
    from flaxgraph.bridge import variables as bridge_variables
    from flaxgraph.bridge import wrappers

    assert isinstance(bridge.Module, bridge_module.ModuleMeta)
    assert issubclass(bridge.Module, bridge_module.ModuleBase)
    assert bridge_module.current_module() is None
    seen = []

    class Outer(bridge.Module):
        @bridge.compact
        def __call__(self, x):
            seen.append(bridge_module.current_module())
            return x

    outer = Outer()
    outer(1)
    assert seen == [outer]
    assert bridge_module.has_setup(type("S", (), {"setup": lambda self: None})())
    keypath = jax.tree_util.tree_flatten_with_path({"batch_stats": {"m": 1}})[0][0][0]
    assert bridge_variables.get_col_name(keypath) == "batch_stats"
    found = {}

    class Probe(linen.Module):
        @linen.compact
        def __call__(self, x):
            found["module"] = wrappers.current_linen_module()
            found["rngs"] = sorted(wrappers.linen_rngs_dict(self, add_default=True))
            return x

    Probe().init({"params": jax.random.key(0), "dropout": jax.random.key(1)}, 1)
    assert isinstance(found["module"], Probe) and found["rngs"] == ["default", "dropout", "params"]
    assert wrappers.current_linen_module() is None


def test_graphlib_registered_pytree_node_type_is_walked_by_value() -> None:
    from flaxgraph import graphlib

    class Pair:
        def __init__(self, a, b):
            self.a, self.b = a, b

    graphlib.register_pytree_node_type(
        Pair,
        lambda p: ([("a", p.a), ("b", p.b)], None),
        lambda children, _: Pair(*(v for _, v in children)),
    )
    with pytest.raises(ValueError, match="already registered"):
        graphlib.register_pytree_node_type(Pair, lambda p: ([], None), lambda c, a: Pair(0, 0))
    assert graphlib.is_node_type(Pair) and graphlib.is_pytree_node(Pair(1, 2))
    model = nnx.Dict(pair=Pair(nnx.Param(jnp.ones(2)), 3))
    _, state = nnx.split(model)
    assert [p for p, _ in state.flat_state()] == [("pair", "a")]
    assert graphlib.get_node_impl(Pair(1, 2)) is graphlib.PYTREE_REGISTRY[Pair]
    assert graphlib.get_node_impl(nnx.Param(1)) is None
    assert graphlib.get_node_impl(model) is graphlib.GRAPH_REGISTRY[nnx.Dict]


def test_graphlib_helpers_match_flax() -> None:
    from flax.nnx import graphlib as flax_graphlib

    from flaxgraph import graphlib

    for tree in ({"a": [0, {"b": 1}]}, (1, [2, 3]), {"x": {"y": (4,)}}):
        ours = [
            graphlib.jax_to_nnx_path(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]
        ]
        theirs = [
            flax_graphlib.jax_to_nnx_path(p)
            for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]
        ]
        assert ours == theirs
    children, aux = graphlib.PYTREE_NODE_IMPL.flatten({"b": 1, "a": 2})
    assert children == [("a", 2), ("b", 1)]
    assert graphlib.PYTREE_NODE_IMPL.unflatten(children, aux) == {"b": 1, "a": 2}
    assert jax.tree.leaves(graphlib.Static(3)) == [] and graphlib.Static(3) == graphlib.Static(3)
    model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    (params,) = graphlib.graph_pop(model, (nnx.Param,))
    assert set(params) == {"kernel", "bias"} and not hasattr(model, "kernel")
    step = graphlib.cached_partial(nnx.jit(lambda m, x: m(x)), nnx.Linear(2, 2, rngs=nnx.Rngs(0)))
    assert step(jnp.ones(2)).shape == (2,)
    assert graphlib.cached_partial(lambda a, b: a + b, 1)(2) == 3
    assert nnx.graph.is_node is graphlib.is_node  # the old module name re-exports them


small_trees = st.recursive(
    st.integers(0, 3),
    lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=3).map(tuple),
        st.dictionaries(st.sampled_from("ab"), inner, min_size=1, max_size=2),
    ),
    max_leaves=5,
)


@given(tree=small_trees, index=st.integers(0, 2), value=st.integers())
def test_extract_tree_helpers_match_flax(tree: Any, index: int, value: int) -> None:
    from flax.nnx import extract as flax_extract

    from flaxgraph import extract

    t = tuple(range(3))
    for name in ("mask_at", "slice_at"):
        assert repr(getattr(extract, name)(t, index)) == repr(getattr(flax_extract, name)(t, index))
    assert extract.replace_at(t, index, value) == flax_extract.replace_at(t, index, value)
    assert extract.find(t, index) == flax_extract.find(t, index)
    assert extract.broadcast_prefix(0, tree) == flax_extract.broadcast_prefix(0, tree)
    assert extract.broadcast_prefix2(tree, tree) == flax_extract.broadcast_prefix2(tree, tree)
    plus = lambda path, p, leaf: (p, leaf + 1)
    assert extract.broadcast_prefix_map(plus, 7, tree) == flax_extract.broadcast_prefix_map(
        plus, 7, tree
    )
    odd = lambda path, p, leaf: leaf % 2 == 1
    ours, taken = extract.extract(odd, 0, tree)
    theirs, flax_taken = flax_extract.extract(odd, 0, tree)
    assert taken == flax_taken and extract.insert(ours, taken) == tree
    assert repr(jax.tree.structure(ours)) == repr(jax.tree.structure(theirs))


def test_extract_records_and_variable_helpers() -> None:
    from flaxgraph import extract

    t = extract.labeled(a=1, b=2)
    assert (t["b"], t[0], t.keys()) == (2, 1, ("a", "b"))
    assert type(extract.labeled(a=0, b=0)) is type(t)
    d = extract.OrderedDict(b=1, a=2)
    assert jax.tree.leaves(d) == [1, 2] and jax.tree.map(lambda x: x, d) == d
    assert extract.Opaque(1) == extract.Opaque(2) and hash(extract.Opaque(1)) == 0
    v = nnx.Param(jnp.ones(2))
    current, copied = extract.snapshot([v])
    assert current[0] is v and copied[0] is not v
    assert not extract.variable_changed(v, v) and not extract.variable_changed(copied[0], v)
    assert extract.variable_changed(jax.tree.map(lambda x: x + 1, v), v)
    w = nnx.Param(jnp.zeros(2))
    assert extract.update_carry_variables([v], [w])[0] is v and float(v[...].sum()) == 0.0
    with pytest.raises(ValueError, match="identity must be preserved"):
        extract.check_same_variables([v], [w], "fori_loop")
    assert extract.filter_kwargs(lambda a, *, b: 0, a=1, b=2, c=3) == {"a": 1, "b": 2}
    assert isinstance(nnx.StateAxes({nnx.Param: 0}), extract.PrefixMapping)
    with pytest.raises(FlaxInternalError, match="check_prefix"):
        extract.check_prefix(1, 2)
