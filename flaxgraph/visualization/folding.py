"""Folding runs of structurally identical sub-modules in display (``24 x Block(...)``).

A model with many identical blocks in a list (``nnx.List``, a plain list or tuple)
would print every block in full; display shows a run of two or more consecutive,
structurally identical Objects once instead, as PyTorch's module ``repr`` does for
repeated layers (``(0-23): 24 x Block(...)``)::

  24 x Block( # [0:24], Param: 24 x 1,234 = 29,616 (118.5 KB)

The block shown is the run's first, with its arrays by shape and dtype (their values
differ along the run). Two Objects are *structurally identical* when their renderings
with arrays shown by shape are the same text: same types, attribute names, static
values, Variable kinds, shapes, dtypes and metadata, same sharing inside. An Object
that shares a node or Variable with anything rendered before it (an earlier child
of the list included) is never folded, so every Variable is still counted once and a later
reference to a folded one still says where it is (``# same as .blocks[7].kernel``).
In treescope a run starts collapsed, ``24 x Block(...),  # [0:24], …``, and expands to
its first member.
``nnx.display(obj, fold=False)`` shows everything.

Source: PyTorch's ``torch.nn.Module.__repr__`` (repeated ``ModuleList`` items folded
as ``N x Layer``, pytorch#90452); the Flax NNX display format otherwise.
"""

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
    items: Sequence[tuple[Hashable, Any]],
    probe: Callable[[Any], Probe | None],
) -> tuple[list[Segment], list[Probe | None]]:
    """Splits positional children into children shown as is and folded runs.

    Args:
      items: the children, ``(key, value)`` in display order.
      probe: renders one child on its own (``Probe``), noting the nodes rendered
        before it reaches without walking into them; ``None`` for a child that holds
        no node or is itself one rendered before.

    Returns:
      The segments in order, and each child's probe (``None`` for a child that
      cannot be folded: not an Object, or sharing a node or Variable with what was
      rendered before the list or with an earlier child).
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
    """Records the nodes of the run's members after the first (which is rendered) at
    their paths, so a later reference to one of them says where it is."""
    for k in range(run.start + 1, run.stop):
        key = items[k][0]
        base = path_of(key)
        for node, rel in probes[k].seen.items():  # type: ignore[union-attr]
            seen[node] = None if base is None or rel is None else base + rel
