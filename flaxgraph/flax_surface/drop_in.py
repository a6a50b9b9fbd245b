"""Run unmodified Flax NNX code on flaxgraph: bind ``flax.nnx`` to flaxgraph for a whole process.

:func:`install_as_flax_nnx` adds a ``sys.meta_path`` finder (PEP 451) that answers for
``flax.nnx`` and every ``flax.nnx.<sub>`` with the flaxgraph module the module map
(``table.py``) gives; the rest of Flax (Linen, ``flax.struct``…) stays the real Flax, and
no module of the real ``flax/nnx`` is loaded. The same binding without editing the
program: ``python -m flaxgraph.run`` and the pytest plugin; see ``guides/tunix.md``.

Source: Python's import system (PEP 451 meta-path finders, PEP 562 module
``__getattr__``); the module map of Flax NNX 0.12.8.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

from flaxgraph.flax_surface.missing_names import FLAX_ONLY_NAMES
from flaxgraph.flax_surface.table import MODULE_MAP, flaxgraph_path

__all__ = ["FlaxNnxFinder", "is_installed", "install_as_flax_nnx"]

SOURCE = "flax.nnx"
TARGET = "flaxgraph"


class _BoundModuleLoader(importlib.abc.Loader):
    """Hands out an already-imported flaxgraph module under its ``flax.nnx…`` name."""

    def __init__(self, module: types.ModuleType) -> None:
        self._module = module
        self._own_spec = getattr(module, "__spec__", None)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return self._module

    def exec_module(self, module: types.ModuleType) -> None:
        # The import system set ``__spec__`` to the ``flax.nnx…`` spec; the module keeps
        # working as itself (relative imports, reload, pickling) with its own spec back.
        module.__spec__ = self._own_spec


class _FlaxPackageLoader(importlib.abc.Loader):
    """Runs the real ``flax/__init__.py``, then gives the package a lazy ``nnx`` attribute."""

    def __init__(self, real: importlib.abc.Loader) -> None:
        self._real = real

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self._real.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self._real.exec_module(module)
        _add_lazy_nnx_attribute(module)

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package, get_filename…
        return getattr(self._real, name)


def _add_lazy_nnx_attribute(flax: types.ModuleType) -> None:
    """``flax.nnx`` on the package imports the bound module on first use (PEP 562)."""
    previous: Callable[[str], Any] | None = flax.__dict__.get("__getattr__")
    if getattr(previous, "_binds_flax_nnx", False):
        return

    def __getattr__(name: str) -> Any:
        if name == "nnx":
            return importlib.import_module(SOURCE)
        if previous is not None:
            return previous(name)
        raise AttributeError(f"module 'flax' has no attribute {name!r}")

    __getattr__._binds_flax_nnx = True  # type: ignore[attr-defined]
    flax.__getattr__ = __getattr__  # type: ignore[method-assign]


class FlaxNnxFinder(importlib.abc.MetaPathFinder):
    """The ``sys.meta_path`` finder that resolves ``flax.nnx…`` to flaxgraph's modules.

    ``flax.nnx.a.b`` is the module the module map (``table.py``) gives for it
    (``flax.nnx.object`` is ``flaxgraph.pytreelib``); a module Flax NNX 0.12.8 does not have
    raises ``ModuleNotFoundError``. ``flax`` itself loads as usual and gains
    the ``nnx`` attribute.
    """

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == "flax":
            return self._flax_package_spec(path, target)
        if fullname != SOURCE and not fullname.startswith(SOURCE + "."):
            return None
        module = _bound_module(fullname)
        spec = importlib.machinery.ModuleSpec(
            fullname, _BoundModuleLoader(module), is_package=hasattr(module, "__path__")
        )
        if hasattr(module, "__path__"):
            spec.submodule_search_locations = list(module.__path__)
        return spec

    def _flax_package_spec(
        self, path: Sequence[str] | None, target: types.ModuleType | None
    ) -> importlib.machinery.ModuleSpec | None:
        for finder in sys.meta_path:
            if finder is self or isinstance(finder, FlaxNnxFinder):
                continue
            find_spec = getattr(finder, "find_spec", None)
            spec = find_spec("flax", path, target) if find_spec is not None else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _FlaxPackageLoader(spec.loader)
                return spec
        return None


def _bound_module(fullname: str) -> types.ModuleType:
    """flaxgraph's module for ``fullname`` (``flax.nnx`` or ``flax.nnx.…``), imported."""
    row = MODULE_MAP.get(fullname)
    if row is not None:
        return importlib.import_module(row.module)
    parent_name, _, child = fullname.rpartition(".")
    known = FLAX_ONLY_NAMES.get(child) if parent_name == SOURCE else None
    why = ""
    if known is not None:
        why = f" {known.flax_versions} has it ({known.what}); flaxgraph does not ({known.where})."
    raise ModuleNotFoundError(
        f"No module named {fullname!r}: flax.nnx is bound to flaxgraph "
        f"(flaxgraph.install_as_flax_nnx), whose module map (flaxgraph/flax_surface/table.py) "
        f"has no {flaxgraph_path(fullname)!r}: Flax NNX 0.12.8 has no such module.{why}",
        name=fullname,
    )


