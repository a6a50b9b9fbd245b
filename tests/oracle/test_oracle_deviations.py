"""Each deviation the oracle accepts is listed once, documented, and still occurs.

``tests/conformance/oracle_deviations.txt`` (the list), ``oracle_deviations.DEVIATIONS``
(how each is recognised, with a minimal program) and guides/from_flax.md must name the
same deviations; each deviation's minimal program must still show it, classified as it
(a listed deviation that no longer occurs fails here: remove it from the list).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from oracle_compare import compare
from oracle_deviations import DEVIATIONS, listed

GUIDE = Path(__file__).resolve().parents[2] / "guides" / "from_flax.md"


def test_list_and_table_name_the_same_deviations() -> None:
    names = [d.name for d in DEVIATIONS]
    assert len(set(names)) == len(names)
    assert set(listed()) == set(names), (
        "tests/conformance/oracle_deviations.txt and oracle_deviations.DEVIATIONS disagree"
    )
    assert all(listed().values()), "every listed deviation gives its reason"


@pytest.mark.parametrize("deviation", DEVIATIONS, ids=lambda d: d.name)
def test_deviation_is_documented_in_the_guide(deviation) -> None:
    assert f"`{deviation.name}`" in GUIDE.read_text(), (
        f"guides/from_flax.md does not explain the oracle deviation {deviation.name!r}"
    )


@pytest.mark.parametrize("deviation", DEVIATIONS, ids=lambda d: d.name)
def test_deviation_still_occurs(deviation) -> None:
    ops = tuple(dict.fromkeys(("construct", deviation.op)))
    found = [d for d in compare(deviation.example, ops) if d.op == deviation.op]
    assert found, (
        f"the listed deviation {deviation.name!r} no longer occurs on its example "
        f"({deviation.example!r}): flaxgraph now does what Flax does; remove it from "
        "tests/conformance/oracle_deviations.txt, oracle_deviations.py and guides/from_flax.md"
    )
    assert [d.deviation for d in found] == [deviation.name], found[0].report()
