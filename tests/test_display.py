"""Tests of flaxgraph/visualization/show.py: plain-text reprs, treescope rendering, ``display``.

Expected texts are written from the format rules (two-space indents, counts of
elements and bytes per Variable kind, arrays of at most 10 elements in full,
continuation lines kept under the start of their value), with byte counts worked
out by hand from dtypes (float32 and int32: 4 bytes, uint32: 4, a typed PRNG
key: 8). The two Variable reprs come from Flax NNX's "Transformations" guide.
"""

from __future__ import annotations

import collections
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import treescope
from graphs import corpus_params
from hypothesis import given

import flaxgraph as nnx
from flaxgraph.testing import Block, Node
from flaxgraph.visualization.folding import folding
from flaxgraph.visualization.show import array_repr


class Count(nnx.Variable):
    pass


class Linear(nnx.Module):
    def __init__(self, din: int, dout: int):
        self.kernel = nnx.Param(jnp.ones((din, dout)))
        self.bias = nnx.Param(jnp.zeros(dout))


# JAX prints the second row of a 2-D array under the first, 7 columns in:
# 'Array([[1., 1.],\n       [1., 1.]], dtype=float32)'.
JAX_ROW_INDENT = 7


# -- Variables: the outputs the transforms guide prints -------------------------------


def test_variable_repr_of_a_vector_lists_its_values_and_bytes():
    assert repr(Count(jnp.arange(1, 11))) == (
        "Count( # 10 (40 B)\n"
        "  value=Array([ 1,  2,  3,  4,  5,  6,  7,  8,  9, 10], dtype=int32)\n"
        ")"
    )


def test_variable_repr_of_a_python_int_is_a_weak_int32_scalar():
    # A Python int becomes a weakly typed int32 scalar, as the guide's count is.
    assert repr(Count(jnp.asarray(1))) == (
        "Count( # 1 (4 B)\n  value=Array(1, dtype=int32, weak_type=True)\n)"
    )


def test_variable_metadata_prints_as_sorted_key_value_lines():
    v = nnx.Param(jnp.zeros(2), out_sharding=("data", None), description="bias")
    assert repr(v) == (
        "Param( # 2 (8 B)\n"
        "  value=Array([0., 0.], dtype=float32),\n"
        "  description='bias',\n"
        "  out_sharding=('data', None)\n"
        ")"
    )


def test_variable_without_array_has_no_count_comment():
    assert repr(nnx.Variable(3, note="n")) == "Variable(\n  value=3,\n  note='n'\n)"


def test_variable_holding_a_tuple_counts_every_array():
    v = nnx.Intermediate((jnp.ones((1, 2)), jnp.ones(30)))
    assert repr(v) == (
        "Intermediate( # 32 (128 B)\n"
        "  value=(Array([[1., 1.]], dtype=float32), Array(shape=(30,), dtype=float32))\n"
        ")"
    )


def test_bytes_switch_to_kilobytes_past_999():
    assert repr(nnx.Param(jnp.zeros(1000))).splitlines()[0] == "Param( # 1,000 (4.0 KB)"
    assert repr(nnx.Param(jnp.zeros(249))).splitlines()[0] == "Param( # 249 (996 B)"


def test_key_arrays_are_summarized_and_counted_as_eight_bytes():
    v = nnx.RngKey(jax.random.key(0), tag="default")
    assert repr(v) == (
        "RngKey( # 1 (8 B)\n  value=Array(shape=(), dtype=key<fry>),\n  tag='default'\n)"
    )


# -- arrays ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (jnp.arange(10), "Array([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], dtype=int32)"),
        (jnp.arange(11), "Array(shape=(11,), dtype=int32)"),
        (jnp.zeros((3, 4)), "Array(shape=(3, 4), dtype=float32)"),
        (np.arange(3), "array([0, 1, 2])"),
        (np.zeros(11), "np.ndarray(shape=(11,), dtype=float64)"),
        (np.float32(2.0), "np.float32(2.0)"),
        (
            jax.ShapeDtypeStruct((2, 3), jnp.float32),
            "ShapeDtypeStruct(shape=(2, 3), dtype=float32)",
        ),
        (jax.ShapeDtypeStruct((1,), jnp.int32), "ShapeDtypeStruct(shape=(1,), dtype=int32)"),
    ],
)
def test_array_repr(value, expected):
    assert array_repr(value) == expected


def test_multiline_array_continues_under_its_value():
    m = Linear(2, 2)
    pad = " " * (len("    value=") + JAX_ROW_INDENT)
    assert repr(m) == (
        "Linear( # Param: 6 (24 B)\n"
        "  bias=Param( # 2 (8 B)\n"
        "    value=Array([0., 0.], dtype=float32)\n"
        "  ),\n"
        "  kernel=Param( # 4 (16 B)\n"
        "    value=Array([[1., 1.],\n"
        f"{pad}[1., 1.]], dtype=float32)\n"
        "  )\n"
        ")"
    )


