"""Flax's ``nnx.visualization`` helpers: ``render_object_constructor`` and ``in_ipython``.

Source: Flax NNX 0.12.8 ``flax.nnx.visualization``; treescope's ``rendering_parts`` API."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flaxgraph.reprlib import ipython_running

__all__ = ["in_ipython", "render_object_constructor"]


in_ipython = ipython_running()
"""Whether this process runs inside IPython (decided at import, as in Flax)."""


def render_object_constructor(
    object_type: type[Any],
    attributes: Mapping[str, Any],
    path: str | None,
    subtree_renderer: Any,
    roundtrippable: bool = False,
    color: str | None = None,
    first_line_annotation: Any = None,
) -> Any:
    """A treescope rendering of an object as a constructor call, ``Foo(bar=1, baz=2)``.

    Args:
      object_type: the object's type (its name heads the rendering).
      attributes: ``{name: value}``, each shown as ``name=<value>`` (the object's
        attribute names: treescope's paths use them).
      path: ``__treescope_repr__``'s ``path``, or ``None``.
      subtree_renderer: ``__treescope_repr__``'s ``subtree_renderer``.
      roundtrippable: whether the text evaluates back to an equal object; if not, it is
        wrapped in ``<...>`` in treescope's round-trip mode.
      color: a background color, or ``None``.
      first_line_annotation: a rendering part shown on the first line when expanded.

    Returns:
      A treescope rendering (return it from ``__treescope_repr__``).
    """
    from treescope import rendering_parts as parts  # display code; treescope is optional

    type_name = parts.maybe_qualified_type_name(object_type)
    if roundtrippable:
        prefix, suffix = parts.siblings(type_name, "("), parts.text(")")
    else:
        in_roundtrip = parts.roundtrip_condition
        prefix = parts.siblings(in_roundtrip(roundtrip=parts.text("<")), type_name, "(")
        suffix = parts.siblings(")", in_roundtrip(roundtrip=parts.text(">")))
    children = []
    last = len(attributes) - 1
    for i, (name, value) in enumerate(attributes.items()):
        child_path = None if path is None else f"{path}.{name}"
        if i < last:  # a comma always; a space too when folded
            comma = parts.siblings(",", parts.fold_condition(collapsed=parts.text(" ")))
        else:  # the last one: a comma only when unfolded
            comma = parts.fold_condition(expanded=parts.text(","))
        line = parts.siblings_with_annotations(f"{name}=", subtree_renderer(value, path=child_path))
        children.append(parts.build_full_line_with_annotations(line, comma))
    return parts.build_foldable_tree_node_from_children(
        prefix=prefix,
        children=children,
        suffix=suffix,
        path=path,
        background_color=color,
        first_line_annotation=first_line_annotation,
    )
