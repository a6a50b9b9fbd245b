"""Oracle programs: one plain-data description of a module graph, built on either library.

A ``Program`` is a tree of ``NodeSpec``\\ s (a Module or Pytree class and its attributes, in
assignment order) run under one ``jax_default_prng_impl``. An attribute is one of:

* ``Raw(value)``: ``node.name = value`` for a value description of
  ``flaxgraph.testing.values`` (scalars, arrays, keys, dtypes, enums, functions,
  partials, configs, PartitionSpecs, plain containers of these);
* ``Marked(mark, value)``: ``nnx.data(value)`` or ``nnx.static(value)``;
* ``Var(kind, value, metadata)``: a Variable of one of the kinds of
  ``oracle_library`` (``Param``, ``BatchStat``, ``Variable``, user subclasses);
* ``RngsItem(kind, streams, number, draw)``: ``nnx.Rngs`` built from an int, a typed
  key or a raw key, for one or two named streams; ``draw`` is the stream the
  program's method draws from (possibly one it lacks: Flax's fallback rule);
* ``Container(kind, items)``: an ``nnx.List``/``nnx.Dict`` or a plain list, tuple or dict
  of such items (Variables, sub-nodes, values);
* ``Sub(node)``: a nested sub-node; ``Share(target)``: an object made earlier
  (a finished node, a Variable or an Rngs, in creation order, modulo their number), which
  shares it; no cycles (a Module is a JAX pytree in both libraries, and Flax flattens every
  assigned value), and nothing when no object was made yet.

``build(library, program)`` makes the graph; ``programs()`` is the hypothesis strategy.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import hypothesis.strategies as st
import jax
from oracle_library import Library

from flaxgraph.testing import values
from flaxgraph.testing.strategies import attribute_values


@dataclasses.dataclass(frozen=True)
class Raw:
    value: values.Description


@dataclasses.dataclass(frozen=True)
class Marked:
    mark: str  # 'data' or 'static'
    value: values.Description


@dataclasses.dataclass(frozen=True)
class Var:
    kind: str
    value: values.Description
    metadata: tuple[tuple[str, Any], ...] = ()


@dataclasses.dataclass(frozen=True)
class RngsItem:
    kind: str  # 'int', 'typed' or 'raw'
    streams: tuple[str, ...]
    number: int
    draw: str


@dataclasses.dataclass(frozen=True)
class Share:
    target: int


@dataclasses.dataclass(frozen=True)
class NodeSpec:
    kind: str
    attrs: tuple[tuple[str, Item], ...]


@dataclasses.dataclass(frozen=True)
class Sub:
    node: NodeSpec


@dataclasses.dataclass(frozen=True)
class Container:
    kind: str  # 'List', 'Dict' (nnx.List / nnx.Dict) or 'list', 'tuple', 'dict' (plain)
    items: tuple[Item, ...]

    def keys(self) -> list[Any]:
        """The element keys: ``0, 1, ...`` or ``'k0', 'k1', ...`` for dicts."""
        dict_like = self.kind in ("Dict", "dict")
        return [f"k{i}" if dict_like else i for i in range(len(self.items))]


Item = Raw | Marked | Var | RngsItem | Share | Sub | Container


@dataclasses.dataclass(frozen=True)
class Program:
    root: NodeSpec
    prng_impl: str = "threefry2x32"


def _key(kind: str, number: int) -> Any:
    if kind == "typed":
        return jax.random.key(number)
    if kind == "raw":
        return jax.random.PRNGKey(number)
    return number


def build(library: Library, program: Program) -> Any:
    """The program's graph made on ``library`` (call under ``prng_context(program)``)."""
    return _build_node(library, program.root, [])


def _build_node(library: Library, spec: NodeSpec, created: list[Any]) -> Any:
    node = library.modules[spec.kind]()
    for name, item in spec.attrs:
        setattr(node, name, _build_item(library, item, created))
    created.append(node)  # after its attributes: a Share never makes a cycle
    return node


