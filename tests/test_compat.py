"""``nnx.compat``: graph mode and graph updates fixed on (Flax NNX 0.12's legacy spelling)."""

from __future__ import annotations

import inspect

import jax.numpy as jnp
import pytest

import flaxgraph as nnx
from flaxgraph import compat


def shared() -> nnx.Module:
    m = nnx.Module()
    m.a = nnx.Param(jnp.ones(2))
    m.b = m.a
    return m


PUBLIC = sorted(n for n in vars(compat) if not n.startswith("_") and callable(vars(compat)[n]))
PUBLIC = [n for n in PUBLIC if n not in ("annotations", "Any", "Callable")]


@pytest.mark.parametrize("name", PUBLIC)
def test_each_compat_function_is_the_flaxgraph_function_of_that_name(name: str) -> None:
    fn = getattr(compat, name)
    original = getattr(nnx, name) if name != "backup_keys" else nnx.rnglib.backup_keys
    assert fn.__wrapped__ is original or fn.__wrapped__ is getattr(original, "__wrapped__", None)
    params = inspect.signature(
        original.__init__ if isinstance(original, type) else original
    ).parameters
    assert "graph" in params, f"nnx.{name} takes no graph= argument"


def test_compat_jit_stays_in_graph_mode_under_a_tree_mode_default() -> None:
    with nnx.set_graph_mode(False), nnx.set_graph_updates(False):
        f = compat.jit(lambda m: m.a.value.sum())
        g = nnx.jit(lambda m: m.a.value.sum())
    assert float(f(shared())) == 2.0
    with pytest.raises(nnx.SharedReferenceError):
        g(shared())


def test_compat_jit_propagates_structure_and_works_as_a_decorator_with_options() -> None:
    with nnx.set_graph_updates(False):

        @compat.jit(static_argnums=1)
        def add(m: nnx.Module, name: str) -> None:
            setattr(m, name, nnx.Param(jnp.zeros(1)))

    m = nnx.Module()
    add(m, "new")
    assert hasattr(m, "new")


def test_compat_split_allows_sharing_under_a_tree_mode_default() -> None:
    with nnx.set_graph_mode(False):
        _graphdef, state = compat.split(shared())
        with pytest.raises(nnx.SharedReferenceError):
            nnx.split(shared())
    assert set(state) == {"a"}


def test_an_explicit_argument_wins_over_the_fixed_one() -> None:
    with pytest.raises(nnx.SharedReferenceError):
        compat.jit(lambda m: None, graph=False)(shared())
