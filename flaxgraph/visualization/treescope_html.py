"""treescope rendering of Objects, Variables, States and GraphDefs: only formats the tree
``display_tree.py`` walks (the package README); ``to_html`` gives a notebook's HTML::

  >>> import jax.numpy as jnp, treescope, flaxgraph as nnx
  >>> class Scale(nnx.Module):
  ...   def __init__(self):
  ...     self.w = nnx.Param(jnp.ones(30))
  >>> treescope.render_to_text(Scale()).splitlines()[:2]
  ['Scale( # Param: 30 (120 B)', '  w=Param( # 30 (120 B)']
  >>> print(treescope.render_to_text(nnx.graphdef(Scale())))
  GraphDef(num_leaves=1,
    root=NodeDef(Scale, index=0, w=VariableDef(Param, index=1))
  )

A rendering that fits on one line shows no comment (treescope shows first-line comments
only on expanded nodes). Source: treescope's ``rendering_parts`` API; Flax NNX's format."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

from flaxgraph.graphlib.graphdefs import GraphDef
from flaxgraph.graphlib.registry import ARRAY, is_node_or_variable
from flaxgraph.statelib import State
from flaxgraph.visualization import folding
from flaxgraph.visualization.display_tree import (
    Bracketed,
    Child,
    Definition,
    DisplayWalk,
    FoldedRun,
    Leaf,
    Reference,
    definition_tree,
)
from flaxgraph.visualization.text import tree_text
from flaxgraph.visualization.values import ROOT, array_repr, kind_of

# treescope calls `__treescope_repr__(path, subtree_renderer)` on a value, and the hook
# renders its children through `subtree_renderer`. The first flaxgraph hook of a rendering
# walks its value (display_tree.py); each hook then formats the Bracketed the walk made for
# its node, or a reference to where the node was first met: `Linear(...)  # same as .a`.


@contextlib.contextmanager
def _walk() -> Iterator[tuple[DisplayWalk, bool]]:
    """The walk of the rendering under way, and whether it starts here."""
    walk = _WALK.get()
    if walk is not None:
        yield walk, False
        return
    walk = DisplayWalk(fold=folding.fold_enabled(), fingerprint=tree_text, fold_everywhere=False)
    token = _WALK.set(walk)
    try:
        yield walk, True
    finally:
        _WALK.reset(token)


_WALK: contextvars.ContextVar[DisplayWalk | None] = contextvars.ContextVar(
    "flaxgraph_treescope_walk", default=None
)


def _reference(r: Reference, path: str | None) -> Any:
    from treescope import rendering_parts as rp

    target = "an earlier occurrence" if r.where is None else (r.where or ROOT)
    line = rp.siblings_with_annotations(
        f"{r.type_name}(...)",
        extra_annotations=[rp.comment_color(rp.text(f"  # same as {target}"))],
    )
    return rp.build_one_line_tree_node(line, path)


def _render_lines(walk: DisplayWalk, b: Bracketed, subtree_renderer: Any) -> list[Any]:
    """The children of a Bracketed, one line each (a reference if met before)."""
    from treescope import rendering_parts as rp

    renderings = [_render_child(walk, child, subtree_renderer) for child in b.children]
    if not b.keyed:
        return renderings
    last, n = rp.fold_condition(expanded=rp.text(",")), len(renderings)
    return [
        _line(c.head, r, last, i == n - 1) for i, (c, r) in enumerate(zip(b.children, renderings))
    ]


def _line(head: str, rendering: Any, last_comma: Any, is_last: bool) -> Any:
    """``head`` then ``rendering`` as one line of a block, then a comma (``last_comma`` last)."""
    from treescope import rendering_parts as rp

    comma = last_comma if is_last else rp.siblings(",", rp.fold_condition(collapsed=rp.text(" ")))
    return rp.build_full_line_with_annotations(rp.siblings_with_annotations(head, rendering), comma)


def _render_child(walk: DisplayWalk, child: Child, subtree_renderer: Any) -> Any:
    from treescope import rendering_parts as rp

    t, path = child.tree, child.path
    if isinstance(t, Reference):
        return _reference(t, path)
    if isinstance(t, FoldedRun):
        walk.blocks.pop(t.first.value, None)  # drawn here
        return _render_block(walk, t.first, path, subtree_renderer, t)
    if isinstance(t, Leaf) and t.summarize and kind_of(t.value) is ARRAY:
        return rp.build_one_line_tree_node(array_repr(t.value, summarize=True), path)
    if isinstance(t, Bracketed) and t.kind == "sequence":
        # a plain list of sub-modules: drawn here (not by treescope) to fold its runs
        return rp.build_foldable_tree_node_from_children(
            prefix=t.opening,
            children=[_render_child(walk, c, subtree_renderer) for c in t.children],
            suffix=t.closing,
            comma_separated=True,
            force_trailing_comma=t.trailing_comma,
            path=path,
            expand_state=rp.ExpandState.EXPANDED if t.has_run else rp.ExpandState.WEAKLY_COLLAPSED,
        )
    return subtree_renderer(t.value, path=path)


def _render_block(
    walk: DisplayWalk,
    b: Bracketed,
    path: str | None,
    subtree_renderer: Any,
    run: FoldedRun | None = None,
) -> Any:
    """A node or Variable as ``Type(`` counts, children, ``)``; in a ``run``, ``N x Type(...)``."""
    from treescope import rendering_parts as rp

    children = _render_lines(walk, b, subtree_renderer)
    open_, close = ("(", ")") if b.keyed else ("([", "])")
    prefix = rp.siblings(
        rp.roundtrip_condition(roundtrip=rp.text("<")),
        f"{run.length} x " if run is not None else "",
        rp.maybe_qualified_type_name(type(b.value)),
        open_,
    )
    suffix = rp.siblings(close, rp.roundtrip_condition(roundtrip=rp.text(">")))
    if run is None:
        return rp.build_foldable_tree_node_from_children(
            prefix=prefix,
            children=children,
            suffix=suffix,
            comma_separated=not b.keyed,
            path=path,
            first_line_annotation=rp.comment_color(rp.text(f" # {b.comment}"))
            if b.comment
            else None,
            # a folded run inside: expanded, so that its counts show
            expand_state=rp.ExpandState.EXPANDED if b.has_run else rp.ExpandState.WEAKLY_COLLAPSED,
        )
    # A folded run starts collapsed, `N x Type(...),  # counts`; expanded, it shows
    # its first member, the counts after its closing line.
    lines = [rp.fold_condition(expanded=rp.build_full_line_with_annotations(c)) for c in children]
    node = rp.build_foldable_tree_node_from_children(
        prefix=prefix,
        children=[*lines, rp.fold_condition(collapsed=rp.text("..."))],
        suffix=suffix,
        path=path,
        expand_state=rp.ExpandState.COLLAPSED,
    )
    return rp.siblings_with_annotations(
        node, extra_annotations=[rp.comment_color(rp.text(f"  # {run.comment}"))]
    )


def node_treescope_repr(x: Any, path: str | None, subtree_renderer: Any) -> Any:
    """Renders an Object or Variable for treescope (the body of their ``__treescope_repr__``):
    its Bracketed where first met in the rendering, else a reference to there."""
    with _walk() as (walk, _):
        if x not in walk.seen:  # a rendering starts here
            walk.tree(x, path)
        block = walk.blocks.pop(x, None)  # x's Bracketed where it is first met, once
        if block is None:
            return _reference(Reference(type(x).__name__, walk.seen[x]), path)
        return _render_block(walk, block, path, subtree_renderer)


def state_treescope_repr(state: State, path: str | None, subtree_renderer: Any) -> Any:
    """Renders a State for treescope as ``State({key: value, ...})``."""
    from treescope import repr_lib

    with _walk() as (walk, starts):
        if starts:
            walk.tree(state, path)

        def render(value: Any, path: str | None = None) -> Any:
            if is_node_or_variable(value) and value in walk.seen and value not in walk.blocks:
                return _reference(Reference(type(value).__name__, walk.seen[value]), path)
            return subtree_renderer(value, path=path)

        return repr_lib.render_dictionary_wrapper(
            object_type=type(state),
            wrapped_dict=dict(state.items()),
            path=path,
            subtree_renderer=render,
            roundtrippable=False,
        )


def graphdef_treescope_repr(graphdef: GraphDef, path: str | None, subtree_renderer: Any) -> Any:
    """Renders a GraphDef for treescope: the tree of the plain-text ``repr``, foldable."""
    from treescope import rendering_parts as rp

    def render(d: Definition, path: str | None) -> Any:
        if d.children is None:
            return rp.build_one_line_tree_node(d.text, path)
        n = len(d.children)
        lines = [
            _line(head, render(child, None), rp.empty_part(), i == n - 1)
            for i, (head, child) in enumerate(d.children)
        ]
        return rp.build_foldable_tree_node_from_children(
            prefix=rp.siblings(d.text, ",", rp.fold_condition(collapsed=rp.text(" "))),
            children=lines,
            suffix=")",
            path=path,
        )

    return render(definition_tree(graphdef), path)


def to_html(obj: Any) -> str:
    """The treescope HTML document of ``obj`` (what a notebook cell shows).

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> "treescope" in to_html(nnx.Param(jnp.ones(2)))
      True
    """
    import treescope

    return treescope.render_to_html(obj, ignore_exceptions=True, compressed=True)
