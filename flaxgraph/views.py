"""Views: a copy of a model with other modes, sharing its Variables (unlike the in-place
``model.eval()``). ``view`` calls each selected module's ``set_view`` (keywords defaulting
to ``None``, documented under ``Args:``, which ``view_info`` lists).

Source: Flax NNX 0.12 ``nnx.view``, ``nnx.view_info``, ``nnx.with_attributes``."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from flaxgraph.filterlib import Filter, to_predicate
from flaxgraph.graphlib.descendants import iter_graph
from flaxgraph.modes import resolve_graph
from flaxgraph.module_class import Module, has_attribute
from flaxgraph.node_copy import check_tree, copy_nodes
from flaxgraph.typing import PathParts

A = TypeVar("A")


def _accepted(fn: Callable[..., Any], kwargs: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The items of ``kwargs`` that ``fn`` accepts by keyword, and whether it takes ``**``."""
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return dict(kwargs), True
    names = {
        p.name
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    return {k: v for k, v in kwargs.items() if k in names}, False


def view(
    node: A,
    /,
    *,
    only: Filter = ...,
    raise_if_not_found: bool = True,
    graph: bool | None = None,
    **kwargs: Any,
) -> A:
    """Returns a copy of ``node`` whose modules got ``set_view(**kwargs)``; Variables are shared.

    Args:
      node: a module (or any value holding modules).
      only: a filter selecting the modules to configure (default: all).
      raise_if_not_found: raise if some keyword is accepted by no selected ``set_view``.
      graph: ``False`` for tree mode (``None``: ``nnx.set_graph_mode``'s default).
      **kwargs: the settings; each ``set_view`` receives those its signature accepts (all
        if it takes ``**kwargs``, and then returns the unused ones as a dict).

    Returns:
      The copy: graph nodes copied, Variables and arrays shared.

    Raises:
      ValueError: ``raise_if_not_found`` and a keyword was used by no module; the message
        lists the modules that have ``set_view`` and what they accept.
      SharedReferenceError (``ValueError``): tree mode and a shared Variable.

    Example::

      >>> import flaxgraph as nnx
      >>> model = nnx.Sequential(nnx.Linear(2, 2, rngs=nnx.Rngs(0)), nnx.Dropout(0.1))
      >>> evaluated = nnx.view(model, deterministic=True)
      >>> evaluated.layers[1].deterministic, model.layers[1].deterministic
      (True, False)
      >>> evaluated.layers[0].kernel is model.layers[0].kernel
      True
      >>> nnx.view(model, only=nnx.Linear, deterministic=True)
      Traceback (most recent call last):
        ...
      ValueError: Unused keys found in nnx.view: ['deterministic']: no selected module's ...
    """
    only_p = to_predicate(only)
    used: set[str] = set()
    accepting: list[str] = []

    def configure(path: PathParts, copy: Any) -> Any:
        set_view = getattr(copy, "set_view", None) if isinstance(copy, Module) else None
        if set_view is None or not callable(set_view) or not only_p(path, copy):
            return copy
        given, takes_all = _accepted(set_view, kwargs)
        accepting.append(f"{type(copy).__name__}{inspect.signature(set_view)}")
        unused = set_view(**given)
        if takes_all and isinstance(unused, dict):
            used.update(k for k in given if k not in unused)
        else:
            used.update(given)
        return copy

    result = copy_nodes(node, configure, graph=graph)
    missing = sorted(set(kwargs) - used)
    if raise_if_not_found and missing:
        have = "\n".join(f"  {a}" for a in dict.fromkeys(accepting)) or "  (none)"
        raise ValueError(
            f"Unused keys found in nnx.view: {missing}: no selected module's set_view "
            f"accepts them (only={only!r}). The selected modules with a set_view:\n{have}\nFix: check the spelling, "
            "widen `only`, or pass raise_if_not_found=False."
        )
    return result


def with_attributes(
    node: A,
    /,
    *,
    only: Filter = ...,
    raise_if_not_found: bool = True,
    graph: bool | None = None,
    **attributes: Any,
) -> A:
    """Returns a copy of ``node`` with ``attributes`` set on every selected module that has them.

    Args:
      node: a module (or any value holding modules); unchanged, the copy shares its
        Variables.
      only: a filter selecting the modules (default: all).
      raise_if_not_found: raise if some attribute exists on no selected module.
      graph: ``False`` for tree mode (``None``: ``nnx.set_graph_mode``'s default).
      **attributes: ``name=value`` to set.

    Raises:
      ValueError: ``raise_if_not_found`` and an attribute was found on no selected module.
      SharedReferenceError (``ValueError``): tree mode and a shared Variable.

    Example::

      >>> import flaxgraph as nnx
      >>> drop = nnx.Dropout(0.5)
      >>> new = nnx.with_attributes(drop, deterministic=True)
      >>> new.deterministic, drop.deterministic
      (True, False)
    """
    only_p = to_predicate(only)
    found: set[str] = set()

    def assign(path: PathParts, copy: Any) -> Any:
        if isinstance(copy, Module) and only_p(path, copy):
            for name, value in attributes.items():
                if has_attribute(copy, name):
                    setattr(copy, name, value)
                    found.add(name)
        return copy

    result = copy_nodes(node, assign, graph=graph)
    missing = sorted(set(attributes) - found)
    if raise_if_not_found and missing:
        raise ValueError(
            "nnx.with_attributes: Could not find at least one instance of the following "
            f"attributes: {missing} (only={only!r}).\nFix: check the spelling, widen `only`, or pass "
            "raise_if_not_found=False."
        )
    return result


def view_info(node: Any, /, *, only: Filter = ..., graph: bool | None = None) -> str:
    """Describes the ``view`` arguments of every module class in ``node``.

    Returns one block per module class with a ``set_view`` (sorted by name): each argument
    as ``name: annotation = default`` with its ``Args:`` description (a ``set_view`` without
    a docstring shows its signature); ``''`` if none. Arguments ``only`` and ``graph`` as
    ``view``; raises ``SharedReferenceError`` as ``view``.

    Example::

      >>> import flaxgraph as nnx
      >>> print(nnx.view_info(nnx.Dropout(0.5)))
      Dropout:
        deterministic: bool | None = None
          if True, disables dropout masking.
    """
    check_tree(node, resolve_graph(graph))
    only_p = to_predicate(only)
    classes: dict[str, Callable[..., Any]] = {}
    for path, value in iter_graph(node):
        if isinstance(value, Module) and only_p(path, value):
            set_view = getattr(type(value), "set_view", None)
            if callable(set_view):
                classes.setdefault(type(value).__qualname__, set_view)
    return "\n".join(_describe(name, fn) for name, fn in sorted(classes.items()))


def _annotation(a: Any) -> str:
    return a if isinstance(a, str) else inspect.formatannotation(a)


def _param(p: inspect.Parameter) -> str:
    stars: dict[Any, str] = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}
    text = stars.get(p.kind, "") + p.name
    if p.annotation is not p.empty:
        text += f": {_annotation(p.annotation)}"
    if p.default is not p.empty:
        text += f" = {p.default!r}" if p.annotation is not p.empty else f"={p.default!r}"
    return text


