"""A compiled function that reads a Variable captured by closure warns.

The script (issue 24, item 4): ``f = nnx.jit(lambda x: model(x))``, then
``model.linear.kernel[...] = 0``: ``f(x)`` keeps returning the old result, because
the captured weights were compiled in as constants. Flax says nothing; flaxgraph
warns (``nnx.ClosureReadWarning``) once per call site, naming the Variables by
their path from the closure and the fix. A warning never changes a result.
"""

from __future__ import annotations

import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx


class Model(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.linear = nnx.Linear(2, 3, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.linear(x)


def test_the_threads_script_warns_and_names_the_paths() -> None:
    model, x = Model(nnx.Rngs(0)), jnp.ones((1, 2))
    f = nnx.jit(lambda x: model(x))
    with pytest.warns(nnx.ClosureReadWarning) as caught:
        before = f(x)
    message = str(caught[0].message)
    assert "model.linear.kernel" in message and "model.linear.bias" in message
    assert "pass the object that holds them as an argument" in message
    assert caught[0].filename == __file__
    model.linear.kernel[...] = 0
    np.testing.assert_array_equal(f(x), before)  # the stale result the warning is about
    # the fix: the model as an argument sees the change, and says nothing
    g = nnx.jit(lambda m, x: m(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_allclose(g(model, x), model(x))


def test_once_per_call_site_and_silenced_by_its_class() -> None:
    model, x = Model(nnx.Rngs(0)), jnp.ones((1, 2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        warnings.simplefilter("default")
        globals().pop("__warningregistry__", None)
        for _ in range(3):
            nnx.jit(lambda x: model(x))(x)  # a new function each time: traced each time
    assert [w.category for w in caught] == [nnx.ClosureReadWarning]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=nnx.ClosureReadWarning)
        nnx.jit(lambda x: model(x))(x)


@pytest.mark.parametrize(
    "transform",
    [
        lambda body: nnx.jit(lambda x: nnx.vmap(body)(x)),  # nested inside jit
        lambda body: nnx.jit(lambda x: nnx.grad(lambda x: body(x).sum())(x)),
        lambda body: (
            lambda x: nnx.scan(lambda c, x: (c, body(x)), in_axes=(nnx.Carry, 0))(0.0, x)[1]
        ),
    ],
)
def test_reads_under_other_compiled_transforms_warn(transform: Any) -> None:
    model = Model(nnx.Rngs(0))
    with pytest.warns(nnx.ClosureReadWarning, match=r"model\.linear\.kernel"):
        transform(lambda x: model(x))(jnp.ones((4, 2)))


def test_no_warning_where_nothing_is_baked_in() -> None:
    model, x = Model(nnx.Rngs(0)), jnp.ones((1, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # eager transforms trace every call: the captured value cannot go stale
        nnx.vmap(lambda x: model(x))(jnp.ones((4, 1, 2)))
        nnx.grad(lambda x: model(x).sum())(x)
        # inside jit, a captured object of the jit's own trace is an input there
        nnx.jit(lambda m, x: nnx.grad(lambda x: m(x).sum())(x))(model, x)
        # a Ref-backed Variable is state JAX threads through, not a constant
        w = nnx.Param(jnp.ones(3), ref=True)
        f = nnx.jit(lambda x: x * w[...])
        f(jnp.ones(3))
        w[...] = jnp.zeros(3)
        np.testing.assert_array_equal(f(jnp.ones(3)), jnp.zeros(3))
