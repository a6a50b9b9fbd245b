"""nnx.tabulate: rows for every called sub-module (shared ones once, stacked ones
called inside vmap/scan), counts and bytes checked against an independent walk of
the model's attributes, an abstract run that leaves the model alone and works on
models too big to allocate, FLOPs against XLA's cost analysis of the same
computation, and the options (depth, method, row_filter, rich kwargs)."""

from __future__ import annotations

import inspect
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flaxgraph as nnx
from flaxgraph.summary import CallInfo, filter_rng_streams, tabulate

PLAIN = {"force_terminal": False}


# -- a parser for the rendered table, and an independent count ------------------------------------


def parse(table: str) -> tuple[list[str], list[dict[str, str]], str]:
    """(header, rows as {column: cell text}, caption) of a plain-text rich table."""
    lines = table.splitlines()
    header_line = next(line for line in lines if line.lstrip().startswith("┃"))
    header = [c.strip() for c in header_line.strip().strip("┃").split("┃")]
    rows: list[dict[str, str]] = []
    block: list[list[str]] = []
    body = False
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("┡"):
            body = True
        elif body and stripped.startswith(("├", "└")):
            rows.append({h: "\n".join(c[i] for c in block).strip() for i, h in enumerate(header)})
            block = []
        elif body and stripped.startswith("│"):
            block.append([c.strip() for c in stripped.strip("│").split("│")])
    caption = [line.strip() for line in lines if line.strip()][-1]
    return header, rows, caption


def count_cell(cell: str) -> tuple[int, int]:
    """``'1,234 (4.9 KB)'`` (last line of a cell) -> (1234, bytes as shown)."""
    last = cell.splitlines()[-1]
    number, size = last.split(" (")
    value, unit = size.rstrip(")").split(" ")
    scale = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}[unit]
    return int(number.replace(",", "")), round(float(value) * scale)


def variables_by_kind(root: Any) -> dict[str, tuple[int, int]]:
    """Elements and bytes per Variable class name (RngKey/RngCount as RngState),
    each Variable object once, found by walking attributes with ``vars``."""
    seen: set[int] = set()
    totals: dict[str, tuple[int, int]] = {}

    def walk(x: Any) -> None:
        if id(x) in seen:
            return
        if isinstance(x, nnx.Variable):
            seen.add(id(x))
            kind = "RngState" if isinstance(x, nnx.RngState) else type(x).__name__
            value = x.raw_value
            size = math.prod(value.shape)
            s, b = totals.get(kind, (0, 0))
            totals[kind] = (s + size, b + size * value.dtype.itemsize)
        elif isinstance(x, nnx.Pytree):
            seen.add(id(x))
            for v in vars(x).values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)

    walk(root)
    return totals


def assert_counts(row: dict[str, str], expected: dict[str, tuple[int, int]]) -> None:
    for kind, (size, nbytes) in expected.items():
        shown_size, shown_bytes = count_cell(row[kind])
        assert shown_size == size, (row["path"], kind)
        assert abs(shown_bytes - nbytes) <= 0.05 * nbytes, (row["path"], kind)


def human(nbytes: int) -> str:
    return f"{nbytes} B" if nbytes < 1000 else f"{nbytes / 1000:.1f} KB"


# -- models ---------------------------------------------------------------------------------------


