"""treescope rendering of Objects, Variables, States and GraphDefs (notebooks).

treescope renders a value by calling its ``__treescope_repr__(path,
subtree_renderer)`` hook; the hooks of ``Object``, ``Variable``, ``State`` and
``GraphDef`` call the functions here (``flaxgraph/visualization/show.py`` registers them in
``flaxgraph/renderers.py``). They draw the same tree as the plain-text ``repr`` of
``text.py`` (both share ``values.py``): per-kind counts in each
node's first-line comment, and a node met again (shared reference or cycle) drawn
as a reference to where it was first drawn. ``to_html`` turns any of them into the
HTML document a notebook shows when the object is a cell's last expression.

Source: treescope's ``repr_lib``/``rendering_parts`` API; the Flax NNX display format.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any

from flaxgraph.graphlib.graphdefs import GraphDef
from flaxgraph.graphlib.refmap import RefMap
from flaxgraph.graphlib.registry import ARRAY, is_node_or_variable
from flaxgraph.pytreelib.objects import Pytree
from flaxgraph.statelib import State
from flaxgraph.variablelib.variable import Variable, metadata_of
from flaxgraph.visualization import folding
from flaxgraph.visualization.text import def_parts, probe
from flaxgraph.visualization.values import (
    ROOT,
    Totals,
    add_totals,
    array_repr,
    attr_head,
    attr_path,
    holds_nodes,
    kind_of,
    node_items,
    positional,
    size_text,
    totals_text,
    variable_totals,
)

# -- treescope ---------------------------------------------------------------------------------
#
# treescope renders a value by calling `__treescope_repr__(path, subtree_renderer)` on it,
# and the hook renders its children through `subtree_renderer`. The first flaxgraph hook
# of a rendering opens a session that lasts until it returns: it remembers where each node
# and Variable was first rendered, so a later sighting (shared reference or cycle) renders as
# `Linear(...)  # same as .a`, and it sums, per node, the counts of what is rendered inside it.


class _Session:
    def __init__(self) -> None:
        self.seen: RefMap[str | None] = RefMap()
        self.totals: list[Totals] = []  # one accumulator per node being rendered
        self.fold = folding.fold_enabled()  # runs of identical sub-modules folded
        self.shapes_only = False  # inside a folded run: arrays by shape and dtype
        self.folded = False  # a run was folded in the node being rendered (expand it)


_SESSION: contextvars.ContextVar[_Session | None] = contextvars.ContextVar(
    "flaxgraph_treescope_session", default=None
)


@contextlib.contextmanager
def _session() -> Iterator[_Session]:
    session = _SESSION.get()
    if session is not None:
        yield session
        return
    session = _Session()
    token = _SESSION.set(session)
    try:
        yield session
    finally:
        _SESSION.reset(token)


def _reference(x: Any, where: str | None, path: str | None) -> Any:
    from treescope import rendering_parts as rp

    target = "an earlier occurrence" if where is None else (where or ROOT)
    line = rp.siblings_with_annotations(
        f"{type(x).__name__}(...)",
        extra_annotations=[rp.comment_color(rp.text(f"  # same as {target}"))],
    )
    return rp.build_one_line_tree_node(line, path)


def _render_children(
    session: _Session,
    items: Sequence[tuple[Hashable, Any]],
    path: str | None,
    subtree_renderer: Any,
    keyed: bool,
) -> list[Any]:
    """Renders each child (a reference if already rendered) as one line of a node."""
    from treescope import rendering_parts as rp

    if not keyed and session.fold and len(items) >= folding.MIN_RUN:
        return _render_positional(session, items, path, subtree_renderer)
    lines = []
    for i, (key, value) in enumerate(items):
        child_path = None if path is None else path + attr_path(key)
        rendering = _render_child(session, value, child_path, subtree_renderer)
        if not keyed:
            lines.append(rendering)
            continue
        if i < len(items) - 1:
            comma = rp.siblings(",", rp.fold_condition(collapsed=rp.text(" ")))
        else:
            comma = rp.fold_condition(expanded=rp.text(","))
        lines.append(
            rp.build_full_line_with_annotations(
                rp.siblings_with_annotations(attr_head(key), rendering), comma
            )
        )
    return lines


def _render_child(session: _Session, value: Any, path: str | None, subtree_renderer: Any) -> Any:
    from treescope import rendering_parts as rp

    if is_node_or_variable(value) and value in session.seen:
        return _reference(value, session.seen[value], path)
    if session.shapes_only and kind_of(value) is ARRAY:
        return rp.build_one_line_tree_node(array_repr(value, summarize=True), path)
    if (
        session.fold
        and type(value) in (list, tuple)
        and len(value) >= folding.MIN_RUN
        and any(isinstance(v, Pytree) for v in value)
    ):
        # a plain list of sub-modules: drawn here (not by treescope) to fold its runs
        outer, session.folded = session.folded, False
        lines = _render_positional(session, list(enumerate(value)), path, subtree_renderer)
        folded, session.folded = session.folded, outer or session.folded
        open_, close = ("[", "]") if type(value) is list else ("(", ")")
        return rp.build_foldable_tree_node_from_children(
            prefix=open_,
            children=lines,
            suffix=close,
            comma_separated=True,
            force_trailing_comma=type(value) is tuple and len(value) == 1,
            path=path,
            expand_state=rp.ExpandState.EXPANDED if folded else rp.ExpandState.WEAKLY_COLLAPSED,
        )
    return subtree_renderer(value, path=path)


def _render_positional(
    session: _Session,
    items: Sequence[tuple[Hashable, Any]],
    path: str | None,
    subtree_renderer: Any,
) -> list[Any]:
    """The children of a list-like node, runs of identical sub-modules folded into
    one collapsed ``N x Type(...)`` entry (expand it to see the first member)."""

    def path_of(key: Hashable) -> str | None:
        return None if path is None else path + attr_path(key)

    def probe_of(x: Any) -> folding.Probe | None:
        if not holds_nodes(x) or (is_node_or_variable(x) and x in session.seen):
            return None
        return probe(x, (session.seen,))

    segments, probes = folding.plan(items, probe_of)
    keys = [k for k, _ in items]
    lines = []
    for i, run in segments:
        key, value = items[i]
        if run is None:
            lines.append(_render_child(session, value, path_of(key), subtree_renderer))
            continue
        shapes_only, session.shapes_only = session.shapes_only, True
        try:
            lines.append(
                _render_node(
                    value,
                    node_items(value),
                    path_of(key),
                    subtree_renderer,
                    totals_text,
                    fold=(f"{run.stop - run.start} x ", folding.run_comment(keys, run)),
                )
            )
        finally:
            session.shapes_only = shapes_only
        folding.register_members(items, run, probes, session.seen, path_of)
        session.folded = True
        if session.totals:
            each_after_first: Totals = {}
            for kind, (n, b) in run.total.items():
                e = run.each.get(kind, [0, 0])
                each_after_first[kind] = [n - e[0], b - e[1]]
            add_totals(session.totals[-1], each_after_first)
    return lines


def _render_node(
    x: Any,
    items: Sequence[tuple[Hashable, Any]],
    path: str | None,
    subtree_renderer: Any,
    comment: Callable[[Totals], str],
    own_totals: Totals | None = None,
    fold: tuple[str, str] | None = None,
) -> Any:
    from treescope import rendering_parts as rp

    with _session() as session:
        if x in session.seen:
            return _reference(x, session.seen[x], path)
        session.seen[x] = path
        keyed = not positional(items)
        session.totals.append({})
        outer, session.folded = session.folded, False
        try:
            children = _render_children(session, items, path, subtree_renderer, keyed)
        finally:
            totals = session.totals.pop()
            folded, session.folded = session.folded, outer or session.folded
        if own_totals is not None:
            totals = own_totals
        if session.totals:
            add_totals(session.totals[-1], totals)
        open_, close = ("(", ")") if keyed else ("([", "])")
        prefix = rp.siblings(
            rp.roundtrip_condition(roundtrip=rp.text("<")),
            fold[0] if fold is not None else "",
            rp.maybe_qualified_type_name(type(x)),
            open_,
        )
        suffix = rp.siblings(close, rp.roundtrip_condition(roundtrip=rp.text(">")))
        text = fold[1] if fold is not None else comment(totals) if totals else ""
        if fold is None:
            return rp.build_foldable_tree_node_from_children(
                prefix=prefix,
                children=children,
                suffix=suffix,
                comma_separated=not keyed,
                path=path,
                first_line_annotation=rp.comment_color(rp.text(f" # {text}")) if text else None,
                # a folded run inside: expanded, so that its counts show
                expand_state=rp.ExpandState.EXPANDED if folded else rp.ExpandState.WEAKLY_COLLAPSED,
            )
        # A folded run starts collapsed, `N x Type(...),  # counts`; expanded, it shows
        # its first member, the counts after its closing line.
        lines = [
            rp.fold_condition(expanded=rp.build_full_line_with_annotations(c)) for c in children
        ]
        node = rp.build_foldable_tree_node_from_children(
            prefix=prefix,
            children=[*lines, rp.fold_condition(collapsed=rp.text("..."))],
            suffix=suffix,
            path=path,
            expand_state=rp.ExpandState.COLLAPSED,
        )
        return rp.siblings_with_annotations(
            node, extra_annotations=[rp.comment_color(rp.text(f"  # {text}"))]
        )


def object_treescope_repr(obj: Any, path: str | None, subtree_renderer: Any) -> Any:
    """Renders an Object for treescope (the body of ``Object.__treescope_repr__``).

    Args:
      obj: a graph node.
      path: the path treescope gives the node (``None`` when it tracks none).
      subtree_renderer: treescope's renderer for the children.

    Returns:
      A treescope rendering: ``TypeName(`` with the per-kind counts as a comment on
      its first line, one ``name=value`` line per attribute, ``)``. A node or
      Variable already rendered in the same rendering shows as ``TypeName(...)  #
      same as .path``, which also ends cycles.

    Raises:
      Whatever ``subtree_renderer`` raises for a child (treescope catches it when
      asked to ignore exceptions).

    Example::

      >>> import jax.numpy as jnp, treescope, flaxgraph as nnx
      >>> class Scale(nnx.Module):
      ...   def __init__(self):
      ...     self.w = nnx.Param(jnp.ones(30))
      >>> treescope.render_to_text(Scale()).splitlines()[:2]
      ['Scale( # Param: 30 (120 B)', '  w=Param( # 30 (120 B)']

    Short renderings fit on one line and then show no comment (treescope shows
    first-line comments only on expanded nodes).

    Source: Flax NNX renders Objects in treescope the same way; built with
    treescope's public ``rendering_parts`` API (``repr_lib`` has no first-line
    comment).
    """
    return _render_node(obj, node_items(obj), path, subtree_renderer, totals_text)


def variable_treescope_repr(v: Variable[Any], path: str | None, subtree_renderer: Any) -> Any:
    """Renders a Variable for treescope (the body of ``Variable.__treescope_repr__``).

    Args:
      v: a Variable.
      path: the path treescope gives it (``None`` when it tracks none).
      subtree_renderer: treescope's renderer for its value and metadata.

    Returns:
      A treescope rendering ``Kind( # n (bytes)`` with ``value=`` and one line per
      metadata entry; a reference if the Variable was already rendered.

    Raises:
      Whatever ``subtree_renderer`` raises for the value.

    Example::

      >>> import jax.numpy as jnp, treescope, flaxgraph as nnx
      >>> treescope.render_to_text(nnx.Param(jnp.ones(30))).splitlines()[0]
      'Param( # 30 (120 B)'

    Source: Flax NNX renders Variables in treescope the same way.
    """
    fields = [("value", v.raw_value), *sorted(metadata_of(v).items())]
    totals = variable_totals(v)

    def comment(t: Totals) -> str:
        ((n, b),) = t.values()
        return size_text(n, b)

    return _render_node(v, fields, path, subtree_renderer, comment, own_totals=totals)


def state_treescope_repr(state: State, path: str | None, subtree_renderer: Any) -> Any:
    """Renders a State for treescope as ``State({key: value, ...})``.

    Args:
      state: a State.
      path: the path treescope gives it.
      subtree_renderer: treescope's renderer for the entries.

    Returns:
      A treescope rendering in treescope's wrapped-dictionary format; Variables
      inside render with their counts, a Variable met twice as a reference.

    Raises:
      Whatever ``subtree_renderer`` raises for an entry.

    Example::

      >>> import jax.numpy as jnp, treescope, flaxgraph as nnx
      >>> treescope.render_to_text(nnx.State({'w': nnx.Param(jnp.ones(2))})).splitlines()[0]
      'State({'

    Source: Flax NNX ``State`` rendering; uses ``treescope.repr_lib``.
    """
    from treescope import repr_lib

    with _session() as session:

        def render(value: Any, path: str | None = None) -> Any:
            if is_node_or_variable(value) and value in session.seen:
                return _reference(value, session.seen[value], path)
            return subtree_renderer(value, path=path)

        return repr_lib.render_dictionary_wrapper(
            object_type=type(state),
            wrapped_dict=dict(state.items()),
            path=path,
            subtree_renderer=render,
            roundtrippable=False,
        )


def graphdef_treescope_repr(graphdef: GraphDef, path: str | None, subtree_renderer: Any) -> Any:
    """Renders a GraphDef for treescope: the tree of the plain-text ``repr``, foldable.

    Args:
      graphdef: a ``GraphDef``.
      path: the path treescope gives it.
      subtree_renderer: unused (definitions are rendered here); part of the hook.

    Returns:
      A treescope rendering ``GraphDef(num_leaves=n, root=NodeDef(Type, index=i, ...))``
      whose definitions fold like the text ``repr``'s blocks.

    Example::

      >>> import jax.numpy as jnp, treescope, flaxgraph as nnx
      >>> class Scale(nnx.Module):
      ...   def __init__(self):
      ...     self.w = nnx.Param(jnp.ones(2))
      >>> print(treescope.render_to_text(nnx.graphdef(Scale())))
      GraphDef(num_leaves=1,
        root=NodeDef(Scale, index=0, w=VariableDef(Param, index=1))
      )

    Source: flaxgraph's own GraphDef format (``visualization.text.graphdef_repr``).
    """
    from treescope import rendering_parts as rp

    def block(opening: str, children: list[tuple[str, Any]], path: str | None) -> Any:
        lines = []
        for i, (head, child) in enumerate(children):
            comma = (
                rp.siblings(",", rp.fold_condition(collapsed=rp.text(" ")))
                if i < len(children) - 1
                else rp.empty_part()
            )
            line = rp.siblings_with_annotations(head, render(child, None))
            lines.append(rp.build_full_line_with_annotations(line, comma))
        return rp.build_foldable_tree_node_from_children(
            prefix=rp.siblings(opening, ",", rp.fold_condition(collapsed=rp.text(" "))),
            children=lines,
            suffix=")",
            path=path,
        )

    def render(d: Any, path: str | None) -> Any:
        text, children = def_parts(d)
        if children is None:
            return rp.build_one_line_tree_node(text, path)
        return block(text, children, path)

    return block(f"GraphDef(num_leaves={graphdef.num_leaves}", [("root=", graphdef.root)], path)


def to_html(obj: Any) -> str:
    """The treescope HTML document of ``obj`` (what a notebook cell shows).

    Args:
      obj: an Object, Variable, State or GraphDef (any value treescope renders).

    Returns:
      A self-contained HTML fragment with treescope's scripts and the compressed
      rendering; arrays are summarised by treescope (shape, dtype, statistics).

    Raises:
      Nothing of its own: a child that fails to render is shown as an error.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> "treescope" in to_html(nnx.Param(jnp.ones(2)))
      True

    Source: treescope's ``render_to_html``.
    """
    import treescope

    return treescope.render_to_html(obj, ignore_exceptions=True, compressed=True)
