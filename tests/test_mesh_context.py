"""Eager sharding, logical axis rules and the spec checks (flaxgraph/mesh_context.py),
and the abstract sharded models of flaxgraph/abstract.py.

In-process tests cover the flags, the rules (property-based against a dict lookup)
and the errors on a one-device mesh. The placements need several devices, so they
run in one subprocess on 8 simulated CPU devices (``run_device_checks``): eager
placement under ``jax.set_mesh`` (explicit and auto axes) or ``mesh=`` metadata,
inside ``nnx.jit``, turned off; logical names; ``get_abstract_model`` /
``as_abstract``; the optimizer state placed like its parameters, and a sharded
training step equal to the same step on one device.
"""

from __future__ import annotations

import textwrap
import threading
from typing import Any

import flax
import jax
import jax.numpy as jnp
import pytest
from flax import nnx as flax_nnx
from flax.linen import partitioning as linen_partitioning
from helpers import assert_checks_passed, run_device_checks
from hypothesis import given
from hypothesis import strategies as st
from jax.sharding import PartitionSpec as P

import flaxgraph as nnx
from flaxgraph.mesh_context import get_logical_axis_rules, resolve_names

# -- flags ---------------------------------------------------------------------------------


def test_use_eager_sharding_sets_at_once_and_restores_as_a_context_manager() -> None:
    assert nnx.using_eager_sharding() is True
    with nnx.use_eager_sharding(False):
        assert nnx.using_eager_sharding() is False
        with nnx.use_eager_sharding(True):
            assert nnx.using_eager_sharding() is True
        assert nnx.using_eager_sharding() is False
    assert nnx.using_eager_sharding() is True
    nnx.use_eager_sharding(False)  # not as a context manager: for the rest of the thread
    try:
        assert nnx.using_eager_sharding() is False
    finally:
        nnx.use_eager_sharding(True)
    assert nnx.using_eager_sharding() is True


def _eager_sharding_program(lib: Any) -> list[Any]:
    """Every way of setting eager sharding, with what Flax's class methods see."""
    u = lib.use_eager_sharding
    seen: list[Any] = [(u.get_default(), list(u.get_stack()), u.current_value())]
    lib.use_eager_sharding(False)
    seen.append((u.get_default(), list(u.get_stack()), u.current_value()))
    with lib.use_eager_sharding(True):
        seen.append((list(u.get_stack()), u.current_value()))
        with lib.use_eager_sharding(False):
            seen.append((list(u.get_stack()), u.current_value(), lib.using_eager_sharding()))
        seen.append((list(u.get_stack()), u.current_value()))

    @lib.use_eager_sharding(True)
    def decorated() -> Any:
        return list(u.get_stack()), u.current_value(), lib.using_eager_sharding()

    seen += [(list(u.get_stack()), u.current_value()), decorated(), list(u.get_stack())]
    other: list[Any] = []  # another thread has its own stack
    thread = threading.Thread(target=lambda: other.append((list(u.get_stack()), u.current_value())))
    thread.start()
    thread.join()
    lib.use_eager_sharding(True)
    seen += [other, (list(u.get_stack()), u.current_value())]
    u.get_stack().clear()
    return seen


def test_use_eager_sharding_class_methods_behave_as_flax_s() -> None:
    flax_nnx.use_eager_sharding.get_stack().clear()
    nnx.use_eager_sharding.get_stack().clear()
    ours, theirs = _eager_sharding_program(nnx), _eager_sharding_program(flax_nnx)
    assert ours == theirs
    assert ours[1] == (True, [False], False)  # a plain call: default kept, stack top set


