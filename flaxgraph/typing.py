"""Type aliases shared by the whole package (the names of Flax's ``flax.typing``).

* ``Key``: one step of a path into a graph or a State (an attribute name, a list
  index, a dict key).
* ``PathParts``: a path, the keys from the root to a value, e.g.
  ``('layers', 0, 'kernel')``.

Source: Flax's ``flax.typing`` (``Key``, ``PathParts``).
"""

from __future__ import annotations

from collections.abc import Hashable

Key = Hashable
PathParts = tuple[Key, ...]
