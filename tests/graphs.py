"""A named corpus of example graphs, one zero-argument factory per shape of graph.

Property tests run over every entry (next to randomly generated graphs), and the
transform conformance matrix runs every entry under every transform. Each
factory returns a *new* graph, so a test may mutate what it gets. Add an entry
whenever a bug is found on a shape of graph the corpus does not have yet.

``CORPUS`` maps a name to its factory; ``corpus_params()`` gives them as pytest
parameters with readable ids::

  @pytest.mark.parametrize("make", corpus_params())
  def test_something(make):
      graph = make()
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx
from flaxgraph.testing import Block, CustomVariable, Node, Record


def _param(*shape: int, fill: float = 1.0) -> nnx.Param[Any]:
    return nnx.Param(jnp.full(shape, fill, dtype=jnp.float32))


def empty_module() -> Node:
    """A Module with no attributes at all."""
    return Node()


def single_param() -> Node:
    """The smallest useful graph: one Param."""
    return Node(w=_param(2, 3))


def shared_variable() -> Node:
    """One Variable reachable from two attributes."""
    w = _param(3)
    return Node(a=w, b=w, c=_param(3, fill=2.0))


def shared_submodule() -> Node:
    """One sub-module reachable from two attributes (a diamond)."""
    child = Block(w=_param(2), n=1)
    return Node(left=child, right=child)


def shared_across_levels() -> Node:
    """A Variable shared between the root and a grandchild, and a node shared
    between a list and an attribute."""
    w = _param(2)
    leaf = Record(w=w, k=nnx.BatchStat(jnp.zeros(2, jnp.int32)))
    return Node(w=w, child=Node(grandchild=leaf), items=[leaf, jnp.ones(1)])


def cycle() -> Node:
    """A child holding its parent."""
    root = Node(w=_param(2))
    root.child = Block(parent=root, b=_param(1))
    return root


def self_cycle() -> Node:
    """A node holding itself."""
    root = Node(w=_param(2))
    root.me = root
    return root


def cycle_through_container() -> Node:
    """A cycle that goes through a list and a dict."""
    root = Node()
    child = Node(back={"to": [root]}, w=_param(1))
    root.children = [child]
    return root


def nested_containers() -> Node:
    """Lists, tuples and dicts nested in each other, holding nodes, Variables,
    arrays and static values."""
    return Node(
        layers=[Node(w=_param(2)), {"x": jnp.arange(3), "y": [_param(1), (1, jnp.zeros(2))]}],
        config={"sizes": (2, 3), "name": "net", "inner": {"deep": [jnp.ones((1, 2))]}},
        pair=(Block(b=_param(2)), Block(b=_param(2, fill=3.0))),
        empty=([], {}, ()),
    )


def static_attributes() -> Node:
    """Every kind of static attribute next to one Param."""
    return Node(
        n=3,
        name="block",
        shape=(2, 3),
        nothing=None,
        flag=True,
        ratio=0.5,
        act=jnp.tanh,
        dtype=jnp.float32,
        w=_param(2),
    )


def marked_attributes() -> Node:
    """Attributes marked ``nnx.data`` (Python scalars become State leaves) and ``nnx.static``."""
    return Node(
        step=nnx.data(3),
        rate=nnx.data(0.5),
        shape=nnx.static((2, 3)),
        fn=nnx.static(jnp.tanh),
        w=_param(2),
    )


def raw_arrays() -> Node:
    """Raw array attributes (JAX and NumPy, float and int, scalar and empty)."""
    return Node(
        x=jnp.arange(4, dtype=jnp.float32).reshape(2, 2),
        i=jnp.array([1, 2, 3], dtype=jnp.int32),
        np_array=np.ones((2,), dtype=np.float32),
        scalar=jnp.float32(1.5),
        empty=jnp.zeros((0, 3)),
    )


def variable_metadata() -> Node:
    """Variables carrying metadata: sharding tuples, tags, free-form entries."""
    return Node(
        kernel=nnx.Param(jnp.ones((2, 3)), out_sharding=("data", None)),
        bias=nnx.Param(jnp.zeros(3), out_sharding=("model",), description="bias"),
        stat=nnx.BatchStat(jnp.zeros((2,)), tag="a"),
        custom=CustomVariable(jnp.ones((1, 1, 2)), out_sharding=(None, "data", "model"), tag="b"),
    )


def mixed_kinds() -> Node:
    """One Variable of each kind, a sown Intermediate (a tuple value) and a raw array."""
    m = Node(
        p=_param(2),
        s=nnx.BatchStat(jnp.zeros(2)),
        c=nnx.Cache(jnp.zeros((1, 2))),
        pert=nnx.Perturbation(jnp.zeros(2)),
        custom=CustomVariable(jnp.arange(3)),
        plain=nnx.Variable(jnp.ones(())),
        raw=jnp.ones(2),
    )
    m.sow(nnx.Intermediate, "sown", jnp.ones(2))
    m.sow(nnx.Intermediate, "sown", jnp.zeros(2))
    return m


def rngs_inside() -> Node:
    """An ``nnx.Rngs`` with two streams inside a module, one stream already used."""
    rngs = nnx.Rngs(0, dropout=1)
    rngs.dropout()
    return Node(rngs=rngs, w=_param(2))


def shared_rngs() -> Node:
    """One ``nnx.Rngs`` shared by two sub-modules."""
    rngs = nnx.Rngs(params=3)
    return Node(a=Block(rngs=rngs, w=_param(1)), b=Block(rngs=rngs))


def nnx_list_and_dict() -> Node:
    """``nnx.List`` and ``nnx.Dict`` holding modules, Variables and arrays."""
    shared = Block(w=_param(2))
    return Node(
        layers=nnx.List([Node(w=_param(2)), shared, jnp.ones(3)]),
        heads=nnx.Dict(a=shared, b=nnx.BatchStat(jnp.zeros(2)), c="static"),
    )


def sequential() -> nnx.Sequential:
    """An ``nnx.Sequential`` root (a Module that is not a generic test node)."""
    return nnx.Sequential(Node(w=_param(2)), Block(w=_param(2, fill=2.0)))


def deep_chain() -> Node:
    """A chain of 30 nested modules, each with a Param."""
    root = node = Node(w=_param(1))
    for i in range(30):
        node.child = Node(w=_param(1, fill=float(i)))
        node = node.child
    return root


def wide() -> Node:
    """One module with 40 Param attributes."""
    return Node(**{f"w{i:02d}": _param(1, fill=float(i)) for i in range(40)})


def plain_object_root() -> Record:
    """A plain ``Object`` (not a Module) as the root."""
    return Record(w=_param(2), child=Node(b=_param(1)))


CORPUS: dict[str, Callable[[], Any]] = {
    f.__name__: f
    for f in [
        empty_module,
        single_param,
        shared_variable,
        shared_submodule,
        shared_across_levels,
        cycle,
        self_cycle,
        cycle_through_container,
        nested_containers,
        static_attributes,
        marked_attributes,
        raw_arrays,
        variable_metadata,
        mixed_kinds,
        rngs_inside,
        shared_rngs,
        nnx_list_and_dict,
        sequential,
        deep_chain,
        wide,
        plain_object_root,
    ]
}
"""Every corpus graph: name -> zero-argument factory returning a new graph."""


def corpus_settings() -> Any:
    """Hypothesis settings for a ``@given`` test that is also parametrized over the
    corpus: an eighth of the profile's examples (at least 5) per corpus entry."""
    from hypothesis import settings

    return settings(max_examples=max(5, settings().max_examples // 8))


def corpus_params() -> list[Any]:
    """The corpus factories as ``pytest.param`` values with the entry name as id."""
    return [pytest.param(make, id=name) for name, make in CORPUS.items()]


def has_cycle(root: Any) -> bool:
    """Whether some graph node of ``root`` can reach itself (through attributes,
    lists, tuples and dicts)."""
    from flaxgraph.graphlib.registry import get_graph_node_impl
    from flaxgraph.graphlib.registry import is_node_module as is_graph_node

    def direct_nodes(x: Any) -> list[Any]:
        impl = get_graph_node_impl(x)
        pending = [c for _, c in impl.flatten(x)[0]] if impl is not None else [x]
        found = []
        while pending:
            v = pending.pop()
            if is_graph_node(v):
                found.append(v)
            elif type(v) in (list, tuple):
                pending.extend(v)
            elif type(v) is dict:
                pending.extend(v.values())
        return found

    visiting: set[int] = set()
    done: set[int] = set()

    def visit(node: Any) -> bool:
        visiting.add(id(node))
        for child in direct_nodes(node):
            if id(child) in visiting or (id(child) not in done and visit(child)):
                return True
        visiting.discard(id(node))
        done.add(id(node))
        return False

    return any(
        visit(n)
        for n in direct_nodes(root) + ([root] if is_graph_node(root) else [])
        if id(n) not in done
    )