def _flax_config_program(lib: Any) -> list[Any]:
    """Eager sharding's default set through Flax's configuration object, as a program that
    ran under the drop-in would (only ``flax.nnx`` is bound; ``flax.config`` is Flax's)."""
    mesh = jax.make_mesh((1,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    u = lib.use_eager_sharding
    seen: list[Any] = []
    for value in (False, True):
        flax.config.update("flax_always_shard_variable", value)
        seen.append((u.get_default(), u.current_value(), lib.using_eager_sharding()))
        with jax.set_mesh(mesh):  # a name the mesh lacks fails only when placed eagerly
            try:
                lib.Param(jnp.ones((2, 4)), out_sharding=("vocab", None))
                seen.append("created")
            except ValueError:
                seen.append("refused")
            with lib.use_eager_sharding(not value):  # a block still overrides the default
                seen.append(lib.using_eager_sharding())
    return seen


def test_flax_config_sets_the_eager_sharding_default_as_in_flax() -> None:
    """Flax NNX 0.12.8 reads eager sharding's default from ``flax.config``
    (``flax_always_shard_variable``): flaxgraph follows the same setting once Flax is
    imported, and its own ``config.update`` writes it there."""
    try:
        ours, theirs = _flax_config_program(nnx), _flax_config_program(flax_nnx)
        assert ours == theirs
        assert ours[:2] == [(False, False, False), "created"]
        nnx.config.update("flax_always_shard_variable", False)
        assert flax.config.flax_always_shard_variable is False
        assert flax_nnx.using_eager_sharding() is False and nnx.using_eager_sharding() is False
    finally:
        flax.config.update("flax_always_shard_variable", True)
    assert nnx.using_eager_sharding() is True


def test_use_eager_sharding_rejects_non_bools() -> None:
    with pytest.raises(TypeError, match="bool"):
        nnx.use_eager_sharding(1)  # type: ignore[arg-type]
    assert nnx.using_eager_sharding() is True


def test_names_without_a_mesh_are_only_metadata() -> None:
    w = nnx.Param(jnp.ones((2, 4)), out_sharding=("data", "model"))
    assert w.out_sharding == ("data", "model")
    assert isinstance(w.value, jax.Array)


# -- logical axis rules ----------------------------------------------------------------------

LOGICAL = st.sampled_from(["batch", "embed", "mlp", "heads", "vocab"])
MESH_AXES = st.one_of(st.none(), st.sampled_from(["data", "model"]), st.just(("data", "model")))


@given(
    rules=st.lists(st.tuples(LOGICAL, MESH_AXES), max_size=6),
    names=st.lists(st.one_of(st.none(), LOGICAL, st.sampled_from(["data", "x"])), max_size=4),
)
def test_logical_names_resolve_by_the_last_rule_and_others_pass_through(
    rules: list[tuple[str, object]], names: list[object]
) -> None:
    table = dict(rules)  # Flax 0.12.8 reads the rules into a dict: the last rule wins
    expected = tuple(table.get(n, n) if isinstance(n, str) else n for n in names)
    with nnx.logical_axis_rules(rules):
        assert resolve_names(names) == expected
        w = nnx.Param(jnp.ones((1,) * len(names)), out_sharding=tuple(names))
        assert nnx.get_partition_spec(w).value == P(*expected)
    assert resolve_names(names) == tuple(names)
    # the same rules and names on the real Flax 0.12.8
    with flax_nnx.logical_axis_rules(rules):
        w_flax = flax_nnx.Param(
            jnp.ones((1,) * len(names)), out_sharding=tuple(names), eager_sharding=False
        )
        assert flax_nnx.get_partition_spec(w_flax).get_value() == P(*expected)


def test_linen_axis_rules_and_nnx_rules_are_one_setting() -> None:
    # Flax keeps one store of logical axis rules: Linen's ``partitioning.axis_rules``
    # blocks apply to new NNX Variables, and the innermost block of either kind wins.
    mesh = jax.make_mesh((1, 1), ("fsdp", "stage"))
    rules = (("embed", "fsdp"), ("embed", "stage"))
    for lib in (nnx, flax_nnx):
        with jax.set_mesh(mesh), linen_partitioning.axis_rules(rules):
            w = lib.Param(jnp.zeros((3,)), out_sharding=("embed",))
            assert w.get_value().sharding.spec == P("stage"), lib
            with lib.logical_axis_rules([("embed", "fsdp")]):
                inner = lib.Param(jnp.zeros((3,)), out_sharding=("embed",))
                assert inner.get_value().sharding.spec == P("fsdp"), lib
        with linen_partitioning.axis_rules(rules):
            assert get_logical_axis_rules() == rules


def test_trailing_none_entries_past_the_rank_are_accepted_as_in_flax() -> None:
    mesh = jax.make_mesh((1,), ("data",))
    for lib in (nnx, flax_nnx):
        w = lib.Param(jnp.zeros((3,)), out_sharding=("data", None), mesh=mesh)
        assert w.get_value().sharding.spec == P("data"), lib
    with pytest.raises(nnx.ShardingSpecError, match="rank 1"):
        nnx.Param(jnp.zeros((3,)), out_sharding=("data", "data"), mesh=mesh)


def test_inner_rules_replace_outer_rules() -> None:
    with nnx.logical_axis_rules([("a", "x"), ("c", "z")]):
        with nnx.logical_axis_rules([("b", "y")]):
            assert resolve_names(("a", "b", "c")) == ("a", "y", "c")
        assert resolve_names(("a", "b", "c")) == ("x", "b", "z")


@pytest.mark.parametrize("rule", [("a",), ("a", 1), (1, "x"), "ax"])
def test_malformed_rules_raise_type_error(rule: object) -> None:
    with pytest.raises(TypeError, match="logical_axis_rules"):
        with nnx.logical_axis_rules([rule]):  # type: ignore[list-item]
            pass


# -- errors on a one-device mesh --------------------------------------------------------------


class Block(nnx.Module):
    def __init__(self, names: tuple[object, ...]) -> None:
        self.inner = nnx.List([nnx.Param(jnp.ones((2, 3)), out_sharding=names)])


MESH1 = jax.make_mesh((1, 1), ("data", "model"))


def test_unknown_axis_error_names_path_spec_and_mesh_axes() -> None:
    state = nnx.state(Block(("data", "expert")))
    with pytest.raises(nnx.ShardingSpecError) as info:
        nnx.get_named_sharding(state, MESH1)
    msg = str(info.value)
    assert "'inner/0'" in msg and "P('data', 'expert')" in msg
    assert "'expert'" in msg and "('data', 'model')" in msg
    assert isinstance(info.value, ValueError)


def test_rank_mismatch_error_names_path_spec_and_shape() -> None:
    state = nnx.state(Block(("data", None, "model")))
    with pytest.raises(nnx.ShardingSpecError) as info:
        nnx.get_named_sharding(state, MESH1)
    msg = str(info.value)
    assert "'inner/0'" in msg and "P('data', None, 'model')" in msg and "(2, 3)" in msg


def test_eager_creation_errors_name_the_kind_spec_and_mesh() -> None:
    with jax.set_mesh(MESH1):
        with pytest.raises(nnx.ShardingSpecError, match=r"new Param of shape \(2, 3\).*'tp'"):
            nnx.Param(jnp.ones((2, 3)), out_sharding=("data", "tp"))
        with pytest.raises(nnx.ShardingSpecError, match=r"rank 2"):
            nnx.Param(jnp.ones((2, 3)), out_sharding=("data", None, "model"))
        with nnx.use_eager_sharding(False):  # off: names are not checked at creation
            nnx.Param(jnp.ones((2, 3)), out_sharding=("data", None, "model"))


def test_a_spec_shorter_than_the_rank_pads_with_none() -> None:
    # As in JAX (and Flax NNX 0.12.8): P('data') on a (2, 3) value is P('data', None).
    with jax.set_mesh(MESH1):
        v = nnx.Param(jnp.ones((2, 3)), out_sharding=("data",))
        assert v.value.sharding.is_equivalent_to(
            jax.sharding.NamedSharding(MESH1, P("data", None)), 2
        )
        assert nnx.Param(jnp.ones((2, 3)), out_sharding=(None,)).value.shape == (2, 3)
    named = nnx.get_named_sharding(nnx.state(Block(("data",))), MESH1)
    assert jax.tree.leaves(named)[0].spec == P("data")


def test_get_abstract_model_error_names_the_path() -> None:
    def init() -> nnx.Linear:
        return nnx.Linear(2, 3, rngs=nnx.Rngs(0), kernel_metadata={"out_sharding": ("x", None)})

    with pytest.raises(nnx.ShardingSpecError, match=r"Param at 'kernel'.*'x'"):
        nnx.get_abstract_model(init, MESH1)


def test_get_abstract_model_allocates_nothing_and_gives_graphdef_and_shardings() -> None:
    calls = []

    def init() -> nnx.Linear:
        calls.append(1)
        return nnx.Linear(
            2, 3, rngs=nnx.Rngs(0), kernel_metadata={"out_sharding": ("data", "model")}
        )

    graphdef, abstract = nnx.get_abstract_model(init, MESH1)
    assert isinstance(graphdef, nnx.GraphDef) and calls == [1]
    kernel, bias = abstract["kernel"].value, abstract["bias"].value
    assert isinstance(kernel, jax.ShapeDtypeStruct) and kernel.shape == (2, 3)
    assert kernel.sharding.spec == P("data", "model") and bias.sharding.spec == P()
    assert abstract["kernel"].out_sharding == ("data", "model")  # metadata kept
    model = nnx.merge(graphdef, abstract)
    assert isinstance(model, nnx.Linear)


# -- several devices ------------------------------------------------------------------------

SCRIPT = textwrap.dedent(
    r"""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
    import flaxgraph as nnx


    EXPLICIT = jax.make_mesh((2, 4), ("data", "model"))
    AUTO = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)

    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.Linear(4, 8, rngs=rngs, kernel_metadata={"out_sharding": ("embed", "mlp")},
                                 bias_metadata={"out_sharding": ("mlp",)})
            self.l2 = nnx.Linear(8, 2, rngs=rngs, kernel_metadata={"out_sharding": ("mlp", None)})

        def __call__(self, x):
            return self.l2(jax.nn.relu(self.l1(x)))

    RULES = [("embed", "data"), ("mlp", "model")]
    SPECS = {("l1", "kernel"): P("data", "model"), ("l1", "bias"): P("model"),
             ("l2", "kernel"): P("model", None), ("l2", "bias"): P()}

    def norm(spec):  # P('model', None) and P('model') are the same layout
        parts = list(spec)
        while parts and parts[-1] is None:
            parts.pop()
        return P(*parts)

    SPECS = {k: norm(v) for k, v in SPECS.items()}

    def specs(model):
        return {k: norm(getattr(getattr(model, k[0]), k[1]).value.sharding.spec) for k in SPECS}

    def shards(x):
        return sorted((s.device.id, tuple((i.start, i.stop) for i in s.index)) for s in x.addressable_shards)

    @check
    def eager_placement_under_set_mesh_explicit_and_auto():
        for mesh in (EXPLICIT, AUTO):
            with jax.set_mesh(mesh), nnx.logical_axis_rules(RULES):
                model = MLP(nnx.Rngs(0))
            assert specs(model) == SPECS, specs(model)
            k = model.l1.kernel.value
            assert len(k.sharding.device_set) == 8
            # each device holds a (2, 2) block: data splits rows, model splits columns
            assert {tuple(s.data.shape) for s in k.addressable_shards} == {(2, 2)}
            with nnx.use_eager_sharding(False):
                ref = MLP(nnx.Rngs(0))
            np.testing.assert_array_equal(np.asarray(k), np.asarray(ref.l1.kernel.value))

    @check
    def eager_placement_with_mesh_metadata_and_no_context():
        v = nnx.Param(jnp.arange(16.0).reshape(2, 8), out_sharding=("data", "model"), mesh=AUTO)
        assert v.value.sharding == NamedSharding(AUTO, P("data", "model"))
        np.testing.assert_array_equal(np.asarray(v.value), np.arange(16.0).reshape(2, 8))

    @check
    def eager_sharding_off_leaves_values_in_place():
        with jax.set_mesh(AUTO):
            with nnx.use_eager_sharding(False):
                a = nnx.Param(jnp.ones((2, 8)), out_sharding=("data", "model"))
            b = nnx.Param(jnp.ones((2, 8)), out_sharding=("data", "model"), eager_sharding=False)
        for v in (a, b):  # replicated as any new array under the mesh, not split
            assert norm(v.value.sharding.spec) == P(), v.value.sharding
            assert {tuple(s.data.shape) for s in v.value.addressable_shards} == {(2, 8)}

    @check
    def eager_placement_inside_jit():
        for mesh in (EXPLICIT, AUTO):
            with jax.set_mesh(mesh), nnx.logical_axis_rules(RULES):
                model = nnx.jit(lambda: MLP(nnx.Rngs(0)))()
            assert specs(model) == SPECS, specs(model)

    @check
    def abstract_model_restores_sharded_with_jit_out_shardings():
        with nnx.logical_axis_rules(RULES):
            graphdef, abstract = nnx.get_abstract_model(lambda: MLP(nnx.Rngs(0)), AUTO)
        for (layer, name), spec in SPECS.items():
            sds = abstract[layer][name].value
            assert isinstance(sds, jax.ShapeDtypeStruct), sds
            assert sds.sharding.mesh == AUTO and norm(sds.sharding.spec) == spec, sds
        out_shardings = jax.tree.map(lambda v: v.sharding, abstract)
        with nnx.use_eager_sharding(False):
            state = jax.jit(lambda: nnx.state(MLP(nnx.Rngs(0))), out_shardings=out_shardings)()
        model = nnx.merge(graphdef, state)
        assert specs(model) == SPECS

    @check
    def as_abstract_uses_the_active_mesh_or_the_mesh_metadata():
        with nnx.use_eager_sharding(False):
            abstract = nnx.eval_shape(lambda: MLP(nnx.Rngs(0)))
        assert abstract.l1.kernel.value.sharding is None
        with jax.set_mesh(AUTO), nnx.logical_axis_rules(RULES):
            out = nnx.as_abstract(abstract)
            old = nnx.abstract_with_sharding(abstract)
        assert out.l1.kernel.value.sharding.spec == P("data", "model")
        assert old.l1.kernel.value.sharding.spec == P("data", "model")
        assert abstract.l1.kernel.value.sharding is None  # the input is unchanged
        v = nnx.Param(jax.ShapeDtypeStruct((2, 8), jnp.float32), out_sharding=(None, "model"), mesh=AUTO)
        st = nnx.as_abstract(nnx.State({"v": v}))
        assert st["v"].value.sharding == NamedSharding(AUTO, P(None, "model"))

    @check
    def optimizer_state_is_sharded_like_its_parameters_and_trains_like_one_device():
        x = jax.random.normal(jax.random.key(1), (8, 4))
        y = jax.random.normal(jax.random.key(2), (8, 2))

        def train(model, opt, x, y):
            @nnx.jit
            def step(model, opt, x, y):
                loss, g = nnx.value_and_grad(lambda m: ((m(x) - y) ** 2).mean())(model)
                opt.update(model, g)
                return loss
            return [float(step(model, opt, x, y)) for _ in range(3)]

        with jax.set_mesh(AUTO), nnx.logical_axis_rules(RULES):
            model = MLP(nnx.Rngs(0))
            opt = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
            for (layer, name), spec in SPECS.items():
                for moment in ("mu", "nu"):
                    v = getattr(opt.opt_state[0], moment)[layer][name]
                    assert norm(v.value.sharding.spec) == spec, (layer, name, moment, v.value.sharding)
                    pspec = nnx.get_partition_spec(nnx.state(opt))["opt_state"][0][moment][layer][name]
                    assert norm(pspec.value) == spec
            xs = jax.device_put(x, NamedSharding(AUTO, P("data")))
            losses = train(model, opt, xs, y)
        assert specs(model) == SPECS
        for (layer, name), spec in SPECS.items():
            assert norm(opt.opt_state[0].mu[layer][name].value.sharding.spec) == spec
        with nnx.use_eager_sharding(False):
            ref = MLP(nnx.Rngs(0))
        ref_opt = nnx.Optimizer(ref, optax.adam(1e-2), wrt=nnx.Param)
        ref_losses = train(ref, ref_opt, x, y)
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
        np.testing.assert_allclose(np.asarray(model.l2.kernel.value), np.asarray(ref.l2.kernel.value), rtol=1e-5, atol=1e-6)

    """
)

CHECKS = [
    "eager_placement_under_set_mesh_explicit_and_auto",
    "eager_placement_with_mesh_metadata_and_no_context",
    "eager_sharding_off_leaves_values_in_place",
    "eager_placement_inside_jit",
    "abstract_model_restores_sharded_with_jit_out_shardings",
    "as_abstract_uses_the_active_mesh_or_the_mesh_metadata",
    "optimizer_state_is_sharded_like_its_parameters_and_trains_like_one_device",
]


def test_sharded_checks() -> None:
    assert_checks_passed(run_device_checks(SCRIPT), CHECKS)


def test_mixed_axis_types_mesh_is_an_error_at_creation() -> None:
    auto, explicit = jax.sharding.AxisType.Auto, jax.sharding.AxisType.Explicit
    mesh = jax.make_mesh((1, 1), ("row", "col"), axis_types=(auto, explicit))
    with pytest.raises(ValueError, match="all axes as Explicit or all axes as Auto"):
        nnx.Variable(jnp.ones((2, 2)), out_sharding=("row", "col"), mesh=mesh)


def test_creation_under_an_abstract_mesh_constrains_instead_of_placing() -> None:
    # Inside a transform only the AbstractMesh is known: no device_put there.
    @jax.jit
    def make():
        return nnx.Param(jnp.ones((2, 3)), out_sharding=("data", None)).value

    with jax.set_mesh(MESH1):
        out = make()
        assert nnx.eval_shape(lambda: nnx.Param(jnp.ones((2, 3)), out_sharding=("data",))).shape
    assert out.shape == (2, 3)


def test_a_variables_own_sharding_rules_join_the_active_rules() -> None:
    with jax.set_mesh(MESH1), nnx.logical_axis_rules([("embed", "model")]):
        v = nnx.Param(
            jnp.ones((2, 3)), out_sharding=("batch", "embed"), sharding_rules=(("batch", "data"),)
        )
        assert v.value.sharding.spec == P("data", "model")
        assert nnx.get_partition_spec(nnx.State({"v": v}))["v"].value == P("data", "model")
        with pytest.raises(ValueError, match="Inconsistent logical axis annotations for 'embed'"):
            nnx.Param(
                jnp.ones((2, 3)), out_sharding=("embed",), sharding_rules=(("embed", "data"),)
            )


def test_out_sharding_may_be_a_named_sharding() -> None:
    ns = jax.sharding.NamedSharding(MESH1, P("data", None))
    v = nnx.Variable(jnp.ones((2, 2)), out_sharding=ns)  # no mesh context needed
    assert v.value.sharding.is_equivalent_to(ns, 2)
