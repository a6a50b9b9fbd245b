"""Display folds runs of structurally identical sub-modules (issue 24 item 7).

A 100-block model prints each block in full in Flax NNX (thousands of lines); here a
run of identical blocks prints once, ``100 x Block(...)``, with its positions, its
arrays by shape and its counts (per member and in all), in the text ``repr`` and in
treescope (collapsed, expandable); ``nnx.display(model, fold=False)`` prints every
block. Properties: folding never changes a node's counts, folds exactly the maximal
runs of equal structure, and keeps references into a folded run pointing at the
right path.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import jax.numpy as jnp
import pytest
import treescope
from hypothesis import given
from hypothesis import strategies as st

import flaxgraph as nnx
from flaxgraph.visualization.folding import folding


class Block(nnx.Module):
    def __init__(self, din: int, dout: int, rngs: nnx.Rngs):
        self.linear = nnx.Linear(din, dout, rngs=rngs)
        self.norm = nnx.LayerNorm(dout, rngs=rngs)
        self.dropout = nnx.Dropout(0.1, rngs=rngs)


class Model(nnx.Module):
    def __init__(self, n: int, rngs: nnx.Rngs):
        self.embed = nnx.Linear(4, 8, rngs=rngs)
        self.blocks = nnx.List([Block(8, 8, rngs) for _ in range(n)])
        self.head = nnx.Linear(8, 2, rngs=rngs)


def param_count(node: Any) -> int:
    return sum(v.value.size for _, v in nnx.iter_graph(node) if isinstance(v, nnx.Param))


def test_a_100_block_model_prints_readably_and_fold_false_prints_everything(capsys) -> None:
    model = Model(100, nnx.Rngs(0))
    text = repr(model)
    nnx.display(model, fold=False)
    full = capsys.readouterr().out.rstrip("\n")
    with folding(False):
        assert repr(model) == full
    lines, full_lines = text.splitlines(), full.splitlines()
    assert len(lines) < 100 < len(full_lines) / 10  # one block instead of a hundred
    assert lines[0] == full_lines[0]  # the same counts at the root
    (head,) = [line for line in lines if " x Block(" in line]
    each = param_count(model.blocks[0])
    assert head == (
        f"    100 x Block( # [0:100], RngState: 100 x 2 = 200 (1.2 KB), "
        f"Param: 100 x {each} = {100 * each:,} ({100 * each * 4 / 1000:.1f} KB), "
        f"Total: 100 x {each + 2} = {100 * (each + 2):,} ({(100 * each * 4 + 1200) / 1000:.1f} KB)"
    )
    # the member shown has its arrays by shape (their values differ along the run)
    shown = text[text.index("100 x Block(") : text.index("embed=")]
    assert "value=Array(shape=(8, 8), dtype=float32)" in shown
    assert "value=Array(shape=(8,), dtype=float32)" in shown
    assert "Array([" not in shown
    nnx.display(model)
    assert capsys.readouterr().out.rstrip("\n") == text


def test_treescope_shows_a_folded_run_collapsed_with_its_counts() -> None:
    model = Model(24, nnx.Rngs(0))
    text = treescope.render_to_text(model)
    (line,) = [line for line in text.splitlines() if " x Block" in line]
    assert line.startswith("    24 x Block(...),  # [0:24], RngState: 24 x 2 = 48")
    assert len(text.splitlines()) < 40
    # expandable: the collapsed run holds its first member's rendering
    html = treescope.render_to_html(model, compressed=False)
    assert "24 x " in html and "linear=" in html and "LayerNorm" in html
    with folding(False):
        assert " x Block" not in treescope.render_to_text(model)


def test_runs_break_where_the_structure_changes() -> None:
    rngs = nnx.Rngs(0)
    layers = [nnx.Linear(2, 2, rngs=rngs) for _ in range(3)]
    layers += [nnx.Linear(2, 3, rngs=rngs)]  # another kernel shape
    layers += [nnx.Linear(2, 2, rngs=rngs) for _ in range(2)]
    layers += [nnx.Linear(2, 2, use_bias=False, rngs=rngs)]  # another static attribute
    text = repr(nnx.Sequential(*layers))
    heads = re.findall(r"^ *(?:\d+ x )?Linear\(.*$", text, flags=re.M)
    assert [h.strip().split(" #")[0] for h in heads] == [
        "3 x Linear(",
        "Linear(",
        "2 x Linear(",
        "Linear(",
    ]
    assert "# [0:3], Param: 3 x 6 = 18 (72 B)" in heads[0]
    assert "# [4:6]," in heads[2]


def test_a_plain_list_folds_too() -> None:
    class Net(nnx.Module):
        def __init__(self, rngs: nnx.Rngs):
            self.layers = [nnx.Linear(2, 2, rngs=rngs) for _ in range(5)]

    net = Net(nnx.Rngs(0))
    assert "    5 x Linear( # [0:5], Param: 5 x 6 = 30 (120 B)" in repr(net).splitlines()
    assert "5 x Linear(...)" in treescope.render_to_text(net)


def test_sharing_stops_a_run_and_references_keep_their_paths() -> None:
    rngs = nnx.Rngs(0)
    blocks = [nnx.Linear(2, 2, rngs=rngs) for _ in range(6)]
    blocks[4].kernel = blocks[3].kernel  # tied with its neighbour: 3 and 4 not one run

    class Net(nnx.Module):
        def __init__(self) -> None:
            self.first = blocks[0]  # printed before the list: blocks[0] is shared
            self.layers = nnx.List(blocks)
            self.tied = blocks[2].bias  # a reference into a folded member

    text = repr(Net())
    heads = [line.strip() for line in text.splitlines() if "Linear(" in line]
    assert heads[0].startswith("first=Linear(")
    assert heads[1] == "Linear(...),  # same as .first"
    assert heads[2].startswith("3 x Linear( # [1:4],")  # 1, 2, 3; 4 shares 3's kernel
    assert heads[3].startswith("Linear(")  # 4, in full
    assert heads[4].startswith("Linear(")  # 5: no run of one
    assert "tied=Param(...)  # same as .layers[2].bias" in text
    assert "kernel=Param(...),  # same as .layers[3].kernel" in text
    with folding(False):
        unfolded = repr(Net())
    assert text.splitlines()[0] == unfolded.splitlines()[0]


@given(
    st.lists(st.sampled_from([(2, 2), (2, 3), (3, 2)]), min_size=0, max_size=12),
)
def test_folding_keeps_counts_and_folds_the_maximal_runs(shapes: list[tuple[int, int]]) -> None:
    rngs = nnx.Rngs(0)
    model = nnx.Sequential(*[nnx.Linear(i, o, rngs=rngs) for i, o in shapes])
    with folding(False):
        full = repr(model)
    text = repr(model)
    assert text.splitlines()[0] == full.splitlines()[0]
    runs = []  # the maximal runs of equal shapes
    for s in shapes:
        if runs and runs[-1][0] == s:
            runs[-1][1] += 1
        else:
            runs.append([s, 1])
    heads = re.findall(r"^    (?:(\d+) x )?Linear\(", text, flags=re.M)
    assert [int(n) if n else 1 for n in heads] == [n for _, n in runs]
    assert treescope.render_to_text(model).count(" x Linear(...)") == sum(n > 1 for _, n in runs)


@pytest.mark.parametrize("fold", [True, False])
def test_small_arrays_outside_runs_still_print_their_values(fold: bool) -> None:
    model = nnx.Sequential(nnx.Linear(2, 2, rngs=nnx.Rngs(0)), nnx.Linear(2, 3, rngs=nnx.Rngs(0)))
    with folding(fold):
        text = repr(model)
    assert "value=Array([0., 0.], dtype=float32)" in text
    assert jnp.zeros(3).size == 3 and "value=Array([0., 0., 0.], dtype=float32)" in text


def test_back_references_and_links_between_children_stop_folding() -> None:
    class Cell(nnx.Module):
        def __init__(self) -> None:
            self.w = nnx.Param(jnp.ones(2))

    class Net(nnx.Module):
        def __init__(self, n: int) -> None:
            self.cells = nnx.List([Cell() for _ in range(n)])
            for cell in self.cells:
                cell.net = self  # a cycle through the root

    net = Net(4)
    text = repr(net)
    assert " x Cell(" not in text  # each cell reaches the root: none is folded
    assert text.count("net=Net(...),  # same as <root>") == 4
    assert "Net(...)" in treescope.render_to_text(net)

    linked = [Cell() for _ in range(4)]
    for a, b in itertools.pairwise(linked):
        a.next = b  # each cell holds the next one
    text = repr(nnx.List(linked))
    assert " x Cell(" not in text and "same as [1]" not in text
    with folding(False):
        assert repr(nnx.List(linked)) == text