class Shared(nnx.Module):
    """``second`` is ``first`` (a shared sub-module, called twice), ``tied`` holds
    ``first.kernel`` again (a shared Variable), and ``unused`` is never called."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.first = nnx.Linear(4, 4, rngs=rngs)
        self.second = self.first
        self.norm = nnx.BatchNorm(4, rngs=rngs)
        self.out = nnx.Linear(4, 3, use_bias=False, rngs=rngs)
        self.tied = [self.first.kernel]
        self.unused = nnx.Linear(4, 7, rngs=rngs)
        self.scale = nnx.Param(jnp.ones((3,), jnp.bfloat16))

    def __call__(self, x: jax.Array) -> jax.Array:
        h = self.second(self.first(x))
        return self.out(self.norm(h)) * self.scale.value[None]


class Block(nnx.Module):
    def __init__(self, width: int, *, rngs: nnx.Rngs) -> None:
        self.linear = nnx.Linear(width, width, rngs=rngs)
        self.norm = nnx.LayerNorm(width, rngs=rngs)
        self.dropout = nnx.Dropout(0.1, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return x + self.dropout(jax.nn.gelu(self.norm(self.linear(x))))


class Stacked(nnx.Module):
    """Blocks built with vmap over __init__ (split_rngs) and run with scan."""

    def __init__(self, n_blocks: int, *, rngs: nnx.Rngs) -> None:
        self.embed = nnx.Linear(3, 8, rngs=rngs)

        @nnx.split_rngs(splits=n_blocks)
        @nnx.vmap(in_axes=0, out_axes=0)
        def make(rngs: nnx.Rngs) -> Block:
            return Block(8, rngs=rngs)

        self.blocks = make(rngs)
        self.head = nnx.Linear(8, 2, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
        def run(h: jax.Array, block: Block) -> jax.Array:
            return block(h)

        return self.head(run(self.embed(x), self.blocks))


# -- tests ----------------------------------------------------------------------------------------


def test_shared_submodules_and_variables_count_once():
    model = Shared(nnx.Rngs(0))
    header, rows, caption = parse(tabulate(model, jnp.ones((2, 4)), console_kwargs=PLAIN))
    assert header[:4] == ["path", "type", "inputs", "outputs"]
    assert header[4:] == ["BatchStat", "Param"]
    by_path = {r["path"]: r for r in rows[:-1]}
    # one row per called object, at its first path; the shared Linear once
    assert sorted(by_path) == sorted(["", "first", "norm", "out"])
    assert by_path["first"]["type"] == "Linear" and by_path["norm"]["type"] == "BatchNorm"
    assert by_path["first"]["inputs"] == "float32[2,4]"
    assert by_path[""]["outputs"] == "float32[2,3]"
    # counts: the model's row and the totals include the unused layer, the shared
    # Linear and the tied kernel once
    expected = variables_by_kind(model)
    assert expected["Param"][0] == 4 * 4 + 4 + 4 + 4 + 4 * 3 + 4 * 7 + 7 + 3
    assert_counts(by_path[""], expected)
    assert_counts(rows[-1], expected)
    assert rows[-1]["outputs"] == "Total"
    for path in ("first", "norm", "out"):
        assert_counts(by_path[path], variables_by_kind(getattr(model, path)))
    assert "kernel: float32[4,4]" in by_path["first"]["Param"]
    assert "mean: float32[4]" in by_path["norm"]["BatchStat"]
    total = sum(s for s, _ in expected.values()), sum(b for _, b in expected.values())
    assert caption == f"Total Parameters: {total[0]:,} ({human(total[1])})"


def test_stacked_vmap_scan_model_has_a_row_per_submodule():
    model = Stacked(3, rngs=nnx.Rngs(params=0, dropout=1))
    header, rows, _ = parse(tabulate(model, jnp.ones((5, 3)), console_kwargs=PLAIN))
    assert header[4:] == ["Param", "RngState"]
    by_path = {r["path"]: r for r in rows[:-1]}
    assert sorted(by_path) == sorted(
        ["", "embed", "blocks", "blocks/linear", "blocks/norm", "blocks/dropout", "head"]
    )
    # inside scan a block sees one slice: inputs and outputs of shape (5, 8)
    assert by_path["blocks"]["inputs"] == "float32[5,8]"
    assert by_path["blocks/linear"]["outputs"] == "float32[5,8]"
    # its parameters are stacked: 3 blocks' worth
    assert "kernel: float32[3,8,8]" in by_path["blocks/linear"]["Param"]
    for path, node in [
        ("", model),
        ("blocks", model.blocks),
        ("blocks/linear", model.blocks.linear),
        ("head", model.head),
    ]:
        assert_counts(by_path[path], variables_by_kind(node))
    assert variables_by_kind(model.blocks)["Param"][0] == 3 * (8 * 8 + 8 + 2 * 8)


def test_the_model_is_left_unchanged():
    model = Shared(nnx.Rngs(0))
    block = Block(4, rngs=nnx.Rngs(0))
    leaves = [jax.tree.leaves(nnx.state(m)) for m in (model, block)]
    attributes = dict(vars(model))
    linear_call = nnx.Linear.__call__
    tabulate(model, jnp.ones((2, 4)))  # BatchNorm in training mode updates its stats
    tabulate(block, jnp.ones((2, 4)))  # Dropout draws a key
    assert vars(model) == attributes
    assert not any(k.startswith("_tabulate") for k in vars(model.first))
    for before, m in zip(leaves, (model, block)):
        for a, b in zip(before, jax.tree.leaves(nnx.state(m)), strict=True):
            assert a is b
    assert nnx.Linear.__call__ is linear_call  # the wrappers are gone


def test_methods_are_restored_when_the_call_raises():
    model = Shared(nnx.Rngs(0))
    linear_call = nnx.Linear.__call__
    with pytest.raises(Exception):  # noqa: B017 - whatever the layer raises
        tabulate(model, jnp.ones((2, 5)))  # wrong input width
    assert nnx.Linear.__call__ is linear_call


def test_abstract_model_too_big_to_allocate():
    big = nnx.eval_shape(lambda: nnx.Linear(100_000, 50_000, rngs=nnx.Rngs(0)))
    x = jax.ShapeDtypeStruct((8, 100_000), jnp.float32)
    _, rows, caption = parse(tabulate(big, x, console_kwargs=PLAIN))
    size = 100_000 * 50_000 + 50_000
    assert count_cell(rows[0]["Param"])[0] == size
    assert rows[0]["outputs"] == "float32[8,50000]"
    assert caption.startswith(f"Total Parameters: {size:,} (")


def test_depth_method_kwargs_and_row_filter():
    class Enc(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.inner = Shared(rngs)

        def encode(self, x: jax.Array, *, scale: float = 1.0) -> jax.Array:
            return self.inner(x) * scale

        def __call__(self, x: jax.Array) -> jax.Array:
            return self.encode(x)

    model = Enc(nnx.Rngs(0))
    x = jnp.ones((2, 4))
    _, rows, _ = parse(tabulate(model, x, depth=1, console_kwargs=PLAIN))
    assert [r["path"] for r in rows[:-1]] == ["", "encode", "inner"]
    _, rows, _ = parse(tabulate(model, x, depth=0, console_kwargs=PLAIN))
    assert [r["path"] for r in rows[:-1]] == [""]
    # another method, with keyword inputs: the root row is named after it
    _, rows, _ = parse(tabulate(model, x, method="encode", scale=2.0, console_kwargs=PLAIN))
    assert rows[0]["path"] == "encode"
    assert rows[0]["inputs"].splitlines() == ["- float32[2,4]", "scale: 2.0"]
    seen: list[CallInfo] = []

    def keep_linears(info: CallInfo) -> bool:
        seen.append(info)
        return info.type is nnx.Linear

    _, rows, _ = parse(tabulate(model, x, row_filter=keep_linears, console_kwargs=PLAIN))
    assert [r["path"] for r in rows[:-1]] == ["inner/first", "inner/out"]
    assert [i.call_order for i in seen] == sorted(i.call_order for i in seen)
    assert seen[0].path == () and seen[0].object_id == id(model)
    first = next(i for i in seen if i.path == ("inner", "first"))
    assert first.object_id == id(model.inner.first)
    assert first.outputs == jax.ShapeDtypeStruct((2, 4), jnp.float32)


def test_rng_streams_are_hidden_by_default():
    block = Block(4, rngs=nnx.Rngs(0))
    _, rows, _ = parse(tabulate(block, jnp.ones((2, 4)), console_kwargs=PLAIN))
    assert all(r["type"] not in ("RngStream", "Rngs") for r in rows)
    _, rows, _ = parse(
        tabulate(block, jnp.ones((2, 4)), row_filter=lambda r: True, console_kwargs=PLAIN)
    )
    assert any(r["type"] in ("RngStream", "Rngs") for r in rows)
    assert not filter_rng_streams(CallInfo(0, 0, nnx.RngStream, (), "", None, None, None))


def test_flops_match_xla_cost_analysis_of_the_same_computation():
    model = nnx.Linear(3, 5, rngs=nnx.Rngs(0))
    x = jnp.ones((4, 3))
    header, rows, _ = parse(
        tabulate(model, x, compute_flops=True, compute_vjp_flops=True, console_kwargs=PLAIN)
    )
    assert header[4:6] == ["flops", "vjp_flops"]

    def forward(w: jax.Array, b: jax.Array, x: jax.Array) -> jax.Array:
        return x @ w + b[None]

    args = (model.kernel.value, model.bias.value, x)
    expected = jax.jit(forward).lower(*args).cost_analysis()["flops"]
    assert int(rows[0]["flops"]) == int(expected) > 0
    assert int(rows[0]["vjp_flops"]) > int(rows[0]["flops"])


def test_missing_method_names_it():
    with pytest.raises(AttributeError, match="no method 'decode'"):
        tabulate(nnx.Linear(2, 2, rngs=nnx.Rngs(0)), jnp.ones((1, 2)), method="decode")


def test_rich_kwargs_are_passed_and_colours_are_the_default():
    model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    coloured = tabulate(model, jnp.ones((1, 2)))
    assert "\x1b[" in coloured
    plain = tabulate(
        model,
        jnp.ones((1, 2)),
        table_kwargs={"title": "custom"},
        column_kwargs={"no_wrap": True},
        console_kwargs=PLAIN,
    )
    assert "\x1b[" not in plain and plain.lstrip().startswith("custom")


def test_signature_matches_flax():
    assert nnx.tabulate is tabulate
    pytest.importorskip("flax")
    from flax import nnx as flax_nnx

    ours = inspect.signature(tabulate)
    theirs = inspect.signature(flax_nnx.tabulate)
    assert list(ours.parameters) == list(theirs.parameters)
    for name, p in ours.parameters.items():
        q = theirs.parameters[name]
        assert p.kind == q.kind, name
        if name != "row_filter" and p.default is not inspect.Parameter.empty:
            assert p.default == q.default, name


def test_table_equals_flaxs_for_the_same_architecture():
    pytest.importorskip("flax")
    from flax import nnx as flax_nnx

    def build(lib: Any) -> Any:
        class Block(lib.Module):
            def __init__(self, din: int, dout: int, rngs: Any) -> None:
                self.linear = lib.Linear(din, dout, rngs=rngs)
                self.bn = lib.BatchNorm(dout, rngs=rngs)
                self.dropout = lib.Dropout(0.2, rngs=rngs)

            def __call__(self, x: jax.Array) -> jax.Array:
                return lib.relu(self.dropout(self.bn(self.linear(x))))

        class Foo(lib.Module):
            def __init__(self, rngs: Any) -> None:
                self.block1 = Block(32, 128, rngs=rngs)
                self.block2 = Block(128, 10, rngs=rngs)
                self.shared = self.block1

            def __call__(self, x: jax.Array) -> jax.Array:
                return self.block2(self.block1(x))

        return Foo(lib.Rngs(0))

    x = jnp.asarray(np.ones((1, 32), np.float32))
    wide = {"force_terminal": False, "width": 400}
    ours = parse(tabulate(build(nnx), x, console_kwargs=wide))
    theirs = parse(flax_nnx.tabulate(build(flax_nnx), x, console_kwargs=wide))
    assert ours == theirs
    assert len(ours[1]) == 10


def test_containers_lists_dicts_and_sequential():
    class Containers(nnx.Module):
        def __init__(self, rngs: nnx.Rngs) -> None:
            self.layers = nnx.List([nnx.Linear(2, 3, rngs=rngs), nnx.Linear(3, 3, rngs=rngs)])
            self.seq = nnx.Sequential(nnx.Linear(3, 4, rngs=rngs), nnx.relu)
            self.heads = {"a": nnx.Linear(4, 1, rngs=rngs)}

        def __call__(self, x: jax.Array) -> jax.Array:
            for layer in self.layers:
                x = layer(x)
            assert len(self.layers) == 2  # the copy's List still holds just its items
            return self.heads["a"](self.seq(x))

    model = Containers(nnx.Rngs(0))
    _, rows, _ = parse(tabulate(model, jnp.ones((1, 2)), console_kwargs=PLAIN))
    by_path = {r["path"]: r for r in rows[:-1]}
    assert sorted(by_path) == sorted(["", "layers/0", "layers/1", "seq", "seq/layers/0", "heads/a"])
    assert by_path["seq"]["type"] == "Sequential"
    assert by_path["heads/a"]["inputs"] == "float32[1,4]"
    assert_counts(by_path[""], variables_by_kind(model))
    assert_counts(by_path["seq"], variables_by_kind(model.seq))


def test_each_distinct_call_is_a_row_and_the_body_runs_once():
    calls: list[int] = []

    class Model(nnx.Module):
        def __init__(self) -> None:
            self.w = nnx.Param(jnp.ones((4,)))

        def sub(self, extra: Any, x: jax.Array) -> jax.Array:
            calls.append(1)
            return x * self.w

        def __call__(self, x: jax.Array) -> jax.Array:
            return self.sub({}, x) + self.sub(None, x) + self.sub(None, x)

    out = tabulate(Model(), jnp.ones((4,)), compute_flops=True, console_kwargs=PLAIN)
    _, rows, _ = parse(out)
    assert [r["path"] for r in rows[:-1]] == ["", "sub", "sub"]  # the repeated call once
    assert "{}" in rows[1]["inputs"] and "None" in rows[2]["inputs"]
    assert len(calls) == 3  # traced once, though FLOPs were lowered per call
    assert all(r["flops"] for r in rows[:-1])


def test_variable_metadata_is_shown():
    class Model(nnx.Module):
        def __init__(self) -> None:
            self.w = nnx.Param(jnp.ones((2, 2)), note="frozen")

        def __call__(self, x: jax.Array) -> jax.Array:
            return x @ self.w

    _, rows, _ = parse(tabulate(Model(), jnp.ones((1, 2)), console_kwargs=PLAIN))
    assert rows[0]["Param"].splitlines()[:3] == ["w:", "value: float32[2,2]", "note: 'frozen'"]
