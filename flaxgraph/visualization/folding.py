"""Folding runs of structurally identical sub-modules in display (``24 x Block(...)``; what
folds and why sharing prevents it: the package README, "Folding").

Source: PyTorch's ``torch.nn.Module.__repr__`` (``N x Layer``, pytorch#90452)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any, NamedTuple

from flaxgraph.graphlib.refmap import RefMap
from flaxgraph.pytreelib.objects import Pytree
from flaxgraph.visualization.values import Totals, add_totals, size_text

MIN_RUN = 2
"""The shortest run of identical sub-modules that is folded."""

_FOLD: contextvars.ContextVar[bool] = contextvars.ContextVar("flaxgraph_display_fold", default=True)


@contextlib.contextmanager
def folding(enabled: bool) -> Iterator[None]:
    """Within the block, display folds runs (``True``, the default) or not."""
    token = _FOLD.set(enabled)
    try:
        yield
    finally:
        _FOLD.reset(token)


def fold_enabled() -> bool:
    """Whether display folds runs here (see ``folding``)."""
    return _FOLD.get()


class Probe(NamedTuple):
    """One sub-module rendered on its own, with arrays by shape."""

    text: str  # the rendering: equal texts, structurally identical
    seen: RefMap[str | None]  # every node and Variable inside, by its path from the sub-module
    totals: Totals  # its counts per Variable kind
    met_outside: bool  # it reaches a node rendered before it (not walked)


class Run(NamedTuple):
    """Consecutive children ``items[start:stop]`` shown as one folded entry."""

    start: int
    stop: int
    each: Totals  # the counts of one member
    total: Totals  # the counts of all members


class Segment(NamedTuple):
    """A child shown as is (``run is None``) or the start of a folded run."""

    position: int  # the child's position among its siblings
    run: Run | None


def plan(
    items: Sequence[tuple[Hashable, Any]], probe: Callable[[Any], Probe | None]
) -> tuple[list[Segment], list[Probe | None]]:
    """Splits positional children into children shown as is and folded runs.

    Args:
      items: the children, ``(key, value)`` in display order.
      probe: renders one child on its own (``Probe``), or ``None`` for a child holding no
        node or met before.

    Returns:
      The segments in order, and each child's probe (``None`` for a child that cannot be
      folded: not an Object, or sharing a node with what was rendered before it).
    """
    probes: list[Probe | None] = []
    earlier: set[int] = set()  # the nodes of the children before
    for _, value in items:
        p = probe(value)
        ids = {id(node) for node in p.seen} if p is not None else set()
        if not (isinstance(value, Pytree) and p is not None and not p.met_outside):
            p = None
        elif ids & earlier:
            p = None
        probes.append(p)
        earlier |= ids
    segments: list[Segment] = []
    i = 0
    while i < len(items):
        j = i + 1
        first = probes[i]
        if first is not None:
            while j < len(items) and (p := probes[j]) is not None and p.text == first.text:
                j += 1
        if j - i >= MIN_RUN and first is not None:
            total: Totals = {}
            for k in range(i, j):
                add_totals(total, probes[k].totals)  # type: ignore[union-attr]
            segments.append(Segment(i, Run(i, j, first.totals, total)))
            i = j
        else:
            segments.append(Segment(i, None))
            i += 1
    return segments, probes


def run_comment(keys: list[Hashable], run: Run) -> str:
    """The first-line comment of a folded run: its positions and its counts."""
    first, last = keys[run.start], keys[run.stop - 1]
    if type(first) is int and type(last) is int:
        where = f"[{first}:{last + 1}]"
    else:
        where = f"[{first!r}]..[{last!r}]"
    if not run.total:
        return where
    n = run.stop - run.start
    parts = [
        f"{kind}: {n} x {each:,} = {size_text(total, nbytes)}"
        for kind, ((each, _), (total, nbytes)) in _pairs(run.each, run.total)
    ]
    return f"{where}, " + ", ".join(parts)


def _pairs(each: Totals, total: Totals) -> list[tuple[str, tuple[list[int], list[int]]]]:
    """Per kind ``(each, total)``, with a ``Total`` last when there are several kinds."""
    pairs = [(kind, (each[kind], total[kind])) for kind in total]
    if len(total) > 1:
        sums = [
            [sum(n for n, _ in t.values()), sum(b for _, b in t.values())] for t in (each, total)
        ]
        pairs.append(("Total", (sums[0], sums[1])))
    return pairs


def register_members(
    items: Sequence[tuple[Hashable, Any]],
    run: Run,
    probes: list[Probe | None],
    seen: RefMap[Any],
    path_of: Callable[[Hashable], str | None],
) -> None:
    """Records the nodes of the run's members after the first at their paths (for later references)."""
    for k in range(run.start + 1, run.stop):
        key = items[k][0]
        base = path_of(key)
        for node, rel in probes[k].seen.items():  # type: ignore[union-attr]
            seen[node] = None if base is None or rel is None else base + rel