def _build_item(library: Library, item: Item, created: list[Any]) -> Any:
    nnx = library.nnx
    if isinstance(item, Raw):
        return item.value.build()
    if isinstance(item, Marked):
        return (nnx.data if item.mark == "data" else nnx.static)(item.value.build())
    if isinstance(item, Var):
        made = library.variables[item.kind](item.value.build(), **dict(item.metadata))
    elif isinstance(item, RngsItem):
        made = nnx.Rngs(**{s: _key(item.kind, item.number + i) for i, s in enumerate(item.streams)})
    elif isinstance(item, Share):
        return created[item.target % len(created)] if created else None
    elif isinstance(item, Container):
        return _build_container(library, item, created)
    else:
        return _build_node(library, item.node, created)
    created.append(made)
    return made


def _build_container(library: Library, item: Container, created: list[Any]) -> Any:
    elements = [_build_item(library, i, created) for i in item.items]
    if item.kind in ("Dict", "dict"):
        mapping = dict(zip(item.keys(), elements))
        return library.nnx.Dict(mapping) if item.kind == "Dict" else mapping
    if item.kind == "List":
        return library.nnx.List(elements)
    return elements if item.kind == "list" else tuple(elements)


def prng_context(program: Program) -> Any:
    """The ``jax.default_prng_impl`` context the program runs under."""
    return jax.default_prng_impl(program.prng_impl)


# -- strategies ----------------------------------------------------------------------------

NAMES = ("a", "b", "w", "cfg", "sub", "head")
STREAMS = (("default",), ("params", "dropout"))

_var_values = st.one_of(
    st.builds(
        values.ArrayValue,
        st.sampled_from(("jax", "numpy")),
        st.sampled_from(("float32", "int32")),
        st.lists(st.integers(1, 3), max_size=2).map(tuple),
        st.integers(-2, 2),
    ),
    st.builds(values.PyScalar, st.sampled_from((1.5, 2))),
)
_vars = st.builds(
    Var,
    st.sampled_from(("param", "batch_stat", "variable", "tagged", "hooked", "stored")),
    _var_values,
    st.sampled_from(((), (("tag", "x"),))),
)


@st.composite
def _rngs(draw: Any) -> RngsItem:
    streams = draw(st.sampled_from(STREAMS))
    return RngsItem(
        draw(st.sampled_from(("int", "typed", "raw"))),
        streams,
        draw(st.integers(0, 3)),
        draw(st.sampled_from((*streams, "other"))),
    )


@st.composite
def _item(draw: Any, depth: int) -> Item:
    # A composite around the cached strategy: a short repr (hypothesis warns when it
    # prints a strategy's repr of tens of kilobytes)
    return draw(_items(depth))


@functools.cache
def _items(depth: int) -> st.SearchStrategy[Item]:
    leaves: list[st.SearchStrategy[Any]] = [
        st.builds(Raw, attribute_values(max_depth=2)),
        st.builds(Marked, st.sampled_from(("data", "static")), attribute_values(max_depth=1)),
        _vars,
        _rngs(),
        st.builds(Share, st.integers(0, 7)),
    ]
    if depth > 0:
        sub = _nodes(depth - 1, ("box", "hook", "record"))
        leaves.append(st.builds(Sub, sub))
        element = st.one_of(
            _vars, st.builds(Sub, sub), st.builds(Raw, attribute_values(max_depth=0))
        )
        leaves.append(
            st.builds(
                Container,
                st.sampled_from(("List", "Dict", "list", "tuple", "dict")),
                st.lists(element, max_size=3).map(tuple),
            )
        )
    return st.one_of(leaves)


def _nodes(depth: int, kinds: tuple[str, ...]) -> st.SearchStrategy[NodeSpec]:
    attrs = st.lists(
        st.tuples(st.sampled_from(NAMES), _item(depth)),
        max_size=3,
        unique_by=lambda kv: kv[0],
    ).map(tuple)
    return st.builds(NodeSpec, st.sampled_from(kinds), attrs)


def programs(*, depth: int = 2) -> st.SearchStrategy[Program]:
    """Programs whose root is a ``Box``, ``HookBox`` or ``OpaqueBox``, nested ``depth`` deep."""
    return st.builds(
        Program,
        _nodes(depth, ("box", "hook", "opaque")),
        st.sampled_from(("threefry2x32", "threefry2x32", "rbg", "unsafe_rbg")),
    )
