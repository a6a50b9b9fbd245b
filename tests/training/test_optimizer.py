"""Optimizer: differential against a hand-written optax loop on the pure parameter
pytree (eager, under nnx.jit, with donation), state it must not touch, wrt filters,
metadata carried to the optimizer state, and error messages.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import flaxgraph as nnx
from flaxgraph.training import ModelAndOptimizer, OptArray, Optimizer, OptState, OptVariable

N_STEPS = 5


class Trainable(nnx.Param):
    """A custom Param kind, for wrt filters."""


class MLP(nnx.Module):
    def __init__(self, seed: int = 0):
        k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
        self.w1 = nnx.Param(jax.random.normal(k1, (3, 4)) * 0.5, out_sharding=(None, "model"))
        self.b1 = nnx.Param(jnp.zeros(4), out_sharding=("model",))
        self.w2 = Trainable(jax.random.normal(k2, (4, 2)) * 0.5, out_sharding=("model", None))
        self.b2 = Trainable(jax.random.normal(k3, (2,)) * 0.1)
        self.stats = nnx.BatchStat(jnp.arange(4.0))
        self.calls = nnx.Variable(jnp.array(0))
        self.name = "mlp"

    def __call__(self, x: jax.Array) -> jax.Array:
        self.calls.value = self.calls.value + 1
        return jnp.tanh(x @ self.w1 + self.b1[None]) @ self.w2 + self.b2[None]


def pure_loss(p: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
    """MLP's loss on a plain dict of arrays: the reference the optimizer is checked against."""
    out = jnp.tanh(x @ p["w1"] + p["b1"][None]) @ p["w2"] + p["b2"][None]
    return ((out - y) ** 2).mean()


def model_loss(model: MLP, x: jax.Array, y: jax.Array) -> jax.Array:
    return ((model(x) - y) ** 2).mean()


def batch(step: int) -> tuple[jax.Array, jax.Array]:
    kx, ky = jax.random.split(jax.random.key(100 + step))
    return jax.random.normal(kx, (8, 3)), jax.random.normal(ky, (8, 2))


TXS: dict[str, Callable[[], optax.GradientTransformation]] = {
    "sgd": lambda: optax.sgd(0.1),
    "momentum": lambda: optax.sgd(0.1, momentum=0.9, nesterov=True),
    "adam": lambda: optax.adam(1e-2),
    "adamw": lambda: optax.adamw(1e-2, weight_decay=0.1),
    "clip+adam": lambda: optax.chain(optax.clip_by_global_norm(0.5), optax.adam(3e-2)),
}


def reference(
    make_tx: Callable[[], optax.GradientTransformation], keys: tuple[str, ...], n: int = N_STEPS
) -> tuple[dict[str, jax.Array], Any]:
    """n steps of the hand-written optax loop on the pure params ``keys`` of MLP()."""
    model = MLP()
    params = {k: getattr(model, k).value for k in keys}
    frozen = {k: getattr(model, k).value for k in ("w1", "b1", "w2", "b2") if k not in keys}
    tx = make_tx()
    state = tx.init(params)
    for i in range(n):
        x, y = batch(i)
        grads = jax.grad(lambda p: pure_loss({**p, **frozen}, x, y))(params)
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    return params, state


def values(model: MLP, keys: tuple[str, ...]) -> dict[str, jax.Array]:
    return {k: getattr(model, k).value for k in keys}


def assert_trees_close(a: Any, b: Any) -> None:
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-7)


def unboxed(tree: Any) -> Any:
    return jax.tree.map(lambda v: v.value, tree, is_leaf=lambda x: isinstance(x, nnx.Variable))


ALL = ("w1", "b1", "w2", "b2")


# -- 1. the same numbers as optax on the pure pytree ----------------------------------------


@pytest.mark.parametrize("name", list(TXS))
def test_eager_matches_handwritten_optax(name: str):
    model = MLP()
    optimizer = Optimizer(model, TXS[name](), wrt=nnx.Param)
    for i in range(N_STEPS):
        x, y = batch(i)
        grads = nnx.grad(model_loss)(model, x, y)
        optimizer.update(model, grads)
    expected_params, expected_state = reference(TXS[name], ALL)
    assert_trees_close(values(model, ALL), expected_params)
    assert int(optimizer.step.value) == N_STEPS
    assert optimizer.step.value.dtype == jnp.uint32
    # the optimizer state holds the same numbers as optax's, leaf by leaf
    ours = jax.tree.leaves(unboxed(optimizer.opt_state))
    assert len(ours) == len(jax.tree.leaves(expected_state))
    for a, b in zip(ours, jax.tree.leaves(expected_state)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["sgd", "adam", "adamw"])
