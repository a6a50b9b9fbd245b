"""Flax NNX's ``reprlib``: a class describes its ``repr`` as a stream of parts.

A :class:`Representable` subclass's ``__nnx_repr__`` yields one :class:`Object`, then
one :class:`Attr` per attribute; ``repr`` renders them plain, ``str`` coloured. Nesting
stops at the Flax configuration ``flax_max_repr_depth``. flaxgraph's own classes render
through ``flaxgraph.visualization``; this is the protocol for code written against
``flax.nnx.reprlib``::

  >>> from flaxgraph import reprlib
  >>> class Point(reprlib.Representable):
  ...   def __init__(self, x, y):
  ...     self.x, self.y = x, y
  ...   def __nnx_repr__(self):
  ...     yield reprlib.Object(type=type(self))
  ...     yield reprlib.Attr('x', self.x)
  ...     yield reprlib.Attr('y', [self.y, 'b'])
  >>> print(repr(Point(1, 2.5)))
  Point(
    x=1,
    y=[2.5, 'b']
  )

Source: Flax NNX 0.12.8 ``flax.nnx.reprlib``.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from flaxgraph.config import FlaxConfigFlag

__all__ = [
    "Attr",
    "COLOR",
    "Color",
    "MappingReprMixin",
    "NO_COLOR",
    "Object",
    "PrettyMapping",
    "PrettySequence",
    "REPR_CONTEXT",
    "ReprContext",
    "Representable",
    "SequenceReprMixin",
    "colorized",
    "get_repr",
    "ipython_running",
    "supports_color",
    "MAX_REPR_DEPTH",
]

MAX_REPR_DEPTH: FlaxConfigFlag[int | None] = FlaxConfigFlag(
    "max_repr_depth", None, "flax_max_repr_depth"
)
"""How deep :func:`get_repr` nests before writing ``...`` (``None``: no limit)."""


def ipython_running() -> bool:
    """Whether IPython is imported and has a running shell (never imports IPython)."""
    ipython = sys.modules.get("IPython")
    return ipython is not None and ipython.get_ipython() is not None


def supports_color() -> bool:
    """Whether output may be coloured: a TTY on an ANSI platform, or a running IPython."""
    in_ipython = ipython_running()
    ansi_platform = sys.platform != "win32" or "ANSICON" in os.environ
    tty = hasattr(sys.stdout, "isatty") and sys.stdout.isatty()
    return (ansi_platform and tty) or in_ipython


class Color(NamedTuple):
    """The ANSI escape that starts each kind of token (``END`` resets)."""

    TYPE: str
    ATTRIBUTE: str
    SEP: str
    PAREN: str
    COMMENT: str
    INT: str
    STRING: str
    FLOAT: str
    BOOL: str
    NONE: str
    END: str


NO_COLOR = Color(*([""] * len(Color._fields)))
"""No colours: every token as plain text (``repr`` uses it)."""


def _rgb(r: int, g: int, b: int) -> str:
    return f"\x1b[38;2;{r};{g};{b}m"


COLOR = (
    Color(
        TYPE=_rgb(79, 201, 177),
        ATTRIBUTE=_rgb(156, 220, 254),
        SEP=_rgb(212, 212, 212),
        PAREN=_rgb(255, 213, 3),
        COMMENT=_rgb(105, 105, 105),
        INT=_rgb(182, 207, 169),
        STRING=_rgb(207, 144, 120),
        FLOAT=_rgb(182, 207, 169),
        BOOL=_rgb(86, 156, 214),
        NONE=_rgb(86, 156, 214),
        END="\x1b[0m",
    )
    if supports_color()
    else NO_COLOR
)
"""The colours ``str`` uses: a dark-theme palette where :func:`supports_color` at import,
else :data:`NO_COLOR`."""


@dataclasses.dataclass
class ReprContext(threading.local):
    """Per-thread rendering state: the colours in use and the current nesting depth."""

    current_color: Color = COLOR
    depth: int = 0


REPR_CONTEXT = ReprContext()
"""This thread's :class:`ReprContext`."""


