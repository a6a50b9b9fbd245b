"""Where an error happened: the path of the module that raised, from the arguments.

A layer's shape error names the layer (``error.module``); inside a transform the
user wants to know *which* layer of their model it was. ``locate_module`` finds
the module's path from the transformed function's arguments and notes it on the
exception (``The module is at args[0].layers[1].``).

Source: flaxgraph's error conventions (``docs/design.md``, "Errors": what, where,
fix).
"""

from __future__ import annotations

from flaxgraph.transforms.aliasing import NamedRoots
from flaxgraph.typing import PathParts

_LOCATED = "_flaxgraph_location_note"


def locate_module(error: BaseException, args: object, kwargs: object) -> None:
    """If ``error`` names a module (an ``error.module`` attribute, as layers' shape
    errors have), notes the module's path from the transformed function's arguments
    on the exception. Nested transforms keep the outermost path: the one the user
    wrote."""
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