@pytest.mark.parametrize("donate", [False, True])
def test_jit_matches_handwritten_optax_without_retracing(name: str, donate: bool):
    model = MLP()
    optimizer = Optimizer(model, TXS[name](), wrt=nnx.Param)
    traces = []

    def train_step(model: MLP, optimizer: Optimizer[MLP], x: jax.Array, y: jax.Array):
        traces.append(1)
        loss, grads = nnx.value_and_grad(model_loss)(model, x, y)
        optimizer.update(model, grads)
        return loss

    step = nnx.jit(train_step, donate_argnums=(0, 1) if donate else None)
    w1, mu_holder = model.w1, optimizer.opt_state
    for i in range(N_STEPS):
        step(model, optimizer, *batch(i))
    assert len(traces) == 1, "the training step retraced"
    expected_params, expected_state = reference(TXS[name], ALL)
    assert_trees_close(values(model, ALL), expected_params)
    for a, b in zip(jax.tree.leaves(unboxed(optimizer.opt_state)), jax.tree.leaves(expected_state)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7)
    # reference semantics: the same Variable objects were updated in place
    assert model.w1 is w1
    assert int(optimizer.step.value) == N_STEPS
    assert jax.tree.structure(optimizer.opt_state, is_leaf=_is_var) == jax.tree.structure(
        mu_holder, is_leaf=_is_var
    )
    # the model's other state went through the step too: the call counter moved
    assert int(model.calls.value) == N_STEPS


def _is_var(x: Any) -> bool:
    return isinstance(x, nnx.Variable)


def test_update_method_jitted_directly():
    model = MLP()
    optimizer = Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    update = nnx.jit(lambda opt, m, g: opt.update(m, g))
    for i in range(N_STEPS):
        grads = nnx.grad(model_loss)(model, *batch(i))
        updates = update(optimizer, model, grads)
        assert isinstance(updates, nnx.State)
    assert_trees_close(values(model, ALL), reference(TXS["adam"], ALL)[0])


def test_update_returns_the_updates():
    model = MLP()
    before = values(model, ALL)
    optimizer = Optimizer(model, optax.sgd(0.5), wrt=nnx.Param)
    grads = nnx.grad(model_loss)(model, *batch(0))
    updates = optimizer.update(model, grads)
    assert sorted(updates) == sorted(ALL)
    for k in ALL:
        np.testing.assert_allclose(updates[k], -0.5 * grads[k].value, rtol=1e-6)
        np.testing.assert_allclose(getattr(model, k).value, before[k] + updates[k], rtol=1e-6)


def test_grads_as_pure_nested_dict_are_accepted():
    model, twin = MLP(), MLP()
    opt, twin_opt = (
        Optimizer(model, optax.adam(1e-2), wrt=nnx.Param),
        Optimizer(twin, optax.adam(1e-2), wrt=nnx.Param),
    )
    grads = nnx.grad(model_loss)(model, *batch(0))
    opt.update(model, grads)
    twin_opt.update(twin, grads.to_pure_dict())
    assert_trees_close(values(model, ALL), values(twin, ALL))


def test_kwargs_are_passed_to_tx_update():
    # reduce_on_plateau needs the loss as `value`; compare with optax on pure arrays
    def make_tx() -> optax.GradientTransformation:
        return optax.chain(
            optax.sgd(0.3), optax.contrib.reduce_on_plateau(patience=1, factor=0.5, cooldown=0)
        )

    model = MLP()
    optimizer = Optimizer(model, make_tx(), wrt=nnx.Param)
    params = values(model, ALL)
    tx = make_tx()
    state = tx.init(params)
    x, y = batch(0)  # the same batch: the loss plateaus quickly
    for _ in range(6):
        loss, grads = nnx.value_and_grad(model_loss)(model, x, y)
        optimizer.update(model, grads, value=nnx.Variable(loss))  # Variables are unboxed
        ref_loss, ref_grads = jax.value_and_grad(pure_loss)(params, x, y)
        updates, state = tx.update(ref_grads, state, params, value=ref_loss)
        params = optax.apply_updates(params, updates)
    assert_trees_close(values(model, ALL), params)
    scale = unboxed(optimizer.opt_state)[1].scale
    np.testing.assert_allclose(scale, state[1].scale)