@dataclasses.dataclass
class Object:
    """The header :meth:`Representable.__nnx_repr__` yields first.

    Attributes:
      type: the name before the brackets (a class gives its ``__name__``).
      start, end: the brackets.
      kv_sep: between an attribute's key and value.
      indent: the indentation of each attribute line.
      empty_repr: between the brackets when there are no attributes.
      comment: after the opening bracket when attributes follow on new lines.
      same_line: all attributes on one line, separated by ``', '``.
    """

    type: str | type
    start: str = "("
    end: str = ")"
    kv_sep: str = "="
    indent: str = "  "
    empty_repr: str = ""
    comment: str = ""
    same_line: bool = False

    @property
    def elem_sep(self) -> str:
        """The separator between attributes: ``', '`` on one line, else ``',\\n'``."""
        return ", " if self.same_line else ",\n"


@dataclasses.dataclass
class Attr:
    """One attribute part: ``key`` (coloured unless ``use_raw_key``), ``value`` (through
    :func:`colorized` unless ``use_raw_value``), ``start``/``end`` around ``key=value``."""

    key: str
    value: Any
    start: str = ""
    end: str = ""
    use_raw_value: bool = False
    use_raw_key: bool = False


class Representable:
    """Base of classes whose ``repr`` (plain) and ``str`` (coloured) come from ``__nnx_repr__``."""

    __slots__ = ()

    def __nnx_repr__(self) -> Iterator[Object | Attr]:
        """Yields one :class:`Object`, then :class:`Attr` parts; raises ``NotImplementedError`` here."""
        raise NotImplementedError(f"{type(self).__name__} does not define __nnx_repr__")

    def __repr__(self) -> str:
        saved = REPR_CONTEXT.current_color
        REPR_CONTEXT.current_color = NO_COLOR
        try:
            return get_repr(self)
        finally:
            REPR_CONTEXT.current_color = saved

    def __str__(self) -> str:
        return get_repr(self)


def _bracketed(c: Color, open_: str, items: list[str], close: str) -> str:
    return f"{c.PAREN}{open_}{c.END}{', '.join(items)}{c.PAREN}{close}{c.END}"


def colorized(x: Any, /) -> str:
    """The text of one value in the current colours (containers element by element,
    :class:`Representable` values by :func:`get_repr`, others by ``repr``)."""
    c = REPR_CONTEXT.current_color
    if isinstance(x, list):
        return _bracketed(c, "[", [colorized(v) for v in x], "]")
    if isinstance(x, tuple):
        items = [colorized(v) for v in x]
        return _bracketed(c, "(", [f"{items[0]},"] if len(items) == 1 else items, ")")
    if isinstance(x, dict):
        return _bracketed(
            c, "{", [f"{c.STRING}{k!r}{c.END}: {colorized(v)}" for k, v in x.items()], "}"
        )
    if isinstance(x, set):
        return _bracketed(c, "{", [colorized(v) for v in x], "}")
    if isinstance(x, type):
        return f"{c.TYPE}{x.__name__}{c.END}"
    if isinstance(x, bool):
        return f"{c.BOOL}{x}{c.END}"
    if isinstance(x, int):
        return f"{c.INT}{x}{c.END}"
    if isinstance(x, str):
        return f"{c.STRING}{x!r}{c.END}"
    if isinstance(x, float):
        return f"{c.FLOAT}{x}{c.END}"
    if x is None:
        return f"{c.NONE}None{c.END}"
    if isinstance(x, Representable):
        return get_repr(x)
    return repr(x)


