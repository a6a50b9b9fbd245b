"""Tests of flaxgraph/graphlib/descendants.py in graph and tree mode: iter_graph,
iter_children, iter_module_children, find_duplicates(only=), recursive_map
(the older cases are in test_api.py)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import pytest
from hypothesis import given

import flaxgraph as nnx
from flaxgraph.errors import SharedReferenceError
from flaxgraph.testing import Node, graphs


def linear() -> nnx.Linear:
    return nnx.Linear(1, 1, rngs=nnx.Rngs(0))


class Tree(nnx.Module):
    def __init__(self, share: bool):
        self.l = linear()
        self.l2 = self.l if share else linear()
        self.d = {"x": linear()}
        self.p = nnx.Param(jnp.ones(1))
        self.n = 3
        self.a = jnp.ones(1)


def test_iter_children_yields_direct_nodes_and_variables_in_both_modes():
    t = Tree(share=True)
    for graph in (True, False):
        children = [(k, type(v).__name__) for k, v in nnx.iter_children(t, graph=graph)]
        assert children == [("l", "Linear"), ("l2", "Linear"), ("p", "Param")]
        modules = [k for k, _ in nnx.iter_module_children(t, graph=graph)]
        assert modules == ["l", "l2"]


def test_iter_graph_graph_mode_yields_shared_once_tree_mode_raises():
    t = Tree(share=True)
    paths = [p for p, v in nnx.iter_graph(t) if isinstance(v, nnx.Linear)]
    assert paths == [("d", "x"), ("l",)]
    with pytest.raises(SharedReferenceError, match="l2"):
        list(nnx.iter_graph(t, graph=False))


def test_iter_graph_tree_mode_repeats_a_shared_node_without_variables():
    empty = nnx.Module()
    m = Node(x=empty, y=empty)
    graph_paths = [p for p, v in nnx.iter_graph(m) if v is empty]
    tree_paths = [p for p, v in nnx.iter_graph(m, graph=False) if v is empty]
    assert graph_paths == [("x",)] and tree_paths == [("x",), ("y",)]


def test_iter_modules_function_and_method_in_both_modes():
    t = Tree(share=False)
    expected = [("d", "x"), ("l",), ("l2",), ()]
    assert [p for p, _ in nnx.iter_modules(t)] == expected
    assert [p for p, _ in nnx.iter_modules(t, graph=False)] == expected
    assert [p for p, _ in t.iter_modules(graph=False)] == expected


def test_find_duplicates_only_filter():
    t = Tree(share=True)
    assert nnx.find_duplicates(t) == [[("l",), ("l2",)]]
    assert nnx.find_duplicates(t, only=nnx.Linear) == [[("l",), ("l2",)]]
    assert nnx.find_duplicates(t, only=nnx.Param) == []
    v = nnx.Param(jnp.ones(1))
    m = Node(a=v, b=v, c=t)
    assert nnx.find_duplicates(m, only=nnx.Param) == [[("a",), ("b",)]]


def test_recursive_map_tree_mode_checks_before_changing_anything():
    t = Tree(share=True)
    calls = []

    def f(path, x):
        calls.append(path)
        return x

    with pytest.raises(SharedReferenceError):
        nnx.recursive_map(f, t, graph=False)
    assert calls == []
    nnx.recursive_map(f, Tree(share=False), graph=False)
    assert () in calls


def reference_walk(g: Any) -> list[tuple[Any, ...]]:
    """Paths of every graph node and Variable, each once, children first (an
    independent re-implementation of iter_graph's graph-mode order)."""
    seen: set[int] = set()
    out: list[tuple[Any, ...]] = []

    def go(x: Any, path: tuple[Any, ...]) -> None:
        tracked = isinstance(x, (nnx.Pytree, nnx.Variable))
        if tracked:
            if id(x) in seen:
                return
            seen.add(id(x))
        if isinstance(x, nnx.Pytree):
            for k in sorted(vars(x), key=lambda k: (type(k).__name__, k)):
                go(vars(x)[k], (*path, k))
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                go(v, (*path, i))
        elif isinstance(x, dict):
            for k, v in x.items():
                go(v, (*path, k))
        if tracked:
            out.append(path)

    go(g, ())
    return out


@given(graphs(rngs=False))
def test_iter_graph_matches_a_reference_walk(g):
    got = [p for p, v in nnx.iter_graph(g) if isinstance(v, (nnx.Pytree, nnx.Variable))]
    assert got == reference_walk(g)


def test_traversal_matches_flax():
    fnnx = pytest.importorskip("flax.nnx")

    def facts(lib: Any) -> tuple[Any, ...]:
        class T(lib.Module):
            def __init__(self):
                self.l = lib.Linear(1, 1, rngs=lib.Rngs(0))
                self.l2 = self.l
                self.p = lib.Param(jnp.ones(1))
                self.q = self.p
                self.n = 3

        t = T()
        return (
            [k for k, _ in lib.iter_children(t)],
            [k for k, _ in lib.iter_module_children(t)],
            [p for p, _ in lib.iter_modules(t)],
            lib.find_duplicates(t),
            lib.find_duplicates(t, only=lib.Param),
            [p for p, v in lib.iter_graph(t) if isinstance(v, (lib.Variable, lib.Module))],
        )

    assert facts(nnx) == facts(fnnx)