# -- 2. what the optimizer must not touch ---------------------------------------------------


def test_batch_stats_and_other_state_are_untouched():
    model = MLP()
    stats, calls, name = model.stats, model.calls, model.name
    stats_value = stats.value
    optimizer = Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    grads = nnx.grad(model_loss)(model, *batch(0))
    calls_value = calls.value
    optimizer.update(model, grads)
    assert model.stats is stats and model.stats.value is stats_value
    assert model.calls is calls and model.calls.value is calls_value
    assert model.name == name
    # and the parameters keep their kinds, metadata and dtypes
    assert type(model.w1) is nnx.Param and type(model.w2) is Trainable
    assert model.w1.out_sharding == (None, "model")
    assert model.w1.value.dtype == jnp.float32


def test_optimizer_does_not_hold_the_model():
    model = MLP()
    optimizer = Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    reachable = [v for _, v in nnx.iter_graph(optimizer)]
    assert not any(v is model or v is model.w1 for v in reachable)
    assert not any(isinstance(v, nnx.Param) for v in reachable)


def test_bfloat16_params_keep_their_dtype():
    class Half(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.ones(3, dtype=jnp.bfloat16))

    model = Half()
    optimizer = Optimizer(model, optax.adam(1e-1), wrt=nnx.Param)
    grads = nnx.grad(lambda m: (m.w.value.astype(jnp.float32) ** 2).sum())(model)
    optimizer.update(model, grads)
    assert model.w.value.dtype == jnp.bfloat16


# -- 3. wrt filters ------------------------------------------------------------------------------


def test_wrt_custom_param_kind():
    model = MLP()
    frozen = values(model, ("w1", "b1"))
    optimizer = Optimizer(model, optax.adam(1e-2), wrt=Trainable)
    diff = nnx.DiffState(0, Trainable)
    for i in range(N_STEPS):
        grads = nnx.grad(model_loss, argnums=diff)(model, *batch(i))
        optimizer.update(model, grads)
    for k, v in frozen.items():
        assert getattr(model, k).value is v, f"{k} was updated although wrt excludes it"
    assert_trees_close(values(model, ("w2", "b2")), reference(TXS["adam"], ("w2", "b2"))[0])
    mu = optimizer.opt_state[0].mu
    assert sorted(mu) == ["b2", "w2"]
    assert mu["w2"].source_type is Trainable


def test_wrt_list_filter_is_stored_hashable():
    model = MLP()
    optimizer = Optimizer(model, optax.sgd(0.1), wrt=[Trainable, nnx.PathContains("b1")])
    assert optimizer.wrt == (Trainable, nnx.PathContains("b1"))
    hash(nnx.graphdef(optimizer))
    w1 = model.w1.value
    grads = nnx.grad(model_loss, argnums=nnx.DiffState(0, optimizer.wrt))(model, *batch(0))
    updates = optimizer.update(model, grads)
    assert sorted(updates) == ["b1", "b2", "w2"]
    assert model.w1.value is w1


def test_grads_not_matching_wrt_name_missing_and_extra_paths():
    model = MLP()
    optimizer = Optimizer(model, optax.adam(1e-2), wrt=Trainable)
    weights = nnx.Any(nnx.PathContains("w1"), nnx.PathContains("w2"))
    grads = nnx.grad(model_loss, argnums=nnx.DiffState(0, weights))(model, *batch(0))
    # w2 is selected by wrt, w1 is not; b2 is missing
    before = [(v, v.value) for _, v in nnx.iter_graph((model, optimizer)) if _is_var(v)]
    with pytest.raises(ValueError, match=r"Optimizer\.update") as info:
        optimizer.update(model, grads)
    message = str(info.value)
    assert isinstance(info.value, nnx.GraphStructureError)
    assert "missing (1): b2" in message
    assert "extra (1): w1" in message
    assert "nnx.DiffState(0, Trainable)" in message
    # nothing was written
    assert all(v.value is old for v, old in before)


def test_grads_of_another_structure_raise_before_any_write():
    model = MLP()
    optimizer = Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    with pytest.raises(ValueError, match=r"missing \(4\): b1, b2, w1, w2"):
        optimizer.update(model, nnx.State({}))
    with pytest.raises(TypeError, match=r"grads must be an nnx\.State"):
        optimizer.update(model, [1.0])
    assert int(optimizer.step.value) == 0