def _attr_text(attr: Any, header: Object, c: Color) -> str:
    if not isinstance(attr, Attr):
        raise TypeError(
            f"__nnx_repr__ must yield reprlib.Attr after its reprlib.Object, got "
            f"{type(attr).__name__}"
        )
    value = attr.value if attr.use_raw_value else colorized(attr.value)
    value = value.replace("\n", "\n" + header.indent)
    key = attr.key if attr.use_raw_key else f"{c.ATTRIBUTE}{attr.key}{c.END}"
    indent = "" if header.same_line else header.indent
    return f"{indent}{attr.start}{key}{c.SEP}{header.kv_sep}{c.END}{value}{attr.end}"


def get_repr(obj: Representable) -> str:
    """Renders ``obj`` from its ``__nnx_repr__`` in the current colours.

    Past :data:`MAX_REPR_DEPTH` levels the attributes are ``...``.

    Raises:
      TypeError: ``obj`` is not a ``Representable``, or its ``__nnx_repr__`` does not yield
        an :class:`Object` first and :class:`Attr` after.
    """
    if not isinstance(obj, Representable):
        raise TypeError(f"Object {obj!r} is not representable (not a reprlib.Representable)")
    REPR_CONTEXT.depth += 1
    try:
        c = REPR_CONTEXT.current_color
        parts = obj.__nnx_repr__()
        header = next(parts)
        if not isinstance(header, Object):
            raise TypeError(
                f"__nnx_repr__ must yield a reprlib.Object first, got {type(header).__name__}"
            )
        limit = MAX_REPR_DEPTH.get()
        too_deep = limit is not None and REPR_CONTEXT.depth > limit
        body = "..." if too_deep else header.elem_sep.join(_attr_text(a, header, c) for a in parts)
        comment = ""
        if body and not (header.same_line or too_deep):
            body = f"\n{body}\n"
            comment = f"{c.COMMENT}{header.comment}{c.END}"
        elif not body:
            body = header.empty_repr
        name = header.type if isinstance(header.type, str) else header.type.__name__
        name = f"{c.TYPE}{name}{c.END}" if name else ""
        start = f"{c.PAREN}{header.start}{c.END}" if header.start else ""
        end = f"{c.PAREN}{header.end}{c.END}" if header.end else ""
        return f"{name}{start}{comment}{body}{end}"
    finally:
        REPR_CONTEXT.depth -= 1


class MappingReprMixin(Representable):
    """Mixin for a mapping class: ``Type({key: value, ...})`` from ``self.items()``."""

    __slots__ = ()

    def __nnx_repr__(self) -> Iterator[Object | Attr]:
        yield Object(type=type(self), kv_sep=": ", start="({", end="})")
        for key, value in self.items():  # type: ignore[attr-defined]
            yield Attr(colorized(key), value, use_raw_key=True)


@dataclasses.dataclass(repr=False)
class PrettyMapping(Representable):
    """Renders ``mapping`` as ``PrettyMapping({key: value, ...})``."""

    mapping: Mapping[Any, Any]

    def __nnx_repr__(self) -> Iterator[Object | Attr]:
        yield Object(type=type(self), kv_sep=": ", start="({", end="})")
        for key, value in self.mapping.items():
            yield Attr(colorized(key), value, use_raw_key=True)


class SequenceReprMixin(Representable):
    """Mixin for a sequence class: ``Type([value, ...])`` from iterating ``self``."""

    __slots__ = ()

    def __nnx_repr__(self) -> Iterator[Object | Attr]:
        yield Object(type=type(self), kv_sep="", start="([", end="])")
        for value in self:  # type: ignore[attr-defined]
            yield Attr("", value, use_raw_key=True)


@dataclasses.dataclass(repr=False)
class PrettySequence(Representable):
    """Renders ``sequence`` as ``PrettySequence([value, ...])``."""

    sequence: Sequence[Any]

    def __nnx_repr__(self) -> Iterator[Object | Attr]:
        yield Object(type=type(self), kv_sep="", start="([", end="])")
        for value in self.sequence:
            yield Attr("", value, use_raw_key=True)
