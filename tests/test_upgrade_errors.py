"""The errors of the two commonest mistakes after upgrading from Flax 0.10.

1. The 0.10 call ``optimizer.update(grads)`` (since 0.11 ``Optimizer.update`` takes the
   model): the ``TypeError`` says what changed and shows both fixes, each of which is
   then run.
2. flax#5050: ``nnx.merge(..., copy=False)`` (the default) inside ``jax.grad`` of a
   State that ``jax.grad`` does not trace, with ``Dropout`` drawing a key: the
   ``TraceContextError`` names ``copy=True``, which then runs and matches ``nnx.grad``.
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import flaxgraph as nnx


def grads_of(model: nnx.Module) -> nnx.State:
    return nnx.grad(lambda m: (m(jnp.ones((1, 2))) ** 2).sum())(model)


def test_the_0_10_update_call_explains_the_change_and_both_fixes_work() -> None:
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    grads = grads_of(model)
    kernel = model.kernel[...]
    for call in (lambda: optimizer.update(grads), lambda: optimizer.update(grads=grads)):
        with pytest.raises(TypeError, match=r"Flax 0\.10 call: since Flax 0\.11") as info:
            call()
        message = str(info.value)
        assert "optimizer.update(model, grads)" in message
        assert "nnx.ModelAndOptimizer(model, tx)" in message and "state.update(grads)" in message
    # nothing was changed by the failed calls
    np.testing.assert_array_equal(model.kernel[...], kernel)
    assert int(optimizer.step.value) == 0

    # fix 1
    optimizer.update(model, grads)
    # fix 2, from the same starting point
    model2 = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    state = nnx.ModelAndOptimizer(model2, optax.sgd(0.1))
    state.update(grads_of(model2))
    np.testing.assert_array_equal(model2.kernel[...], model.kernel[...])


def test_update_keeps_its_signature_and_other_wrong_calls_say_how_to_call_it() -> None:
    params = list(inspect.signature(nnx.Optimizer.update).parameters)
    assert params == ["self", "model", "grads", "kwargs"]
    assert list(inspect.signature(nnx.ModelAndOptimizer.update).parameters) == [
        "self",
        "grads",
        "kwargs",
    ]
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    with pytest.raises(TypeError, match=r"got 0 positionally\.\nFix: call optimizer\.update"):
        optimizer.update()
    with pytest.raises(AttributeError, match=r"(?s)since Flax 0\.11.*ModelAndOptimizer"):
        _ = optimizer.model
    with pytest.raises(AttributeError, match=r"no attribute 'modle'$"):
        _ = optimizer.modle
    state = nnx.ModelAndOptimizer(model, optax.sgd(0.1))
    with pytest.raises(TypeError, match=r"holds its model.*\nFix: `state\.update\(grads\)`"):
        state.update(model, grads_of(model))


@nnx.jit
def _jitted_old_call(optimizer: nnx.Optimizer, grads: nnx.State) -> None:
    optimizer.update(grads)


def test_the_0_10_call_inside_jit_gets_the_same_message() -> None:
    model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
    with pytest.raises(TypeError, match=r"Flax 0\.10 call"):
        _jitted_old_call(optimizer, grads_of(model))


def _flax_5050_loss(graphdef, copy: bool):  # the thread's script
    def loss(params, state):
        model = nnx.merge(graphdef, params, state, copy=copy)
        model.train()
        logits = model(jnp.ones((4, 16, 8), dtype=jnp.int32), decode=False)
        return logits.sum()

    return loss


def test_flax_5050_merge_copy_false_under_jax_grad_says_copy_true() -> None:
    model = nnx.MultiHeadAttention(8, 8, 8, 8, rngs=nnx.Rngs(0), dropout_rate=0.1)
    graphdef, params, state = nnx.split(model, nnx.Param, ...)
    counts = [np.asarray(x) for x in jax.tree.leaves(nnx.state(state, nnx.RngCount))]
    with pytest.raises(nnx.TraceContextError, match=r"(?s)RngCount.*copy=False.*`copy=True`"):
        jax.grad(_flax_5050_loss(graphdef, copy=False))(params, state)
    # the failed call changed nothing
    after = [np.asarray(x) for x in jax.tree.leaves(nnx.state(state, nnx.RngCount))]
    assert len(after) == len(counts) > 0
    for x, y in zip(after, counts):
        np.testing.assert_array_equal(x, y)

    # the fix the message gives: copy=True; the same gradients as nnx.grad
    grads = jax.grad(_flax_5050_loss(graphdef, copy=True))(params, state)
    expected = nnx.grad(_flax_5050_loss(graphdef, copy=False))(params, state)
    jax.tree.map(np.testing.assert_array_equal, grads, expected)


def test_a_captured_variable_still_gets_the_closure_fix_first() -> None:
    count = nnx.Variable(jnp.array(0))

    @jax.jit
    def f(x: jax.Array) -> jax.Array:
        count.value = count.value + 1
        return x

    with pytest.raises(nnx.TraceContextError, match=r"1\. captured by closure: pass the object"):
        f(jnp.ones(1))