def test_model_must_be_a_graph():
    with pytest.raises(TypeError, match="Expected a model"):
        Optimizer(nnx.Param(jnp.ones(2)), optax.sgd(0.1), wrt=nnx.Param)


# -- 4. optimizer state: kinds, metadata, sharding ------------------------------------------------


def test_opt_state_variables_copy_parameter_metadata():
    model = MLP()
    optimizer = Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    count, mu, nu = optimizer.opt_state[0]
    assert type(count) is OptArray and isinstance(count, OptState)
    for moments in (mu, nu):
        assert all(type(v) is OptVariable for v in moments.values())
        assert moments["w1"].out_sharding == (None, "model")
        assert moments["b1"].out_sharding == ("model",)
        assert moments["w2"].out_sharding == ("model", None)
        assert moments["w1"].source_type is nnx.Param
        assert moments["w2"].source_type is Trainable
    assert type(optimizer.step) is OptState


def test_partition_spec_of_optimizer_state_follows_the_model():
    model = MLP()
    optimizer = Optimizer(model, optax.adamw(1e-2), wrt=nnx.Param)
    specs = nnx.get_partition_spec(nnx.state(optimizer))
    model_specs = nnx.get_partition_spec(nnx.state(model, nnx.Param))
    for moment in ("mu", "nu"):
        for k in ALL:
            assert specs["opt_state"][0][moment][k].value == model_specs[k].value
    assert specs["opt_state"][0]["count"].value == jax.sharding.PartitionSpec()
    assert specs["step"].value == jax.sharding.PartitionSpec()


def test_named_shardings_place_the_optimizer_state():
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("model",))
    model = MLP()
    optimizer = Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    shardings = nnx.get_named_sharding(nnx.state(optimizer), mesh)
    state = nnx.state(optimizer)
    placed = jax.tree.map(
        lambda v, s: v.replace(jax.device_put(v.value, s.value)),
        state,
        shardings,
        is_leaf=_is_var,
    )
    nnx.update(optimizer, placed)
    assert optimizer.opt_state[0].mu["w1"].value.sharding.spec == jax.sharding.PartitionSpec(
        None, "model"
    )
    grads = nnx.grad(model_loss)(model, *batch(0))
    nnx.jit(lambda o, m, g: o.update(m, g))(optimizer, model, grads)
    assert int(optimizer.step.value) == 1


def test_factored_state_drops_sharding_of_other_shapes():
    class Wide(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.ones((8, 6)), out_sharding=("data", "model"))

    model = Wide()
    optimizer = Optimizer(model, optax.adafactor(1e-2, min_dim_size_to_factor=2), wrt=nnx.Param)
    found = {}
    for path, v in nnx.state(optimizer).flat_state():
        if isinstance(v, OptVariable):
            found[path[-2]] = (v.value.shape, v.get_metadata("out_sharding", None))
    # adafactor's row and column statistics have rank 1: the parameter's names would not fit
    assert sorted(found["v_row"][0] + found["v_col"][0]) == [6, 8]
    assert found["v_row"][1] is None and found["v_col"][1] is None
    nnx.get_partition_spec(nnx.state(optimizer))  # every spec fits its array's rank
    grads = nnx.grad(lambda m: (m.w.value**2).sum())(model)
    optimizer.update(model, grads)


# -- 5. Object behaviour: split/merge, pytree view, GraphDef ------------------------------------


def test_graphdef_is_hashable_and_stable_across_steps():
    model = MLP()
    optimizer = Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    before = nnx.graphdef(optimizer)
    hash(before)
    optimizer.update(model, nnx.grad(model_loss)(model, *batch(0)))
    assert nnx.graphdef(optimizer) == before
    assert hash(nnx.graphdef(optimizer)) == hash(before)


def test_split_merge_round_trip():
    model = MLP()
    optimizer = Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    optimizer.update(model, nnx.grad(model_loss)(model, *batch(0)))
    graphdef, state = nnx.split(optimizer)
    copy = nnx.merge(graphdef, state, copy=True)  # own Variables (merge shares them by default)
    assert copy.tx == optimizer.tx and copy.wrt is optimizer.wrt
    assert_trees_close(unboxed(copy.opt_state), unboxed(optimizer.opt_state))
    # the copy keeps optimising from where the original was
    twin = nnx.clone(model)
    grads = nnx.grad(model_loss)(model, *batch(1))
    optimizer.update(model, grads)
    copy.update(twin, grads)
    assert_trees_close(values(model, ALL), values(twin, ALL))