def _describe(name: str, fn: Callable[..., Any]) -> str:
    doc = inspect.getdoc(fn)
    signature = inspect.signature(fn)
    if not doc:
        params = ", ".join(_param(p) for p in signature.parameters.values())
        ret = signature.return_annotation
        ret_text = "" if ret is signature.empty else f" -> {_annotation(ret)}"
        return f"{name}:\n  set_view({params}){ret_text}"
    described = _args_section(doc)
    lines = [f"{name}:"]
    for p in signature.parameters.values():
        if p.name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        lines.append(f"  {_param(p)}")
        lines.extend(f"    {line}" for line in described.get(p.name, []))
    return "\n".join(lines)


def _args_section(doc: str) -> dict[str, list[str]]:
    """``{argument: description lines}`` from a Google-style docstring's ``Args:``."""
    out: dict[str, list[str]] = {}
    lines = doc.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Args:")
    except StopIteration:
        return out
    indent = None
    current: list[str] | None = None
    for line in lines[start + 1 :]:
        if not line.strip():
            continue
        width = len(line) - len(line.lstrip())
        if indent is None:
            indent = width
        if width < indent:
            break  # the next section
        if width == indent:
            arg, _, text = line.strip().partition(":")
            current = out.setdefault(arg.strip().split(" ")[0], [])
            if text.strip():
                current.append(text.strip())
        elif current is not None:
            current.append(line.strip())
    return out
