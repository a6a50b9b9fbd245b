"""Type aliases shared by the whole package (the names of Flax's ``flax.typing``).

* ``Key``: one step of a path into a graph or a State (an attribute name, a list
  index, a dict key).
* ``PathParts``: a path, the keys from the root to a value, e.g.
  ``('layers', 0, 'kernel')``.
* ``MISSING`` (of type ``Missing``): the sentinel for "not given" and "not there".

Source: Flax's ``flax.typing`` (``Key``, ``PathParts``, ``Missing``, ``MISSING``).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Final

Key = Hashable
PathParts = tuple[Key, ...]


class Missing:
    """The type of ``MISSING``, the one "nothing given / nothing there" sentinel."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"

    def __reduce__(self) -> str:
        return "MISSING"  # pickles as the one instance


MISSING: Final[Any] = Missing()
"""The package's one sentinel: the default of a parameter that was not given, and what
``GraphNodeImpl.get_child`` returns for a key a node lacks. Test it with ``is``. Typed
``Any`` so that it can stand as the default of a parameter of any type."""
