"""The display tree: what a value shows, walked once, for the text ``repr`` and treescope
(the records, their cost and where treescope folds: the package README).

Source: the output format of Flax NNX ``repr``/``nnx.display``; the GraphDef format is
flaxgraph's own."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple, Union

from flaxgraph.graphlib.graphdefs import (
    ContainerDef,
    GraphDef,
    NodeDef,
    NodeRef,
    StaticDef,
    VariableDef,
)
from flaxgraph.graphlib.refmap import RefMap
from flaxgraph.graphlib.registry import (
    DATA_LEAF,
    DICT,
    PYTREE,
    SEQUENCE,
    VARIABLE,
    is_node_or_variable,
    node_impl,
)
from flaxgraph.pytreelib.objects import Pytree
from flaxgraph.statelib import State
from flaxgraph.variablelib.variable import Variable, metadata_of
from flaxgraph.visualization import folding
from flaxgraph.visualization.values import (
    Totals,
    add_totals,
    kind_of,
    pytree_level,
    safe_repr,
    size_text,
    totals_text,
    variable_totals,
)


def holds_nodes(x: Any) -> bool:
    """Whether ``x`` is, or is a container holding, a node, Variable or State."""
    kind = kind_of(x)
    if kind is None:
        return False
    if kind <= VARIABLE or isinstance(x, State):  # a graph node, a Variable, a State
        return True
    if kind is SEQUENCE or kind is DICT:
        return any(holds_nodes(c) for c in (x.values() if kind is DICT else x))
    return kind is PYTREE and any(holds_nodes(c) for _, c in pytree_level(x) or ())


def attr_path(key: Hashable) -> str:
    return f".{key}" if isinstance(key, str) and key.isidentifier() else f"[{key!r}]"


def node_items(x: Any) -> list[tuple[Hashable, Any]]:
    items = []
    for key, value in node_impl(x).flatten(x)[0]:
        if kind_of(value) is DATA_LEAF:
            value = value.value
        items.append((key, value))
    return items


def no_head(key: Hashable) -> str:
    return ""


def attr_head(key: Hashable) -> str:
    return f"{key}=" if isinstance(key, str) else f"[{key!r}]="


def dict_head(key: Hashable) -> str:
    return f"{key!r}: "


def item_path(key: Hashable) -> str:
    return f"[{key!r}]"


class Leaf(NamedTuple):
    """A value shown by its own ``repr`` (arrays through ``array_repr``)."""

    value: Any
    summarize: bool  # inside a folded run: every array by shape and dtype


class Reference(NamedTuple):
    """A node or Variable met before: ``Type(...)  # same as .path``."""

    type_name: str
    where: str | None  # the path where it was first met (None: not tracked)
    outside: bool = False  # met by a probe: shown around the probed value, not walked


class Child(NamedTuple):
    """One line inside a ``Bracketed``: ``head`` then the child's tree."""

    head: str  # 'name=', "'key': " or ''
    path: str | None  # the child's path (None: not tracked)
    tree: Tree


class Bracketed(NamedTuple):
    """A node, Variable, State or container: ``opening``, one child per line, ``closing``."""

    value: Any
    kind: str  # 'node', 'variable', 'sequence' (a list treescope lets us draw) or 'other'
    opening: str  # 'Linear(', 'List([', 'State({', '{', '[', '('
    closing: str
    children: list[Child]
    totals: Totals  # the counts of the Variables shown inside (a Variable's own)
    comment: str  # the first line's comment: the counts of a node or Variable, else ''
    keyed: bool  # children have headings (else shown like the items of a list)
    trailing_comma: bool  # a one-element tuple
    has_run: bool  # a folded run somewhere inside (treescope shows it expanded)


class FoldedRun(NamedTuple):
    """Consecutive identical sub-modules shown once: ``length x`` its first member."""

    length: int  # the number of members
    comment: str  # positions and counts, ``[0:24], Param: 24 x 1,234 = 29,616 (118.5 KB)``
    first: Bracketed  # the first member, its arrays by shape
    totals: Totals  # the counts of all members


Tree = Union[Leaf, Reference, Bracketed, FoldedRun]


def totals_of(tree: Tree) -> Totals:
    """The per-kind counts of what ``tree`` shows (none for leaves and references)."""
    return tree.totals if isinstance(tree, (Bracketed, FoldedRun)) else {}