def test_pytree_view_holds_the_optimizer_state():
    model = MLP()
    optimizer = Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    leaves = jax.tree.leaves(optimizer)
    # step + count + mu (4) + nu (4)
    assert len(leaves) == 10
    doubled = jax.jit(lambda o: jax.tree.map(lambda x: x * 2, o))(optimizer)
    np.testing.assert_array_equal(doubled.opt_state[0].mu["w1"].value, 0.0)
    assert doubled.tx == optimizer.tx


def test_optimizer_created_inside_jit():
    model = MLP()

    @nnx.jit
    def init_and_step(model: MLP, x: jax.Array, y: jax.Array) -> Optimizer[MLP]:
        optimizer = Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
        optimizer.update(model, nnx.grad(model_loss)(model, x, y))
        return optimizer

    optimizer = init_and_step(model, *batch(0))
    assert isinstance(optimizer, Optimizer)
    assert int(optimizer.step.value) == 1
    assert_trees_close(values(model, ALL), reference(TXS["adam"], ALL, n=1)[0])


def test_state_that_stores_the_params_does_not_share_their_buffers():
    # a transformation keeping the initial params (as lookahead/schedule-free do): the
    # optimizer must hold copies, or donating model and optimizer together would pass
    # one buffer twice
    anchor = optax.GradientTransformation(
        lambda params: {"anchor": params}, lambda updates, state, params=None: (updates, state)
    )
    model = MLP()
    optimizer = Optimizer(model, optax.chain(anchor, optax.sgd(0.1)), wrt=nnx.Param)
    stored = optimizer.opt_state[0]["anchor"]
    assert stored["w1"].value is not model.w1.value
    np.testing.assert_array_equal(stored["w1"].value, model.w1.value)
    assert stored["w1"].out_sharding == model.w1.out_sharding

    def train_step(model: MLP, optimizer: Optimizer[MLP], x: jax.Array, y: jax.Array) -> None:
        optimizer.update(model, nnx.grad(model_loss)(model, x, y))

    step = nnx.jit(train_step, donate_argnums=(0, 1))
    for i in range(2):
        step(model, optimizer, *batch(i))
    assert_trees_close(values(model, ALL), reference(TXS["sgd"], ALL, n=2)[0])


def test_a_shared_tx_reuses_compiled_code_for_new_optimizers():
    tx = optax.adam(1e-2)
    traces = []

    @nnx.jit
    def train_step(model: MLP, optimizer: Optimizer[MLP], x: jax.Array, y: jax.Array) -> None:
        traces.append(1)
        optimizer.update(model, nnx.grad(model_loss)(model, x, y))

    for seed in range(3):  # a fresh model and optimizer per run, one tx
        model = MLP(seed)
        optimizer = Optimizer(model, tx, wrt=nnx.Param)
        assert optimizer.tx is tx
        train_step(model, optimizer, *batch(0))
    assert len(traces) == 1
    assert nnx.graphdef(Optimizer(MLP(), tx, wrt=nnx.Param)) == nnx.graphdef(optimizer)
    assert nnx.graphdef(Optimizer(MLP(), optax.adam(1e-2), wrt=nnx.Param)) != nnx.graphdef(
        optimizer
    )


# -- 5. wrt is required (Flax 0.11+); ModelAndOptimizer holds its model --------------------------


def test_missing_wrt_raises_and_points_to_model_and_optimizer():
    with pytest.raises(TypeError, match=r"wrt.*nnx\.ModelAndOptimizer"):
        Optimizer(MLP(), optax.sgd(0.1))
    # the signature says so too: wrt is keyword-only without a default
    import inspect

    wrt = inspect.signature(Optimizer.__init__).parameters["wrt"]
    assert wrt.kind is inspect.Parameter.KEYWORD_ONLY and wrt.default is inspect.Parameter.empty


