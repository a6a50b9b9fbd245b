"""Checkpoints through orbax-checkpoint (flaxgraph/serialization.py).

* ``nnx.state`` of a model holding ``Rngs`` and of an ``Optimizer`` saves and
  restores with ``ocp.StandardCheckpointer`` and ``ocp.CheckpointManager`` as it is
  (no filtering), typed PRNG keys included: restored keys are typed, of the same
  implementation and key data, and training resumed from the checkpoint equals
  training continued in memory (same dropout masks, same optimizer moments).
* ``save_state``/``load_state`` round-trip into concrete and abstract targets.
* A mismatch (shape, dtype, missing or extra path) raises ``GraphStructureError``
  naming the Variable's path with both values, before anything is read; as a
  property, ``check_checkpoint`` raises exactly when something differs and names
  every differing path.
* On 8 simulated devices (subprocess): a sharded State restores straight onto a
  mesh from ``get_abstract_model``, with another layout than it was saved with.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_checks_passed, run_device_checks
from hypothesis import given
from hypothesis import strategies as st

import flaxgraph as nnx

ocp = pytest.importorskip("orbax.checkpoint")
optax = pytest.importorskip("optax")


class Net(nnx.Module):
    def __init__(self, hidden: int, rngs: nnx.Rngs) -> None:
        self.l1 = nnx.Linear(3, hidden, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)
        self.l2 = nnx.Linear(hidden, 2, rngs=rngs)
        self.rngs = rngs

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.l2(self.drop(jax.nn.relu(self.l1(x))))


X = jnp.linspace(-1.0, 1.0, 12).reshape(4, 3)
Y = jnp.ones((4, 2))


@nnx.jit
def train_step(model: Net, opt: nnx.Optimizer[Net]) -> jax.Array:
    loss, grads = nnx.value_and_grad(lambda m: ((m(X) - Y) ** 2).mean())(model)
    opt.update(model, grads)
    return loss


def make(seed: int, hidden: int = 8) -> tuple[Net, nnx.Optimizer[Net]]:
    model = Net(hidden, nnx.Rngs(params=seed, dropout=seed + 1))
    return model, nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)


def leaves_equal(a: Any, b: Any) -> None:
    fa, fb = nnx.state(a).flat_state(), nnx.state(b).flat_state()
    assert [p for p, _ in fa] == [p for p, _ in fb]
    for (path, va), (_, vb) in zip(fa, fb):
        assert type(va) is type(vb), path
        x, y = va.value, vb.value
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            assert jnp.issubdtype(y.dtype, jax.dtypes.prng_key), path
            assert jax.random.key_impl(x) == jax.random.key_impl(y), path
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        assert x.dtype == y.dtype, path
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=str(path))


def trained() -> tuple[Net, nnx.Optimizer[Net]]:
    model, opt = make(0)
    for _ in range(2):
        train_step(model, opt)
    return model, opt


def test_standard_checkpointer_round_trips_rngs_and_optimizer_and_resumes_identically(
    tmp_path: Path,
) -> None:
    model, opt = trained()
    with ocp.StandardCheckpointer() as ckpt:
        ckpt.save(tmp_path / "ckpt", nnx.state((model, opt)))
    fresh, fresh_opt = make(7)
    with ocp.StandardCheckpointer() as ckpt:
        restored = ckpt.restore(tmp_path / "ckpt", nnx.state((fresh, fresh_opt)))
    key = restored[0]["rngs"]["dropout"]["key"]
    assert isinstance(key, nnx.RngKey) and jnp.issubdtype(key.value.dtype, jax.dtypes.prng_key)
    nnx.update((fresh, fresh_opt), restored)
    leaves_equal((fresh, fresh_opt), (model, opt))
    # resumed training: same dropout masks (RNG counts and keys) and adam moments
    expected = [float(train_step(model, opt)) for _ in range(2)]
    resumed = [float(train_step(fresh, fresh_opt)) for _ in range(2)]
    assert resumed == expected
    leaves_equal((fresh, fresh_opt), (model, opt))


@pytest.mark.parametrize("impl", ["threefry2x32", "rbg"])
def test_typed_keys_of_every_implementation_round_trip(tmp_path: Path, impl: str) -> None:
    # Pins orbax's own handling of typed key arrays (stored as key data, restored typed).
    rngs = nnx.Rngs(jax.random.key(3, impl=impl))
    rngs.default()  # advance the count
    state = nnx.state(rngs)
    nnx.save_state(tmp_path / "keys", state)
    target = nnx.state(nnx.Rngs(jax.random.key(9, impl=impl)))
    loaded = nnx.load_state(tmp_path / "keys", target)
    leaves_equal(loaded, state)
    assert str(jax.random.key_impl(loaded["default"]["key"].value)) == str(
        jax.random.key_impl(state["default"]["key"].value)
    )


def test_checkpoint_manager_keeps_steps_and_restores_the_latest(tmp_path: Path) -> None:
    model, opt = make(0)
    options = ocp.CheckpointManagerOptions(max_to_keep=2)
    snapshots = {}
    with ocp.CheckpointManager(tmp_path / "mgr", options=options) as mgr:
        for step in range(3):
            train_step(model, opt)
            mgr.save(step, args=ocp.args.StandardSave(nnx.state((model, opt))))
            snapshots[step] = nnx.clone((model, opt))
        mgr.wait_until_finished()
        assert sorted(mgr.all_steps()) == [1, 2]
        fresh = make(5)
        nnx.check_checkpoint(mgr.item_metadata(1), nnx.state(fresh))
        restored = mgr.restore(1, args=ocp.args.StandardRestore(nnx.state(fresh)))
    nnx.update(fresh, restored)
    leaves_equal(fresh, snapshots[1])
    assert int(fresh[1].step.value) == 2


def test_load_state_into_an_abstract_target(tmp_path: Path) -> None:
    _model, opt = trained()
    nnx.save_state(tmp_path / "c", nnx.state(opt))
    abstract = nnx.eval_shape(lambda: make(3)[1])
    loaded = nnx.load_state(tmp_path / "c", nnx.state(abstract))
    merged = nnx.merge(nnx.graphdef(abstract), loaded)
    leaves_equal(merged, opt)


def test_save_state_refuses_to_overwrite_unless_forced(tmp_path: Path) -> None:
    state = nnx.state(make(0)[0])
    nnx.save_state(tmp_path / "c", state)
    with pytest.raises(ValueError):
        nnx.save_state(tmp_path / "c", state)
    nnx.save_state(tmp_path / "c", state, force=True)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda: make(0, hidden=6)[0], "l1/kernel: stored float32[3, 8], expected float32[3, 6]"),
        (
            lambda: cast_kernel(make(0)[0]),
            "l2/kernel: stored float32[8, 2], expected bfloat16[8, 2]",
        ),
        (lambda: drop_attr(make(0)[0]), "unexpected l2/bias (the target has no place for it)"),
        (lambda: add_attr(make(0)[0]), "missing extra (the checkpoint has no such entry)"),
    ],
)
def test_mismatch_names_the_variable_and_both_values_and_restores_nothing(
    tmp_path: Path, change: Any, expected: str
) -> None:
    nnx.save_state(tmp_path / "c", nnx.state(make(0)[0]))
    target_model = change()
    before = nnx.clone(target_model)
    with pytest.raises(nnx.GraphStructureError) as info:
        nnx.update(target_model, nnx.load_state(tmp_path / "c", nnx.state(target_model)))
    assert expected in str(info.value)
    assert str(tmp_path / "c") in str(info.value)
    leaves_equal(target_model, before)
    with ocp.StandardCheckpointer() as ckpt, pytest.raises(nnx.GraphStructureError, match="l"):
        nnx.check_checkpoint(ckpt.metadata(tmp_path / "c"), nnx.state(target_model))


def cast_kernel(model: Net) -> Net:
    model.l2.kernel.value = model.l2.kernel.value.astype(jnp.bfloat16)
    return model


def drop_attr(model: Net) -> Net:
    model.l2.bias = None
    return model


def add_attr(model: Net) -> Net:
    model.extra = nnx.Param(jnp.zeros(2))
    return model


SCRIPT = textwrap.dedent(
    r"""
    import os, tempfile
    import jax, jax.numpy as jnp, numpy as np
    import orbax.checkpoint as ocp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
    import flaxgraph as nnx


    def model_fn(names):
        def init():
            return nnx.Linear(8, 16, rngs=nnx.Rngs(0), kernel_metadata={"out_sharding": names})
        return init

    @check
    def restore_onto_a_mesh_from_get_abstract_model():
        save_mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
        load_mesh = jax.make_mesh((4, 2), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
        with jax.set_mesh(save_mesh):
            model = model_fn(("data", "model"))()
        assert model.kernel.value.sharding.spec == P("data", "model")
        path = os.path.join(tempfile.mkdtemp(), "ckpt")
        with ocp.StandardCheckpointer() as ckpt:
            ckpt.save(path, nnx.state(model))
        graphdef, abstract = nnx.get_abstract_model(model_fn(("model", "data")), load_mesh)
        with ocp.StandardCheckpointer() as ckpt:
            state = ckpt.restore(path, abstract)
        restored = nnx.merge(graphdef, state)
        k = restored.kernel.value
        assert k.sharding == NamedSharding(load_mesh, P("model", "data")), k.sharding
        assert {tuple(s.data.shape) for s in k.addressable_shards} == {(4, 4)}
        np.testing.assert_array_equal(np.asarray(k), np.asarray(model.kernel.value))
        loaded = nnx.load_state(path, abstract)
        assert loaded["kernel"].value.sharding == k.sharding

    """
)


def test_sharded_restore() -> None:
    assert_checks_passed(run_device_checks(SCRIPT), ["restore_onto_a_mesh_from_get_abstract_model"])


# -- check_checkpoint as a property (no I/O: metadata given as ShapeDtypeStructs) ----------

SHAPES = st.lists(st.integers(1, 3), max_size=2).map(tuple)
DTYPES = st.sampled_from([jnp.float32, jnp.int32, jnp.bfloat16])
NAMES = st.sampled_from(["a", "b", "c", "d"])


@st.composite
def stored_and_target(draw: Any) -> tuple[dict[str, Any], nnx.State, set[str]]:
    """A metadata tree (what orbax reports), a target State, and the paths that differ."""
    names = draw(st.sets(NAMES, min_size=1))
    stored: dict[str, Any] = {}
    target: dict[str, Any] = {}
    differ: set[str] = set()
    for name in sorted(names):
        shape, dtype = draw(SHAPES), draw(DTYPES)
        kind = draw(st.sampled_from(["same", "shape", "dtype", "missing", "extra"]))
        new_shape = (*shape, 2) if kind == "shape" else shape
        new_dtype = jnp.int8 if kind == "dtype" else dtype
        if kind != "missing":
            stored[name] = {"value": jax.ShapeDtypeStruct(shape, dtype)}
        if kind != "extra":
            target[name] = nnx.Param(jax.ShapeDtypeStruct(new_shape, new_dtype))
        if kind != "same":
            differ.add(name)
    return stored, nnx.State(target), differ


@given(stored_and_target())
def test_check_checkpoint_raises_exactly_when_something_differs_and_names_it(
    case: tuple[dict[str, Any], nnx.State, set[str]],
) -> None:
    stored, target, differ = case
    if not differ:
        nnx.check_checkpoint(stored, target)
        return
    with pytest.raises(nnx.GraphStructureError) as info:
        nnx.check_checkpoint(stored, target, name="ckpt")
    msg = str(info.value)
    for name in differ:  # at most 4 problems: all listed
        assert f"{name}:" in msg or f"missing {name} " in msg or f"unexpected {name} " in msg
    for name in set(target.keys()) - differ:
        assert f" {name}:" not in msg and f"missing {name} " not in msg
