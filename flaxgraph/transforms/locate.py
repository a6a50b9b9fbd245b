"""Where an error happened: the path of the module that raised, from the arguments.

See ``docs/design.md``, "Errors".
"""

from __future__ import annotations

from flaxgraph.transforms.aliasing import NamedRoots
from flaxgraph.typing import PathParts

_LOCATED = "_flaxgraph_location_note"


def locate_module(error: BaseException, args: object, kwargs: object) -> None:
    """Notes on ``error`` the path of ``error.module`` from the arguments (the outermost one)."""
    module = getattr(error, "module", None)
    if module is None:
        return
    path = _find_path(module, (args, kwargs))
    if path is None:
        return
    note = f"The module is at {NamedRoots(('args', 'kwargs'), (args, kwargs)).where(path)}."
    previous = getattr(error, _LOCATED, None)
    notes = getattr(error, "__notes__", [])
    if previous is not None and previous in notes:
        notes.remove(previous)
    error.add_note(note)
    setattr(error, _LOCATED, note)


def _find_path(target: object, root: object) -> PathParts | None:
    from flaxgraph.graphlib.descendants import iter_graph

    for path, value in iter_graph(root):
        if value is target:
            return path
    return None