@pytest.mark.parametrize("jit", [False, True])
def test_model_and_optimizer_matches_handwritten_optax(jit: bool):
    model = MLP()
    state = ModelAndOptimizer(model, optax.adam(1e-2))
    assert state.model is model and state.wrt is nnx.Param
    assert isinstance(state, Optimizer)

    def train_step(state: ModelAndOptimizer[MLP], x: jax.Array, y: jax.Array) -> None:
        grads = nnx.grad(model_loss)(state.model, x, y)
        state.update(grads)

    step = nnx.jit(train_step) if jit else train_step
    for i in range(N_STEPS):
        step(state, *batch(i))
    assert state.model is model  # the caller's model was updated in place
    assert_trees_close(values(model, ALL), reference(TXS["adam"], ALL)[0])
    assert int(state.step.value) == N_STEPS


def test_model_and_optimizer_wrt_and_update_signature():
    model = MLP()
    state = ModelAndOptimizer(model, optax.sgd(0.1), wrt=Trainable)
    grads = nnx.grad(model_loss, argnums=nnx.DiffState(0, Trainable))(model, *batch(0))
    w1 = model.w1.value
    state.update(grads)
    assert model.w1.value is w1  # not selected by wrt
    with pytest.raises(TypeError):
        state.update(model, grads)  # 0.12: update(grads, /, **kwargs) only


def test_deepcopy_builds_without_the_wrt_check():
    import copy

    model = MLP()
    for optimizer in (
        Optimizer(model, optax.adam(1e-2), wrt=nnx.Param),
        ModelAndOptimizer(model, optax.adam(1e-2)),
    ):
        twin = copy.deepcopy(optimizer)
        assert type(twin) is type(optimizer) and twin.wrt is nnx.Param
        assert_trees_close(unboxed(twin.opt_state), unboxed(optimizer.opt_state))


def test_optimizer_and_ema_take_the_graph_mode_of_their_walk():
    # Flax NNX 0.12: graph=False selects the optimised sub-state in tree mode, where a
    # shared Variable is an error naming its paths; graph mode accepts it.
    class Tied(nnx.Module):
        def __init__(self) -> None:
            self.a = nnx.Param(jnp.zeros(2))
            self.b = self.a

    with pytest.raises(nnx.SharedReferenceError, match=r"node\.a"):
        nnx.Optimizer(Tied(), optax.sgd(0.1), wrt=nnx.Param, graph=False)
    with pytest.raises(nnx.SharedReferenceError):
        nnx.ModelAndOptimizer(Tied(), optax.sgd(0.1), graph=False)
    with pytest.raises(nnx.SharedReferenceError):
        nnx.EMA(Tied(), 0.9, graph=False)
    model = Tied()
    opt = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param, graph=True)
    opt.update(model, nnx.State({"a": nnx.Param(jnp.ones(2))}))
    np.testing.assert_allclose(model.b[...], -0.1 * np.ones(2))
    assert list(nnx.EMA(Tied(), 0.9, graph=True).params) == ["a"]


def test_optimizer_sharding_metadata_shards_the_mirrored_state():
    mesh = jax.make_mesh((1, 1), ("row", "col"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    with jax.set_mesh(mesh):
        model = nnx.Linear(
            4, 2, rngs=nnx.Rngs(0), kernel_metadata={"optimizer_sharding": ("row", "col")}
        )
        optimizer = Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    mu = optimizer.opt_state[0].mu["kernel"]
    assert mu.out_sharding == ("row", "col")
    assert "optimizer_sharding" not in mu.get_metadata()
    assert mu.value.sharding.spec == jax.sharding.PartitionSpec("row", "col")
    assert model.kernel.value.sharding.spec == jax.sharding.PartitionSpec()
    assert optimizer.opt_state[0].mu["bias"].get_metadata("out_sharding", None) is None


def test_update_takes_tree_mode_grads_shaped_like_the_model():
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    optimizer = Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    x, y = jnp.ones((4, 2)), jnp.zeros((4, 3))

    @nnx.jit(graph=False)
    def train_step(model: Any, optimizer: Any) -> Any:
        loss_fn = lambda m: jnp.mean((m(x) - y) ** 2)
        loss, grads = nnx.value_and_grad(loss_fn, graph=False)(model)
        assert isinstance(grads, nnx.Linear)
        optimizer.update(model, grads)
        return loss

    assert train_step(model, optimizer) > train_step(model, optimizer)
    assert int(optimizer.step.value) == 2


def test_update_rejects_grads_of_another_type_with_the_accepted_forms():
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    optimizer = Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    with pytest.raises(TypeError, match=r"nnx\.State .* nested mapping .* model-shaped"):
        optimizer.update(model, [1.0])
