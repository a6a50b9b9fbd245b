"""Tests of flaxgraph/node_copy.py: copies of a graph's objects that share its Variables."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import pytest
from hypothesis import given

import flaxgraph as nnx
from flaxgraph.graphlib.registry import is_node_module
from flaxgraph.node_copy import copy_nodes
from flaxgraph.testing import Node, assert_graphs_equal, graphs


def objects(root: Any) -> tuple[set[int], set[int]]:
    """Ids of the graph nodes and of the Variables reachable from ``root``."""
    nodes, variables = set(), set()
    for _, value in nnx.iter_graph(root):
        if isinstance(value, nnx.Variable):
            variables.add(id(value))
        elif is_node_module(value):
            nodes.add(id(value))
    return nodes, variables


@given(graphs())
def test_the_copy_is_isomorphic_shares_variables_and_no_node(root: Any) -> None:
    before = nnx.graphdef(root)
    copy = copy_nodes(root)
    assert_graphs_equal(copy, root)
    root_nodes, root_vars = objects(root)
    copy_nodes_, copy_vars = objects(copy)
    assert copy_vars == root_vars
    assert not (copy_nodes_ & root_nodes)
    assert nnx.graphdef(root) == before


def test_the_callback_sees_copies_children_first_with_paths() -> None:
    root = Node(a=Node(w=nnx.Param(jnp.ones(2))), b=[Node()])
    seen: list[tuple[Any, ...]] = []

    def f(path: tuple[Any, ...], copy: Any) -> Any:
        assert copy is not root
        seen.append(path)
        return copy

    copy_nodes(root, f)
    assert seen == [("a",), ("b", 0), ()]


def test_the_callback_may_replace_a_node_everywhere_it_is_shared() -> None:
    shared = Node(w=nnx.Param(jnp.ones(2)))
    root = Node(x=shared, y=shared)
    marker = Node()
    copy = copy_nodes(root, lambda p, c: marker if p == ("x",) else c)
    assert copy.x is marker and copy.y is marker and root.x is shared


def test_tree_mode_lists_every_path_of_a_shared_variable() -> None:
    v = nnx.Param(jnp.ones(2))
    with pytest.raises(nnx.FlaxgraphError, match=r"(?s)node\.a.*node\.b"):
        copy_nodes(Node(a=v, b=v), graph=False)
    copy_nodes(Node(a=v), graph=False)
