"""The name table of ``guides/from_flax.md`` is true: every name it calls provided
exists in flaxgraph, every name it calls not provided does not, and (where Flax is
installed) it lists exactly the public names of ``flax.nnx``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import flaxgraph as nnx

GUIDE = Path(__file__).resolve().parent.parent / "guides" / "from_flax.md"
ROW = re.compile(r"^\| `([A-Za-z_][A-Za-z0-9_]*)` \| (same|differs|not provided) \| (.*) \|$")


def table() -> dict[str, tuple[str, str]]:
    rows = {}
    for line in GUIDE.read_text(encoding="utf-8").splitlines():
        m = ROW.match(line)
        if m:
            rows[m[1]] = (m[2], m[3].strip())
    return rows


def test_the_table_has_a_row_per_name_and_reasons_where_needed() -> None:
    rows = table()
    assert len(rows) == 236
    for name, (status, note) in rows.items():
        if status != "same":
            assert note, f"{name} is marked {status!r} without saying why"


def test_provided_names_exist_and_the_others_do_not() -> None:
    for name, (status, _) in table().items():
        assert hasattr(nnx, name) == (status != "not provided"), name


def test_the_counts_in_the_text_match_the_table() -> None:
    statuses = [s for s, _ in table().values()]
    text = GUIDE.read_text(encoding="utf-8")
    same, differs, absent = (statuses.count(s) for s in ("same", "differs", "not provided"))
    assert f"{same + differs} are\nprovided ({same} the same, {differs} with" in text
    assert f"the {absent} not provided" in text


def test_the_table_lists_exactly_the_public_names_of_flax_nnx() -> None:
    flax_nnx = pytest.importorskip("flax.nnx")
    public = {n for n in dir(flax_nnx) if not n.startswith("_")}
    assert set(table()) == public
