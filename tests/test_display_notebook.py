"""flaxgraph's rich display in a real Jupyter kernel (tests flaxgraph/visualization/show.py).

A small notebook runs in an ipykernel (through ``guides/run_guide.py``'s
``execute``): an Object, a Variable, a State, a GraphDef and an Rngs that end a
cell must come back with a treescope ``text/html`` rendering next to a
``text/plain`` that is exactly their ``repr``; ``nnx.display`` must show one
output per object with both.
"""

from __future__ import annotations

import nbformat
import pytest
from helpers import guide_runner

SETUP = """\
import jax.numpy as jnp
import flaxgraph as nnx

class Twice(nnx.Module):
    def __init__(self, rngs):
        self.layer = nnx.Linear(2, 3, rngs=rngs)
        self.again = self.layer

model = Twice(nnx.Rngs(0))
graphdef, state = nnx.split(model)
shown = {
    "object": model,
    "variable": model.layer.kernel,
    "state": state,
    "graphdef": graphdef,
    "rngs": nnx.Rngs(0),
}
for name, value in shown.items():
    print(f"--- {name}")
    print(repr(value))
"""

KINDS = ["object", "variable", "state", "graphdef", "rngs"]


@pytest.fixture(scope="module")
def executed() -> nbformat.NotebookNode:
    cells = [nbformat.v4.new_code_cell(SETUP)]
    cells += [nbformat.v4.new_code_cell(f'shown["{kind}"]') for kind in KINDS]
    cells.append(nbformat.v4.new_code_cell('nnx.display(shown["variable"], 3)'))
    notebook = nbformat.v4.new_notebook(cells=cells)
    guide_runner().execute(notebook, timeout=120)
    return notebook


def _reprs(executed: nbformat.NotebookNode) -> dict[str, str]:
    """The ``repr`` of each value as the kernel printed it, by kind."""
    printed = "".join(o.text for o in executed.cells[0].outputs if o.output_type == "stream")
    chunks = printed.split("--- ")[1:]
    return {c.partition("\n")[0]: c.partition("\n")[2].rstrip("\n") for c in chunks}


@pytest.mark.parametrize("kind", KINDS)
def test_last_expression_renders_with_treescope_and_keeps_its_repr(
    executed: nbformat.NotebookNode, kind: str
) -> None:
    cell = executed.cells[1 + KINDS.index(kind)]
    (result,) = [o for o in cell.outputs if o.output_type == "execute_result"]
    html = result.data["text/html"]
    assert "<treescope-container" in html and "treescope_out_" in html
    assert result.data["text/plain"] == _reprs(executed)[kind]


def test_the_plain_repr_in_the_kernel_is_the_text_format(
    executed: nbformat.NotebookNode,
) -> None:
    reprs = _reprs(executed)
    assert reprs["object"].splitlines()[0].startswith("Twice( # Param: 9 (36 B)")
    assert "layer=Linear(...)  # same as .again" in reprs["object"]  # attributes sorted
    assert reprs["graphdef"].startswith("GraphDef(num_leaves=2,")


def test_display_shows_html_and_text_per_object(executed: nbformat.NotebookNode) -> None:
    outputs = executed.cells[-1].outputs
    shown = [o for o in outputs if o.output_type == "display_data"]
    assert len(shown) == 2 and not [o for o in outputs if o.output_type == "stream"]
    assert shown[0].data["text/plain"] == _reprs(executed)["variable"]
    assert shown[1].data["text/plain"] == "3"
    assert all("<treescope-container" in o.data["text/html"] for o in shown)