def test_three_dimensional_array_has_no_trailing_spaces():
    text = repr(nnx.Param(jnp.ones((2, 2, 2))))
    assert "[[[1., 1.]," in text
    assert all(line == line.rstrip() for line in text.splitlines())


def test_tracers_print_shape_and_dtype_inside_jit():
    graphdef, state = nnx.split(Linear(2, 3))
    seen: list[str] = []

    @jax.jit
    def f(state):
        model = nnx.merge(graphdef, state)
        seen.append(repr(model))
        seen.append(repr(state))
        return state

    f(state)
    model_text, state_text = seen
    assert "value=Tracer(shape=(2, 3), dtype=float32)" in model_text
    assert "value=Tracer(shape=(3,), dtype=float32)" in model_text
    assert model_text.splitlines()[0] == "Linear( # Param: 9 (36 B)"
    assert "'kernel': Param( # 6 (24 B)" in state_text


def test_shape_dtype_structs_in_a_state():
    state = jax.eval_shape(lambda: nnx.state(Linear(2, 3)))
    assert repr(state) == (
        "State({\n"
        "  'bias': Param( # 3 (12 B)\n"
        "    value=ShapeDtypeStruct(shape=(3,), dtype=float32)\n"
        "  ),\n"
        "  'kernel': Param( # 6 (24 B)\n"
        "    value=ShapeDtypeStruct(shape=(2, 3), dtype=float32)\n"
        "  )\n"
        "})"
    )


# -- objects -------------------------------------------------------------------------------


def test_empty_module():
    assert repr(Node()) == "Node()"


def test_static_attributes_and_large_raw_arrays():
    m = Node(n=3, name="x", x=jnp.zeros(20), config={"sizes": (2, 3)})
    assert repr(m) == (
        "Node(\n"
        "  config={'sizes': (2, 3)},\n"
        "  n=3,\n"
        "  name='x',\n"
        "  x=Array(shape=(20,), dtype=float32)\n"
        ")"
    )


def test_shared_submodule_is_printed_once_and_comma_stays_outside_comment():
    child = Linear(2, 2)
    root = Node(a=child, b=child, z=child)
    lines = repr(root).splitlines()
    # Counted once: 4 kernel + 2 bias elements.
    assert lines[0] == "Node( # Param: 6 (24 B)"
    assert "  b=Linear(...),  # same as .a" in lines
    # The last attribute has no comma; the closing paren follows.
    assert lines[-2:] == ["  z=Linear(...)  # same as .a", ")"]
    assert sum(line.strip().startswith("a=Linear(") for line in lines) == 1


def test_shared_variable_counted_once_and_referenced_by_path():
    w = nnx.Param(jnp.ones(3))
    root = Node(x=Block(w=w), y=Block(w=w, b=nnx.Param(jnp.ones(2))))
    assert repr(root) == (
        "Node( # Param: 5 (20 B)\n"
        "  x=Block( # Param: 3 (12 B)\n"
        "    w=Param( # 3 (12 B)\n"
        "      value=Array([1., 1., 1.], dtype=float32)\n"
        "    )\n"
        "  ),\n"
        "  y=Block( # Param: 2 (8 B)\n"
        "    b=Param( # 2 (8 B)\n"
        "      value=Array([1., 1.], dtype=float32)\n"
        "    ),\n"
        "    w=Param(...)  # same as .x.w\n"
        "  )\n"
        ")"
    )


def test_several_kinds_get_a_total_in_walk_order():
    m = Node(a=nnx.Param(jnp.ones(3)), b=nnx.BatchStat(jnp.ones(2)))
    assert repr(m).splitlines()[0] == (
        "Node( # Param: 3 (12 B), BatchStat: 2 (8 B), Total: 5 (20 B)"
    )


def test_random_state_is_one_kind():
    # One stream: an 8-byte key and a 4-byte uint32 count.
    text = repr(Node(rngs=nnx.Rngs(0)))
    assert text.splitlines()[0] == "Node( # RngState: 2 (12 B)"


def test_cycle_prints_reference_to_root():
    root = Node(w=nnx.Param(jnp.ones(2)))
    root.child = Block(parent=root)
    root.me = root
    assert repr(root) == (
        "Node( # Param: 2 (8 B)\n"
        "  child=Block(\n"
        "    parent=Node(...)  # same as <root>\n"
        "  ),\n"
        "  me=Node(...),  # same as <root>\n"
        "  w=Param( # 2 (8 B)\n"
        "    value=Array([1., 1.], dtype=float32)\n"
        "  )\n"
        ")"
    )


