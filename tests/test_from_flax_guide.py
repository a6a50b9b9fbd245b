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


MEMBER_ROW = re.compile(
    r"^\| `([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)` \| (same|differs|not provided) \| (.*) \|$"
)


def member_table() -> dict[tuple[str, str], tuple[str, str]]:
    rows = {}
    for line in GUIDE.read_text(encoding="utf-8").splitlines():
        m = MEMBER_ROW.match(line)
        if m:
            rows[(m[1], m[2])] = (m[3], m[4].strip())
    return rows


def test_the_member_table_is_true_for_flaxgraph() -> None:
    rows = member_table()
    assert len(rows) > 100
    for (cls, member), (status, note) in rows.items():
        assert hasattr(getattr(nnx, cls), member) == (status != "not provided"), f"{cls}.{member}"
        if status != "same":
            assert note, f"{cls}.{member} is marked {status!r} without saying why"


def test_the_member_table_lists_every_public_member_of_those_flax_classes() -> None:
    flax_nnx = pytest.importorskip("flax.nnx")
    rows = member_table()
    for cls in {c for c, _ in rows}:
        public = {n for n in dir(getattr(flax_nnx, cls)) if not n.startswith("_")}
        assert {m for c, m in rows if c == cls} == public, cls


def test_every_conformance_deviation_is_explained_in_the_guide() -> None:
    deviations = Path(__file__).resolve().parent / "conformance" / "deviations.txt"
    listed = {
        line.split("|", 1)[0].strip()
        for line in deviations.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    text = GUIDE.read_text(encoding="utf-8")
    section = text[text.index("## Flax's own tests that do not pass here") :]
    in_guide = set(re.findall(r"^\| `([^`]+::[^`]+)` \|", section, flags=re.M))
    assert in_guide == listed