class DisplayWalk:
    """One walk of a display: the nodes met so far and how runs are folded.

    ``tree(x, path)`` returns the display tree of ``x`` (``path``: ``''`` at the root,
    ``None`` when not tracked); ``blocks`` keeps each node's and Variable's ``Bracketed``
    for treescope's hooks, ``seen`` where each was first met. Never raises for graphs of
    Objects, Variables, arrays and containers.

    Args:
      fold: fold runs of identical sub-modules.
      fingerprint: the text compared to tell identical sub-modules (``text.tree_text``).
      fold_everywhere: fold in every list (text); ``False``: only where treescope lets
        flaxgraph draw the list.
      shapes_only: show every array by shape and dtype.
      outside: the nodes shown around a probed value (noted as met, never walked).

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> from flaxgraph.visualization.text import tree_text
      >>> class Pair(nnx.Module):
      ...   def __init__(self):
      ...     self.a = self.b = nnx.Param(jnp.ones(2))
      >>> tree = DisplayWalk(fold=True, fingerprint=tree_text).tree(Pair(), "")
      >>> tree.comment, [c.head for c in tree.children]
      ('Param: 2 (8 B)', ['a=', 'b='])
      >>> tree.children[1].tree
      Reference(type_name='Param', where='.a', outside=False)
    """

    def __init__(
        self,
        *,
        fold: bool,
        fingerprint: Callable[[Tree], str],
        fold_everywhere: bool = True,
        shapes_only: bool = False,
        outside: tuple[RefMap[Any], ...] = (),
    ) -> None:
        self.fold = fold
        self.fingerprint = fingerprint
        self.fold_everywhere = fold_everywhere
        self.shapes_only = shapes_only
        self.outside = outside
        self.met_outside = False
        self.seen: RefMap[str | None] = RefMap()  # where each node and Variable was met
        self.blocks: RefMap[Bracketed] = RefMap()  # the Bracketed of each node and Variable

    def tree(self, x: Any, path: str | None, drawn_parent: bool = False) -> Tree:
        """The display tree of ``x`` at ``path``; ``drawn_parent``: treescope lets us draw the parent."""
        kind = kind_of(x)
        if kind is not None and kind <= VARIABLE:  # a graph node or a Variable
            if self.outside and self._outside(x):
                self.met_outside = True
                return Reference(type(x).__name__, None, outside=True)
            if x in self.seen:
                return Reference(type(x).__name__, self.seen[x])
            self.seen[x] = path
            block = self._variable(x, path) if kind is VARIABLE else self._node(x, path)
            self.blocks[x] = block
            return block
        if isinstance(x, State):
            return self._block(x, list(x.items()), path, ("State({", "})"), dict_head, item_path)
        if (kind is SEQUENCE or kind is DICT) and holds_nodes(x):
            if kind is DICT:
                return self._block(x, list(x.items()), path, ("{", "}"), dict_head, item_path)
            drawn = (
                drawn_parent
                and self.fold
                and type(x) in (list, tuple)
                and len(x) >= folding.MIN_RUN
                and any(isinstance(v, Pytree) for v in x)
            )
            return self._block(
                x,
                list(enumerate(x)),
                path,
                ("[", "]") if type(x) is list else ("(", ")"),
                no_head,
                item_path,
                kind="sequence" if drawn else "other",
                trailing_comma=type(x) is tuple and len(x) == 1,
            )
        if kind is PYTREE and holds_nodes(x):
            items = pytree_level(x) or []
            head = attr_head if all(isinstance(k, str) for k, _ in items) else no_head
            return self._block(x, items, path, (f"{type(x).__name__}(", ")"), head, attr_path)
        return Leaf(x, self.shapes_only)

    def _node(self, x: Any, path: str | None) -> Bracketed:
        items = node_items(x)
        name = type(x).__name__
        if items and all(type(k) is int for k, _ in items):  # nnx.List: like a list
            return self._block(x, items, path, (f"{name}([", "])"), no_head, attr_path, kind="node")
        return self._block(x, items, path, (f"{name}(", ")"), attr_head, attr_path, kind="node")

    def _variable(self, v: Variable[Any], path: str | None) -> Bracketed:
        fields = [("value", v.raw_value), *sorted(metadata_of(v).items())]
        name = type(v).__name__
        block = self._block(
            v, fields, path, (f"{name}(", ")"), attr_head, attr_path, kind="variable"
        )
        totals = variable_totals(v)
        if not totals:
            return block._replace(totals=totals)
        ((n, b),) = totals.values()
        return block._replace(totals=totals, comment=size_text(n, b))

    def _block(
        self,
        x: Any,
        items: Sequence[tuple[Hashable, Any]],
        path: str | None,
        brackets: tuple[str, str],
        head: Callable[[Hashable], str],
        child_path: Callable[[Hashable], str],
        *,
        kind: str = "other",
        trailing_comma: bool = False,
    ) -> Bracketed:
        def path_of(key: Hashable) -> str | None:
            return None if path is None else path + child_path(key)

        drawn = kind != "other"
        segments = [folding.Segment(i, None) for i in range(len(items))]
        probes: list[folding.Probe | None] = []
        if (
            self.fold
            and head is no_head
            and len(items) >= folding.MIN_RUN
            and (self.fold_everywhere or drawn)
        ):
            segments, probes = folding.plan(items, self._probe)
        children: list[Child] = []
        totals: Totals = {}
        for i, run in segments:
            key, value = items[i]
            tree = (
                self.tree(value, path_of(key), drawn)
                if run is None
                else self._run(items, run, probes, path_of)
            )
            add_totals(totals, totals_of(tree))
            children.append(Child(head(key), path_of(key), tree))
        has_run = any(
            isinstance(c.tree, FoldedRun) or (isinstance(c.tree, Bracketed) and c.tree.has_run)
            for c in children
        )
        comment = totals_text(totals) if kind == "node" and totals else ""
        return Bracketed(
            x,
            kind,
            *brackets,
            children,
            totals,
            comment,
            head is not no_head,
            trailing_comma,
            has_run,
        )

    def _run(
        self,
        items: Sequence[tuple[Hashable, Any]],
        run: folding.Run,
        probes: list[folding.Probe | None],
        path_of: Callable[[Hashable], str | None],
    ) -> FoldedRun:
        key, value = items[run.start]
        shapes_only, self.shapes_only = self.shapes_only, True
        try:
            first = self.tree(value, path_of(key))
        finally:
            self.shapes_only = shapes_only
        assert isinstance(first, Bracketed)  # a probed member is met here first
        folding.register_members(items, run, probes, self.seen, path_of)
        keys = [k for k, _ in items]
        return FoldedRun(run.stop - run.start, folding.run_comment(keys, run), first, run.total)

    def _probe(self, x: Any) -> folding.Probe | None:
        """``x`` walked on its own with every array by shape (what folding compares)."""
        if not holds_nodes(x) or (is_node_or_variable(x) and (x in self.seen or self._outside(x))):
            return None
        walk = DisplayWalk(
            fold=True,
            fingerprint=self.fingerprint,
            shapes_only=True,
            outside=(self.seen, *self.outside),
        )
        tree = walk.tree(x, "")
        return folding.Probe(self.fingerprint(tree), walk.seen, totals_of(tree), walk.met_outside)

    def _outside(self, x: Any) -> bool:
        return any(x in seen for seen in self.outside)