def test_nodes_in_containers_and_references_into_them():
    leaf = Block(w=nnx.Param(jnp.ones(1)))
    root = Node(items=[leaf, {"k": leaf}], one=(leaf,))
    assert repr(root) == (
        "Node( # Param: 1 (4 B)\n"
        "  items=[\n"
        "    Block( # Param: 1 (4 B)\n"
        "      w=Param( # 1 (4 B)\n"
        "        value=Array([1.], dtype=float32)\n"
        "      )\n"
        "    ),\n"
        "    {\n"
        "      'k': Block(...)  # same as .items[0]\n"
        "    }\n"
        "  ],\n"
        "  one=(\n"
        "    Block(...),  # same as .items[0]\n"
        "  )\n"
        ")"
    )


OptState = collections.namedtuple("OptState", "mu nu count")


def test_pytree_containers_print_their_fields():
    plain = Node(opt=OptState(jnp.zeros(20), jnp.zeros(2), 3))
    assert repr(plain) == (
        "Node(\n"
        "  opt=OptState(mu=Array(shape=(20,), dtype=float32), "
        "nu=Array([0., 0.], dtype=float32), count=3)\n"
        ")"
    )
    boxed = Node(opt=OptState(nnx.Variable(jnp.zeros(20)), nnx.Variable(jnp.zeros(2)), 3))
    assert repr(boxed) == (
        "Node( # Variable: 22 (88 B)\n"
        "  opt=OptState(\n"
        "    mu=Variable( # 20 (80 B)\n"
        "      value=Array(shape=(20,), dtype=float32)\n"
        "    ),\n"
        "    nu=Variable( # 2 (8 B)\n"
        "      value=Array([0., 0.], dtype=float32)\n"
        "    ),\n"
        "    count=3\n"
        "  )\n"
        ")"
    )


def test_nnx_list_prints_like_a_list():
    layers = nnx.List([Block(w=nnx.Param(jnp.ones(1))), 5])
    assert repr(layers) == (
        "List([ # Param: 1 (4 B)\n"
        "  Block( # Param: 1 (4 B)\n"
        "    w=Param( # 1 (4 B)\n"
        "      value=Array([1.], dtype=float32)\n"
        "    )\n"
        "  ),\n"
        "  5\n"
        "])"
    )


def test_sequential_of_256_layers():
    model = nnx.Sequential(*[Linear(4, 4) for _ in range(256)])
    with folding(False):  # what nnx.display(model, fold=False) prints
        lines = repr(model).splitlines()
    # Each layer: 16 kernel + 4 bias float32 elements = 20 elements, 80 bytes.
    assert lines[0] == "Sequential( # Param: 5,120 (20.5 KB)"
    assert lines[1] == "  layers=List([ # Param: 5,120 (20.5 KB)"
    assert lines[2] == "    Linear( # Param: 20 (80 B)"
    # 2 opening + 2 closing lines, 8 per layer (Linear, 2 Params of 3 lines, ')').
    assert len(lines) == 4 + 256 * 8
    assert sum(line == "    Linear( # Param: 20 (80 B)" for line in lines) == 256
    # folded (repr's default): the 256 identical layers print once
    folded = repr(model).splitlines()
    assert folded[:2] == lines[:2]
    assert folded[2] == "    256 x Linear( # [0:256], Param: 256 x 20 = 5,120 (20.5 KB)"
    assert len(folded) == 4 + 8


def _header_totals(first_line: str) -> dict[str, tuple[int, int | None]]:
    """Parses 'Node( # Param: 6 (24 B), …' into {kind: (elements, bytes)}; bytes
    are None when printed rounded (KB and up)."""
    comment = first_line.partition(" # ")[2]
    out: dict[str, tuple[int, int | None]] = {}
    for kind, n, size in re.findall(r"(\w+): ([\d,]+) \(([^)]*)\)", comment):
        if kind != "Total":
            exact = int(size[:-2]) if size.endswith(" B") else None
            out[kind] = (int(n.replace(",", "")), exact)
    return out


def _expected_totals(root: Any) -> dict[str, tuple[int, int]]:
    """Per kind, over every distinct Variable of the graph (iter_graph gives each once)."""
    totals: dict[str, list[int]] = {}
    for _, value in nnx.iter_graph(root):
        if isinstance(value, nnx.Variable):
            arrays = [
                x
                for x in jax.tree.leaves(value.raw_value)
                if isinstance(x, (jax.Array, np.ndarray))
            ]
            if not arrays:
                continue
            kind = "RngState" if isinstance(value, nnx.RngState) else type(value).__name__
            entry = totals.setdefault(kind, [0, 0])
            entry[0] += sum(x.size for x in arrays)
            entry[1] += sum(x.size * x.dtype.itemsize for x in arrays)
    return {k: (n, b) for k, (n, b) in totals.items()}


