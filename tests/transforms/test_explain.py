"""``flaxgraph.transforms.explain`` and ``cache_info(verbose=True)``: the generated
source of a fast-path plan, readable (constants named by what they are)."""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
import pytest

import flaxgraph as nnx
from flaxgraph.transforms import explain as explain_module
from flaxgraph.transforms.explain import explain


class Block(nnx.Module):
    def __init__(self) -> None:
        self.w = nnx.Param(jnp.ones(2))
        self.count = nnx.BatchStat(jnp.zeros(()))


def step(m: Block, x: Any) -> Any:
    m.count[...] += 1
    return (m.w[...] * x).sum()


def test_explain_returns_the_plan_source_with_named_constants() -> None:
    f = nnx.jit(step)
    m = Block()
    source = explain(f, m, jnp.ones(2))
    assert source.startswith("def run(args, kwargs, statics):")
    assert not re.search(r"\bC\d+\b", source)  # no anonymous constants
    assert re.search(r"\bblock_\d+\._obj_version != \d+", source)  # the model by its type
    assert re.search(r"_set_raw\(batchstat_\d+, out_groups", source)  # the write-back inlined
    # The source is the one the cached plan runs, and the calls took the fast path.
    assert source in [p.source for p in f.plans.plans.values()]
    assert f.cache_info().general_calls == 1
    assert int(m.count[...]) == 2  # made by two calls: the general one and a fast one


def test_cache_info_verbose_prints_every_plan(capsys: pytest.CaptureFixture[str]) -> None:
    f = nnx.jit(step)
    m = Block()
    f(m, jnp.ones(2))
    f(m, jnp.ones(2))
    info = f.cache_info(verbose=True)
    printed = capsys.readouterr().out
    assert info.plans == 1 and "# plan 1 of 1" in printed and "def run(" in printed
    assert f.cache_info() == info and capsys.readouterr().out == ""


def test_vmap_cache_info_verbose_prints(capsys: pytest.CaptureFixture[str]) -> None:
    f = nnx.vmap(step, in_axes=(None, 0))
    m = Block()
    for _ in range(2):
        f(m, jnp.ones((3, 2)))
    f.cache_info(verbose=True)
    assert "def run(" in capsys.readouterr().out


class Pair:
    """A pytree whose children are not its attributes: no fast-path plan."""

    def __init__(self, a: Any, b: Any) -> None:
        self.items = (a, b)


jax.tree_util.register_pytree_node(Pair, lambda p: (p.items, None), lambda _, c: Pair(*c))


def test_explain_errors() -> None:
    with pytest.raises(TypeError, match="no fast path"):
        explain(step, Block(), jnp.ones(2))
    f = nnx.jit(lambda m, p: m.w[...].sum() + p.items[0])
    with pytest.raises(ValueError, match="general path on every call"):
        explain(f, Block(), Pair(jnp.ones(()), jnp.ones(())))
    assert f.cache_info().general_calls == 2  # it was called, twice, on the general path


def test_main_prints_a_plan(capsys: pytest.CaptureFixture[str]) -> None:
    assert explain_module.main(["--layers", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("def run(") and len(re.findall(r"\blayer_\d+\._obj_version", out)) == 3