class Definition(NamedTuple):
    """One GraphDef definition: ``text`` alone, or ``text,`` then heads and children."""

    text: str
    children: list[tuple[str, Definition]] | None  # None: shown on one line


def definition_tree(d: Any) -> Definition:
    """The display tree of a GraphDef (or a definition inside one); never raises.

    Returns ``Definition(text, children)``: ``children`` is ``None`` for a one-line
    definition, else the ``(heading, definition)`` lines between ``text + ','`` and ``)``.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> class Scale(nnx.Module):
      ...   def __init__(self):
      ...     self.w = nnx.Param(jnp.ones(2))
      >>> definition_tree(nnx.graphdef(Scale())).children[0][1].children
      [('w=', Definition(text='VariableDef(Param, index=1)', children=None))]
    """
    if isinstance(d, GraphDef):
        return Definition(
            f"GraphDef(num_leaves={d.num_leaves}", [("root=", definition_tree(d.root))]
        )
    if isinstance(d, NodeDef):
        meta = f", metadata={d.metadata!r}" if d.metadata else ""
        opening = f"NodeDef({d.type.__name__}, index={d.index}{meta}"
        if not d.attributes:
            return Definition(opening + ")", None)
        return Definition(opening, [(attr_head(k), definition_tree(c)) for k, c in d.attributes])
    if isinstance(d, VariableDef):
        meta = f", metadata={dict(d.metadata)!r}" if d.metadata else ""
        return Definition(f"VariableDef({d.type.__name__}, index={d.index}{meta})", None)
    if isinstance(d, NodeRef):
        return Definition(f"NodeRef({d.type.__name__}, index={d.index})", None)
    if isinstance(d, StaticDef):
        return Definition(f"StaticDef({safe_repr(d.value)})", None)
    if isinstance(d, ContainerDef):
        if not d.children:
            return Definition(f"ContainerDef({d.type.__name__}, [])", None)
        children = [
            (f"{k!r}: ", definition_tree(c)) for k, c in zip(d.keys, d.children, strict=True)
        ]
        return Definition(f"ContainerDef({d.type.__name__}", children)
    return Definition(safe_repr(d), None)
