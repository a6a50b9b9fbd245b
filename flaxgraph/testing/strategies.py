"""Hypothesis strategies that generate object graphs and programs that edit them.

What the graphs contain and why array values are exact: see the package README.

Source: ``docs/design.md``, section "Tests"; hypothesis's strategies API; Flax NNX 0.12
``graph``/``graph_updates`` transform arguments (``modes``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np

from flaxgraph.containers import Dict, List
from flaxgraph.filterlib import All, Not, PathContains, WithTag
from flaxgraph.filterlib import Any as AnyOf
from flaxgraph.pytreelib.objects import data, static
from flaxgraph.rnglib.rngs import Rngs, RngState
from flaxgraph.testing import values
from flaxgraph.testing.nodes import Block, CustomVariable, Node, Record
from flaxgraph.testing.programs import (
    ADD_KINDS,
    AddAttribute,
    DeleteAttribute,
    MutationStep,
    SetValue,
    ShareAttribute,
    SwapAttributes,
)
from flaxgraph.variablelib.variable import BatchStat, Cache, Intermediate, Param, Variable

SearchStrategy = st.SearchStrategy

ATTRIBUTE_NAMES = ("a", "b", "c", "w", "bias", "kernel", "sub", "head")
"""Attribute (and dict key) names generated graphs use; none shadows a Module method."""

VARIABLE_KINDS: tuple[type[Variable[Any]], ...] = (
    Param, BatchStat, Cache, Intermediate, CustomVariable, Variable
)  # fmt: skip
"""The Variable kinds ``variables()`` and ``graphs()`` draw from by default."""

NODE_TYPES: tuple[type, ...] = (Node, Block, Record, List, Dict)
"""The node types ``graphs()`` draws sub-nodes from by default (``Rngs`` is separate)."""

MESH_AXES = ("data", "model", None)
"""Entries of generated ``sharding`` metadata tuples."""

TAGS = ("a", "b")
"""Values of generated ``tag`` metadata (a string filter such as ``'a'`` selects them)."""


def arrays(
    *,
    dtypes: Sequence[Any] = (jnp.float32, jnp.int32),
    max_rank: int = 2,
    max_side: int = 3,
    min_side: int = 0,
) -> SearchStrategy[jax.Array]:
    """A strategy of small JAX arrays with exactly representable values.

    Args:
      dtypes: the dtypes to draw from; floats get multiples of 0.25 in ``[-4, 4]``,
        integers ``[-16, 16]`` (``[0, 16]`` unsigned), bools booleans.
      max_rank: the largest number of dimensions (0: scalars only).
      max_side, min_side: the range of each dimension's size (0 allows empty arrays).

    Returns:
      A hypothesis strategy of ``jax.Array``.

    Raises:
      ValueError: ``max_rank`` is negative or ``min_side > max_side``.

    >>> from hypothesis import given, settings
    >>> from flaxgraph.testing import arrays
    >>> @settings(max_examples=10)
    ... @given(arrays(max_rank=1))
    ... def test(x):
    ...     assert x.ndim <= 1
    >>> test()
    """
    if max_rank < 0 or min_side > max_side:
        raise ValueError(
            f"arrays needs max_rank >= 0 and min_side <= max_side, got "
            f"max_rank={max_rank}, min_side={min_side}, max_side={max_side}"
        )
    np_dtypes = [np.dtype(d) for d in dtypes]

    @st.composite
    def build(draw: Any) -> jax.Array:
        dtype = draw(st.sampled_from(np_dtypes))
        shape = tuple(draw(st.lists(st.integers(min_side, max_side), max_size=max_rank)))
        size = int(np.prod(shape, dtype=np.int64))
        if dtype.kind == "b":
            values = np.asarray(draw(st.lists(st.booleans(), min_size=size, max_size=size)))
        else:
            low = 0 if dtype.kind == "u" else -16
            ints = np.asarray(
                draw(st.lists(st.integers(low, 16), min_size=size, max_size=size)), np.int64
            )
            values = ints / 4 if dtype.kind in "fc" else ints
        return jnp.asarray(values.astype(dtype).reshape(shape))

    return build()


def static_values() -> SearchStrategy[Any]:
    """A strategy of hashable static values: ``None``, bools, small ints, floats, short strings, tuples.

    >>> from hypothesis import given, settings
    >>> from flaxgraph.testing import static_values
    >>> @settings(max_examples=10)
    ... @given(static_values())
    ... def test(v):
    ...     hash(v)
    >>> test()
    """
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-3, 3),
        st.text(alphabet="abc", max_size=3),
        st.floats(-2.0, 2.0, allow_nan=False, allow_infinity=False, width=32),
    )
    return st.one_of(scalars, st.tuples(scalars, scalars), st.tuples())


def variables(
    *,
    kinds: Sequence[type[Variable[Any]]] = VARIABLE_KINDS,
    metadata: bool = True,
    values: SearchStrategy[Any] | None = None,
) -> SearchStrategy[Variable[Any]]:
    """A strategy of new Variables of mixed kinds, with metadata.

    Args:
      kinds: the Variable classes to draw from (an ``Intermediate`` sometimes holds a
        tuple, as ``Module.sow`` makes).
      metadata: whether to draw a ``sharding`` tuple (one entry per dimension) and/or a
        ``tag``.
      values: the strategy of values (default ``arrays()``).

    Returns:
      A hypothesis strategy of Variables.

    >>> import flaxgraph as nnx
    >>> from hypothesis import given, settings
    >>> from flaxgraph.testing import variables
    >>> @settings(max_examples=10)
    ... @given(variables(kinds=[nnx.Param]))
    ... def test(v):
    ...     assert isinstance(v, nnx.Param)
    >>> test()
    """
    value_strategy = arrays() if values is None else values

    @st.composite
    def build(draw: Any) -> Variable[Any]:
        kind = draw(st.sampled_from(list(kinds)))
        value = draw(value_strategy)
        if kind is Intermediate and draw(st.booleans()):
            value = (value, *draw(st.lists(value_strategy, max_size=1)))
        meta: dict[str, Any] = {}
        if metadata:
            ndim = getattr(value, "ndim", None)
            if ndim is not None and draw(st.booleans()):
                meta["out_sharding"] = tuple(
                    draw(st.lists(st.sampled_from(MESH_AXES), min_size=ndim, max_size=ndim))
                )
            if draw(st.booleans()):
                meta["tag"] = draw(st.sampled_from(TAGS))
        return kind(value, **meta)

    return build()


def filters() -> SearchStrategy[Any]:
    """A strategy of filters (anything ``nnx.filterlib.to_predicate`` takes) over generated graphs.

    Draws Variable kinds, ``jax.Array``, tags, ``PathContains``, ``...`` and ``None``,
    combined with ``Not``, ``All``, ``Any`` and tuples.

    >>> import flaxgraph as nnx
    >>> from hypothesis import given, settings
    >>> from flaxgraph.testing import filters
    >>> @settings(max_examples=10)
    ... @given(filters())
    ... def test(f):
    ...     assert callable(nnx.filterlib.to_predicate(f))
    >>> test()
    """
    base = st.sampled_from([
        *VARIABLE_KINDS, RngState, jax.Array, "a", WithTag("b"), PathContains("w"),
        PathContains("sub"), PathContains(0), ..., None,
    ])  # fmt: skip

    def combine(inner: SearchStrategy[Any]) -> SearchStrategy[Any]:
        return st.one_of(
            st.builds(Not, inner),
            st.builds(All, inner, inner),
            st.builds(AnyOf, inner, inner),
            st.tuples(inner, inner),
        )

    return st.recursive(base, combine, max_leaves=4)


def graphs(
    *,
    max_nodes: int = 6,
    max_depth: int = 3,
    max_attributes: int = 4,
    sharing: bool = True,
    cycles: bool = True,
    containers: bool = True,
    rngs: bool = True,
    metadata: bool = True,
    marks: bool = False,
    variable_kinds: Sequence[type[Variable[Any]]] = VARIABLE_KINDS,
    node_types: Sequence[type] = NODE_TYPES,
) -> SearchStrategy[Node]:
    """A strategy of object graphs: a root ``Node`` or ``Block`` Module and all it holds.

    What an attribute can be is in the package README; containers are never shared.

    Args:
      max_nodes: the most graph nodes (the root included).
      max_depth: the deepest nesting of nodes and containers below the root.
      max_attributes: the most attributes per node (and items per container).
      sharing: allow a Variable or node to be referenced from several places.
      cycles: allow a node to hold one of its ancestors (or itself).
      containers: allow lists, tuples and dicts.
      rngs: allow ``nnx.Rngs`` sub-modules.
      metadata: give Variables metadata (see ``variables``).
      marks: also make ``nnx.data(<int or float>)`` and ``nnx.static(<value>)`` attributes.
      variable_kinds: the Variable kinds to use.
      node_types: the sub-node types to use.

    Returns:
      A hypothesis strategy of root Modules.

    Raises:
      ValueError: ``max_nodes < 1``, ``max_depth < 0`` or ``max_attributes < 0``.

    >>> import flaxgraph as nnx
    >>> from hypothesis import given, settings
    >>> from flaxgraph.testing import graphs
    >>> @settings(max_examples=10)
    ... @given(graphs(sharing=False, cycles=False))
    ... def test(model):
    ...     assert nnx.find_duplicates(model) == []
    >>> test()
    """
    if max_nodes < 1 or max_depth < 0 or max_attributes < 0:
        raise ValueError(
            "graphs needs max_nodes >= 1, max_depth >= 0 and max_attributes >= 0, got "
            f"max_nodes={max_nodes}, max_depth={max_depth}, max_attributes={max_attributes}"
        )
    variable_strategy = variables(kinds=variable_kinds, metadata=metadata)

    @st.composite
    def build(draw: Any) -> Node:
        builder = _Builder(
            draw=draw,
            max_nodes=max_nodes,
            max_depth=max_depth,
            max_attributes=max_attributes,
            sharing=sharing,
            cycles=cycles,
            containers=containers,
            rngs=rngs,
            marks=marks,
            variable_strategy=variable_strategy,
            node_types=tuple(node_types),
        )
        return builder.node(draw(st.sampled_from((Node, Block))), 0)

    return build()


MODES: tuple[dict[str, bool], ...] = (
    {"graph": True, "graph_updates": True},
    {"graph": True, "graph_updates": False},
    {"graph": False, "graph_updates": False},
)
"""The three traversal modes as transform keyword arguments (``flaxgraph.modes``)."""


def modes() -> SearchStrategy[dict[str, bool]]:
    """A strategy drawing one of ``MODES`` (the traversal modes as transform keyword arguments).

    >>> import jax.numpy as jnp, flaxgraph as nnx
    >>> from hypothesis import given, settings
    >>> from flaxgraph.testing import modes
    >>> @settings(max_examples=6)
    ... @given(modes())
    ... def test(mode):
    ...     assert nnx.jit(lambda v: v[...] + 1, **mode)(nnx.Variable(jnp.zeros(()))) == 1
    >>> test()
    """
    return st.sampled_from(MODES)


def mutations(*, max_steps: int = 4, cycles: bool = True) -> SearchStrategy[list[MutationStep]]:
    """A strategy of mutation programs (lists of ``flaxgraph.testing.programs`` steps).

    Args:
      max_steps: the most steps in a program (programs may be empty).
      cycles: if False, ``ShareAttribute`` steps never make a cycle.

    Returns:
      A hypothesis strategy of lists of steps for ``apply_mutations``.

    >>> from hypothesis import given, settings
    >>> from flaxgraph.testing import graphs, mutations, apply_mutations
    >>> @settings(max_examples=10)
    ... @given(graphs(), mutations(max_steps=2))
    ... def test(model, steps):
    ...     assert len(apply_mutations(model, steps)) == len(steps)
    >>> test()
    """
    selector = st.integers(0, 255)
    small = st.integers(0, 3)
    name = st.sampled_from(ATTRIBUTE_NAMES)
    step = st.one_of(
        st.builds(SetValue, selector, small, small),
        st.builds(AddAttribute, selector, name, st.sampled_from(ADD_KINDS), small),
        st.builds(DeleteAttribute, selector, selector),
        st.builds(ShareAttribute, selector, selector, name, st.just(bool(cycles))),
        st.builds(SwapAttributes, selector, selector, selector),
    )
    return st.lists(step, max_size=max_steps)


# -- the graph builder -------------------------------------------------------------------------


@dataclasses.dataclass(slots=True, kw_only=True)
class _Builder:
    """Draws one graph (``graphs``' options); ``finished`` nodes can be shared, ``ancestors`` close cycles."""

    draw: Any
    max_nodes: int
    max_depth: int
    max_attributes: int
    sharing: bool
    cycles: bool
    containers: bool
    rngs: bool
    marks: bool
    variable_strategy: Any
    node_types: tuple[type, ...]
    finished: list[Any] = dataclasses.field(default_factory=list)
    ancestors: list[Any] = dataclasses.field(default_factory=list)
    variables: list[Variable[Any]] = dataclasses.field(default_factory=list)
    node_count: int = 0

    def node(self, cls: type, depth: int) -> Any:
        draw = self.draw
        self.node_count += 1
        obj = cls()
        self.ancestors.append(obj)
        if cls is List:
            for _ in range(draw(st.integers(0, self.max_attributes))):
                obj.append(self.value(depth + 1))
        else:
            for name in self.names():
                if self.marks and draw(st.integers(0, 4)) == 0:
                    setattr(obj, name, self.marked())
                else:
                    setattr(obj, name, self.value(depth + 1))
        self.ancestors.pop()
        self.finished.append(obj)
        return obj

    def value(self, depth: int) -> Any:
        draw, pick = self.draw, self.pick
        deeper, room = depth < self.max_depth, self.node_count < self.max_nodes
        makers: dict[str, tuple[Any, Callable[[], Any]]] = {  # name: (allowed, make)
            "static": (True, lambda: draw(static_values())),
            "array": (True, lambda: draw(arrays())),
            "variable": (True, self.new_variable),
            "node": (deeper and room, lambda: self.node(pick(self.node_types), depth)),
            "container": (deeper and self.containers, lambda: self.container(depth)),
            "shared variable": (self.sharing and self.variables, lambda: pick(self.variables)),
            "shared node": (self.sharing and self.finished, lambda: pick(self.finished)),
            "cycle": (self.cycles and self.ancestors, lambda: pick(self.ancestors)),
            "rngs": (self.rngs and deeper and room, self.new_rngs),
        }
        choice = draw(st.sampled_from([name for name, (ok, _) in makers.items() if ok]))
        return makers[choice][1]()

    def pick(self, candidates: Sequence[Any]) -> Any:
        return self.draw(st.sampled_from(candidates))

    def new_variable(self) -> Variable[Any]:
        variable: Variable[Any] = self.draw(self.variable_strategy)
        self.variables.append(variable)
        return variable

    def new_rngs(self) -> Rngs:
        draw = self.draw
        self.node_count += 1
        key = draw(st.integers(0, 2**16))
        streams = draw(st.lists(st.sampled_from(("params", "dropout")), unique=True, max_size=2))
        rngs = Rngs(key, **{s: key + i + 1 for i, s in enumerate(streams)})
        self.finished.append(rngs)
        return rngs

    def marked(self) -> Any:
        if self.draw(st.booleans()):
            return data(self.draw(st.one_of(st.integers(-3, 3), st.sampled_from([0.5, -1.25]))))
        return static(self.draw(static_values()))

    def names(self) -> list[str]:
        strategy = st.lists(
            st.sampled_from(ATTRIBUTE_NAMES), unique=True, max_size=self.max_attributes
        )
        names: list[str] = self.draw(strategy)
        return names

    def container(self, depth: int) -> Any:
        draw = self.draw
        kind = draw(st.sampled_from((list, tuple, dict)))
        if kind is dict:
            return {k: self.value(depth + 1) for k in self.names()}

        items = [self.value(depth + 1) for _ in range(draw(st.integers(0, 3)))]
        return items if kind is list else tuple(items)


__all__ = [
    "ATTRIBUTE_NAMES", "MESH_AXES", "MODES", "NODE_TYPES", "TAGS", "VARIABLE_KINDS", "arrays",
    "filters", "graphs", "modes", "mutations", "static_values", "variables",
]  # fmt: skip


def attribute_values(*, max_depth: int = 2) -> SearchStrategy[Any]:
    """A strategy of attribute value descriptions (``flaxgraph.testing.values``, see the README).

    Args:
      max_depth: how deep containers, configs and partials nest (0: none).

    Returns:
      A hypothesis strategy of ``flaxgraph.testing.values.Description``.

    >>> from hypothesis import given, settings
    >>> from flaxgraph.testing.strategies import attribute_values
    >>> from flaxgraph.testing.values import canonical
    >>> @settings(max_examples=20)
    ... @given(attribute_values())
    ... def test(d):
    ...     assert canonical(d.build()) == canonical(d.build())
    >>> test()
    """
    return _attribute_values(max_depth)


@st.composite
def _attribute_values(draw: Any, max_depth: int) -> Any:
    # Wraps the cached strategy so that its repr (tens of kilobytes) is never printed.
    return draw(_attribute_values_strategy(max_depth))


@functools.cache
def _attribute_values_strategy(max_depth: int) -> SearchStrategy[Any]:
    scalars = st.one_of(
        st.builds(values.PyScalar, st.none() | st.booleans() | st.integers(-3, 3)),
        st.builds(values.PyScalar, st.sampled_from((0.0, 0.25, 1.5, -2.0, 1e-9, 1j, "ab", ""))),
        st.builds(
            values.NpScalar,
            st.sampled_from(("float64", "float32", "int32", "int64", "bool")),
            st.sampled_from((0.0, 1.0, 0.5, 3.0)),
        ),
    )
    arrays_ = st.builds(
        values.ArrayValue,
        st.sampled_from(("numpy", "jax")),
        st.sampled_from(("float32", "int32", "bool")),
        st.lists(st.integers(1, 3), max_size=2).map(tuple),
        st.integers(-2, 2),
    )
    keys = st.builds(
        values.KeyValue,
        st.sampled_from(("typed", "raw")),
        st.sampled_from((None, "threefry2x32", "rbg", "unsafe_rbg")),
        st.integers(0, 3),
    )
    others = st.one_of(
        st.builds(values.DTypeValue, st.just("dtype"), st.sampled_from(("float32", "int8"))),
        st.builds(values.DTypeValue, st.just("type"), st.sampled_from(tuple(values.SCALAR_TYPES))),
        st.builds(values.EnumValue, st.sampled_from(("RED", "GREEN"))),
        st.builds(values.FunctionValue, st.sampled_from(tuple(values.FUNCTIONS))),
        st.builds(
            values.SpecValue,
            st.lists(st.sampled_from(("data", "model", None, ("data", "model"))), max_size=2).map(
                tuple
            ),
        ),
    )
    base = st.one_of(scalars, arrays_, keys, others)
    if max_depth <= 0:
        return base
    inner = _attribute_values(max_depth - 1)
    names = st.sampled_from(("width", "name", "k"))
    return st.one_of(
        base,
        st.builds(values.PartialValue, st.sampled_from(("scale_by", "double")), scalars),
        st.builds(values.ConfigValue, st.booleans(), scalars | others, inner),
        st.builds(
            values.SeqValue,
            st.sampled_from(("list", "tuple")),
            st.lists(inner, max_size=3).map(tuple),
        ),
        st.builds(
            values.MapValue,
            st.lists(st.tuples(names, inner), max_size=3, unique_by=lambda kv: kv[0]).map(tuple),
        ),
    )