def is_installed() -> bool:
    """Whether :func:`install_as_flax_nnx` bound ``flax.nnx`` in this process."""
    return any(isinstance(finder, FlaxNnxFinder) for finder in sys.meta_path)


def _real_flax_nnx_modules() -> list[str]:
    """The ``flax.nnx…`` modules already imported that are not flaxgraph's."""
    return sorted(
        name
        for name, module in sys.modules.items()
        if (name == SOURCE or name.startswith(SOURCE + "."))
        and not getattr(module, "__name__", "").startswith(TARGET)
    )


def install_as_flax_nnx() -> None:
    """Bind ``flax.nnx`` and every ``flax.nnx.<submodule>`` to flaxgraph for this process.

    Call it first thing, before the library that uses Flax NNX is imported; calling it
    again does nothing. Flax NNX 0.12.8 names flaxgraph lacks raise ``AttributeError`` (or
    ``ModuleNotFoundError``) naming where ``guides/from_flax.md`` lists them.

    .. code-block:: python

        import flaxgraph

        flaxgraph.install_as_flax_nnx()
        from flax import nnx   # flaxgraph
        import tunix           # its ``from flax import nnx`` is flaxgraph too

    Raises:
      RuntimeError: the real ``flax.nnx`` (or a submodule, named) was already imported;
        nothing is changed.
      ModuleNotFoundError: Flax is not installed; nothing is changed.
    """
    if is_installed():
        return
    already = _real_flax_nnx_modules()
    if already:
        raise RuntimeError(
            f"{already[0]} (the real Flax NNX) was imported before "
            "flaxgraph.install_as_flax_nnx(), so its objects would mix with flaxgraph's. Call "
            "install_as_flax_nnx() first thing in the program, before the library that imports "
            "flax.nnx, or run the program with `python -m flaxgraph.run script.py`."
        )
    if "flax" not in sys.modules and importlib.util.find_spec("flax") is None:
        raise ModuleNotFoundError(
            "flaxgraph.install_as_flax_nnx() binds flax.nnx inside the real flax package, and "
            "flax is not installed: pip install flax==0.12.8",
            name="flax",
        )
    meta_path, flax = list(sys.meta_path), sys.modules.get("flax")
    flax_getattr = flax.__dict__.get("__getattr__") if flax is not None else None
    try:
        sys.meta_path.insert(0, FlaxNnxFinder())
        if flax is not None:
            _add_lazy_nnx_attribute(flax)
    except BaseException:
        sys.meta_path[:] = meta_path
        if flax is not None:
            if flax_getattr is None:
                flax.__dict__.pop("__getattr__", None)
            else:
                flax.__getattr__ = flax_getattr  # type: ignore[method-assign]
        raise
