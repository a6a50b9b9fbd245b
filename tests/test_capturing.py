"""Tests of flaxgraph/capturing.py (and the capture branch of Module.sow/perturb)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx


class Sub(nnx.Module):
    def __init__(self) -> None:
        self.w = nnx.Param(jnp.array([1.0, 2.0]))

    def __call__(self, x: jax.Array) -> jax.Array:
        self.sow(nnx.Intermediate, "sub_feat", x * 2)
        return x * self.w


class Net(nnx.Module):
    def __init__(self) -> None:
        self.sub = Sub()
        self.blocks = nnx.List([Sub()])

    def features(self, x: jax.Array) -> jax.Array:
        return x + 1

    def __call__(self, x: jax.Array) -> jax.Array:
        self.sow(nnx.Intermediate, "seen", x)
        self.sow(nnx.Intermediate, "seen", x + 10)
        return self.blocks[0](self.sub(self.features(x)))


def flat(state: nnx.State) -> dict[tuple[Any, ...], Any]:
    fs = state.flat_state()
    return {p: v.value for p, v in zip(fs.paths, fs.leaves)}


def test_sown_values_come_back_by_module_path_and_the_model_is_unchanged() -> None:
    net, x = Net(), jnp.array([1.0, 2.0])
    before = nnx.graphdef(net)
    out, sown = nnx.capture(net, nnx.Intermediate)(x)
    got = flat(sown)
    assert set(got) == {("seen",), ("sub", "sub_feat"), ("blocks", 0, "sub_feat")}
    np.testing.assert_allclose(got[("seen",)][0], x)
    np.testing.assert_allclose(got[("seen",)][1], x + 10)
    np.testing.assert_allclose(got[("sub", "sub_feat")][0], (x + 1) * 2)
    np.testing.assert_allclose(got[("blocks", 0, "sub_feat")][0], (x + 1) * np.array([1, 2]) * 2)
    np.testing.assert_allclose(out, (x + 1) * np.array([1.0, 2.0]) ** 2)
    assert nnx.graphdef(net) == before and "seen" not in vars(net)


def test_the_forms_of_fn_and_the_number_of_results() -> None:
    net, x = Net(), jnp.ones(2)
    expected = flat(nnx.capture(net, nnx.Intermediate)(x)[1])
    assert flat(nnx.capture(net.__call__, nnx.Intermediate)(x)[1]).keys() == expected.keys()
    assert (
        flat(nnx.capture(lambda m, x: m(x), nnx.Intermediate)(net, x)[1]).keys() == expected.keys()
    )

    @nnx.capture(nnx.Intermediate)
    def forward(m: Net, x: jax.Array) -> jax.Array:
        return m(x)

    assert flat(forward(net, x)[1]).keys() == expected.keys()
    out = nnx.capture(net)(x)
    assert isinstance(out, jax.Array)
    result = nnx.capture(net, nnx.Intermediate, nnx.Perturbation)(x)
    assert len(result) == 3 and len(result[2]) == 0


def test_a_function_whose_first_argument_is_not_a_module_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"args\[0\] is a int"):
        nnx.capture(lambda n, m: m(n), nnx.Intermediate)(3, Net())


def test_method_outputs_records_every_public_method_and_restores_the_classes() -> None:
    net, x = Net(), jnp.array([1.0, 2.0])
    _, sown = nnx.capture(net, nnx.Intermediate, method_outputs=nnx.Intermediate)(x)
    got = flat(sown)
    np.testing.assert_allclose(got[("features",)][0], x + 1)
    np.testing.assert_allclose(got[("__call__",)][0], net(x))
    np.testing.assert_allclose(got[("sub", "__call__")][0], (x + 1) * np.array([1.0, 2.0]))
    assert ("blocks", 0, "__call__") in got and len(got[("sub", "__call__")]) == 1
    assert Net.__dict__["features"].__name__ == "features"
    assert not hasattr(Net.__dict__["features"], "_flaxgraph_original")
    assert not hasattr(Sub.__dict__["__call__"], "_flaxgraph_original")


def test_a_method_reached_through_super_is_recorded_once() -> None:
    class Child(Sub):
        def __call__(self, x: jax.Array) -> jax.Array:
            return super().__call__(x) + 1

    child = Child()
    _, sown = nnx.capture(child, nnx.Intermediate, method_outputs=nnx.Intermediate)(jnp.ones(2))
    assert len(flat(sown)[("__call__",)]) == 1


def test_sows_of_other_kinds_are_dropped_and_existing_attributes_kept() -> None:
    net, x = Net(), jnp.ones(2)
    net(x)  # eager sow: stored as attributes
    kept = net.seen.value
    _, sown = nnx.capture(net, nnx.Perturbation)(x)
    assert len(sown) == 0 and net.seen.value is kept


def test_capture_sees_through_jit_inside_fn() -> None:
    net, x = Net(), jnp.array([1.0, 2.0])
    eager = flat(nnx.capture(net, nnx.Intermediate)(x)[1])
    jitted = flat(nnx.capture(nnx.jit(lambda m, x: m(x)), nnx.Intermediate)(net, x)[1])
    assert jitted.keys() == eager.keys()
    for k in eager:
        np.testing.assert_allclose(jitted[k], eager[k])
    assert "_flaxgraph_captures" not in vars(net)


def test_capture_inside_jit() -> None:
    @nnx.jit
    def run(m: Net, x: jax.Array) -> Any:
        return nnx.capture(m, nnx.Intermediate)(x)

    _, sown = run(Net(), jnp.ones(2))
    assert ("sub", "sub_feat") in flat(sown)


def test_perturbation_gradients_equal_gradients_of_the_intermediate() -> None:
    class Model(nnx.Module):
        def __init__(self) -> None:
            self.w = nnx.Param(jnp.array([0.5, -1.0, 2.0]))

        def __call__(self, x: jax.Array) -> jax.Array:
            h = self.perturb("h", jnp.tanh(x * self.w))
            return jnp.sum(jnp.sin(h))

    model, x = Model(), jnp.array([0.3, 0.2, -0.7])
    _, perts = nnx.capture(model, nnx.Perturbation)(x)
    np.testing.assert_array_equal(flat(perts)[("h",)], np.zeros(3))

    def loss(m: Model, p: nnx.State) -> jax.Array:
        return nnx.capture(m, nnx.Perturbation, init=p)(x)[0]

    grads = nnx.grad(loss, argnums=nnx.DiffState(1, nnx.Perturbation))(model, perts)
    h = np.tanh(np.asarray(x) * np.asarray(model.w.value))
    np.testing.assert_allclose(grads["h"].value, np.cos(h), rtol=1e-6)
    assert "h" not in vars(model)


def test_an_error_in_fn_leaves_no_trace() -> None:
    net = Net()

    def boom(m: Net, x: jax.Array) -> None:
        m(x)
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        nnx.capture(boom, nnx.Intermediate, method_outputs=nnx.Intermediate)(net, jnp.ones(2))
    assert "_flaxgraph_captures" not in vars(net) and "_flaxgraph_captures" not in vars(net.sub)
    assert not hasattr(Net.__dict__["__call__"], "_flaxgraph_original")


def test_nested_captures_each_get_their_own_values() -> None:
    net = Net()

    def outer(m: Net, x: jax.Array) -> Any:
        m.sub(x)  # sown into the outer capture
        return nnx.capture(m, nnx.Intermediate)(x)[1]

    inner, sown = nnx.capture(outer, nnx.Intermediate)(net, jnp.ones(2))
    assert len(flat(sown)[("sub", "sub_feat")]) == 1
    assert ("seen",) in flat(inner) and ("seen",) not in flat(sown)


def test_init_must_hold_variables() -> None:
    with pytest.raises(TypeError, match=r"init=.*at h is a Array"):
        nnx.capture(Net(), nnx.Intermediate, init={"h": jnp.ones(2)})(jnp.ones(2))


def test_same_paths_and_values_as_flax() -> None:
    flax_nnx = pytest.importorskip("flax.nnx")

    class FSub(flax_nnx.Module):
        def __init__(self) -> None:
            self.w = flax_nnx.Param(jnp.array([1.0, 2.0]))

        def __call__(self, x: jax.Array) -> jax.Array:
            self.sow(flax_nnx.Intermediate, "sub_feat", x * 2)
            return x * self.w[...]

    class FNet(flax_nnx.Module):
        def __init__(self) -> None:
            self.sub = FSub()
            self.blocks = flax_nnx.List([FSub()])

        def features(self, x: jax.Array) -> jax.Array:
            return x + 1

        def __call__(self, x: jax.Array) -> jax.Array:
            self.sow(flax_nnx.Intermediate, "seen", x)
            self.sow(flax_nnx.Intermediate, "seen", x + 10)
            return self.blocks[0](self.sub(self.features(x)))

    x = jnp.array([1.0, 2.0])
    kw: dict[str, Any] = {}
    for method_outputs in (False, True):
        if method_outputs:
            kw = {"method_outputs": nnx.Intermediate}
        _, ours = nnx.capture(Net(), nnx.Intermediate, **kw)(x)
        fkw = {"method_outputs": flax_nnx.Intermediate} if method_outputs else {}
        _, theirs = flax_nnx.capture(FNet(), flax_nnx.Intermediate, **fkw)(x)
        theirs_flat = {tuple(p): v.get_value() for p, v in flax_nnx.to_flat_state(theirs)}
        ours_flat = flat(ours)
        assert ours_flat.keys() == theirs_flat.keys()
        for k in ours_flat:
            assert len(ours_flat[k]) == len(theirs_flat[k])
            for a, b in zip(ours_flat[k], theirs_flat[k]):
                np.testing.assert_allclose(a, b)


def test_a_module_captured_by_closure_in_a_transform_is_refused_and_left_clean() -> None:
    net = Net()

    @nnx.jit
    def run(x: jax.Array) -> Any:
        return nnx.capture(net, nnx.Intermediate)(x)

    with pytest.raises(nnx.TraceContextError):
        run(jnp.ones(2))
    assert all("_flaxgraph_captures" not in vars(m) for _, m in net.iter_modules())