def _check_graph_display(root: Any) -> None:
    with folding(False):  # every sighting printed (a folded run prints its first member)
        text = repr(root)
    assert repr(root).splitlines()[0] == text.splitlines()[0]  # folding keeps the counts
    expected = _expected_totals(root)
    printed = _header_totals(text.splitlines()[0])
    assert printed.keys() == expected.keys()
    for kind, (n, b) in printed.items():
        assert n == expected[kind][0]
        assert b is None or b == expected[kind][1]
    # Each node or Variable is expanded at its first path; every other sighting
    # (find_duplicates lists them all) is printed as one reference.
    references = sum(len(paths) - 1 for paths in nnx.find_duplicates(root))
    assert text.count("  # same as ") == references
    treescope.render_to_text(root)
    treescope.render_to_html(root)


@pytest.mark.parametrize("make", corpus_params())
def test_corpus_graphs_display_with_exact_root_counts(make):
    _check_graph_display(make())


@given(nnx.testing.graphs())
def test_random_graphs_display_with_exact_root_counts(root):
    _check_graph_display(root)


# -- States and GraphDefs ----------------------------------------------------------------


def test_nested_state_repr():
    state = nnx.State({"a": {"w": nnx.Param(jnp.ones(2))}, 0: jnp.zeros(12), "n": 3})
    assert repr(state) == (
        "State({\n"
        "  'a': State({\n"
        "    'w': Param( # 2 (8 B)\n"
        "      value=Array([1., 1.], dtype=float32)\n"
        "    )\n"
        "  }),\n"
        "  0: Array(shape=(12,), dtype=float32),\n"
        "  'n': 3\n"
        "})"
    )
    assert repr(nnx.State({})) == "State({})"


def test_graphdef_repr_shows_shared_node_as_reference():
    child = Linear(1, 1)
    graphdef = nnx.graphdef(Node(a=child, b=child, n=2))
    text = repr(graphdef)
    lines = text.splitlines()
    assert lines[0] == "GraphDef(num_leaves=2,"
    assert lines[1] == f"  root=NodeDef(Node, index={graphdef.root.index},"
    a_index = int(re.search(r"a=NodeDef\(Linear, index=(\d+),", text).group(1))
    assert f"    b=NodeRef(Linear, index={a_index})," in lines
    assert "    n=StaticDef(2)" in lines
    assert re.search(r"^      bias=VariableDef\(Param, index=\d+\),$", text, re.MULTILINE)
    assert lines[-2:] == ["  )", ")"]


def test_graphdef_repr_shows_variable_metadata():
    graphdef = nnx.graphdef(Node(w=nnx.Param(jnp.ones(1), out_sharding=("a",))))
    assert re.search(
        r"w=VariableDef\(Param, index=\d+, metadata=\{'out_sharding': \('a',\)\}\)", repr(graphdef)
    )


# -- treescope -----------------------------------------------------------------------------


def test_treescope_shared_submodule_renders_once_with_counts():
    child = Block(w=nnx.Param(jnp.ones(30)))
    root = Node(a=child, b=child)
    lines = treescope.render_to_text(root).splitlines()
    assert lines[0] == "Node( # Param: 30 (120 B)"
    assert lines[1] == "  a=Block( # Param: 30 (120 B)"
    assert lines[2] == "    w=Param( # 30 (120 B)"
    assert "  b=Block(...),  # same as .a" in lines
    treescope.render_to_html(root)


def test_treescope_cycle_terminates_with_reference():
    root = Node(w=nnx.Param(jnp.ones(30)))
    root.child = Block(parent=root, b=nnx.Param(jnp.ones(20)))
    text = treescope.render_to_text(root)
    assert text.splitlines()[0] == "Node( # Param: 50 (200 B)"
    assert "    parent=Node(...),  # same as <root>" in text.splitlines()
    treescope.render_to_html(root)


def test_treescope_state_and_variable_metadata():
    state = nnx.State({"w": nnx.Param(jnp.ones(30), out_sharding=("a",))})
    text = treescope.render_to_text(state)
    assert text.splitlines()[:2] == ["State({", "  'w': Param( # 30 (120 B)"]
    assert "    out_sharding=('a',)," in text.splitlines()
    treescope.render_to_html(state)


def test_treescope_reference_inside_a_nested_rendering_uses_its_path():
    child = Block(w=nnx.Param(jnp.ones(30)))
    text = treescope.render_to_text({"m": Node(a=child, b=child)})
    assert "b=Block(...),  # same as ['m'].a" in text


# -- display -------------------------------------------------------------------------------


def test_display_prints_reprs_outside_notebooks(capsys):
    v = Count(jnp.arange(1, 11))
    m = Node()
    nnx.display(v, m)
    assert capsys.readouterr().out == repr(v) + "\n" + repr(m) + "\n"
