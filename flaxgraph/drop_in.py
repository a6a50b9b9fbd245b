"""Run unmodified Flax NNX code on flaxgraph: bind ``flax.nnx`` to flaxgraph for a whole process.

Third-party libraries (and their tests) write ``from flax import nnx``; their users cannot edit
that line. :func:`install_as_flax_nnx` adds a finder to Python's import system (``sys.meta_path``,
PEP 451) that answers for ``flax.nnx`` and every ``flax.nnx.<sub>``, so that each of

.. code-block:: python

    from flax import nnx                  # nnx is flaxgraph
    import flax.nnx as nnx                # nnx is flaxgraph
    from flax.nnx import Linear           # flaxgraph.Linear
    import flax.nnx.nn.linear             # the module flaxgraph.nn.linear
    from flax.nnx.statelib import State   # flaxgraph.statelib.State
    import flax; flax.nnx.Module          # flaxgraph.Module

gives flaxgraph's object of the same dotted name, while every other piece of Flax (``flax.linen``,
``flax.core``, ``flax.struct``, ``flax.traverse_util``, ``flax.training``…) stays the real Flax.
Nothing on disk is edited and no module of the real ``flax/nnx`` directory is ever loaded.

It is the counterpart of ``sklearnex.patch_sklearn()`` for scikit-learn; the same binding is
available without touching the program as ``python -m flaxgraph.run script.py`` (see
:mod:`flaxgraph.run`) and for a test suite as ``pytest -p flaxgraph.pytest_plugin
--flax-nnx=flaxgraph`` (see :mod:`flaxgraph.pytest_plugin`).
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

from flaxgraph.missing_names import FLAX_ONLY_NAMES

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

    ``flax.nnx`` is the module ``flaxgraph``; ``flax.nnx.a.b`` is the module of that name inside
    flaxgraph (``flaxgraph.a.b``), or, where flaxgraph keeps a module under another file name
    as Flax does (``flax.nnx.object`` is
    ``flaxgraph.pytreelib``), the module-valued attribute of that name. Anything else raises
    ``ModuleNotFoundError`` naming the ``flax.nnx…`` module: the real Flax NNX module is never
    loaded in its place. ``flax`` itself is found by the other finders and loaded as usual; it
    only gains the ``nnx`` attribute.
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
    if fullname == SOURCE:
        return importlib.import_module(TARGET)
    parent_name, _, child = fullname.rpartition(".")
    parent = sys.modules.get(parent_name) or importlib.import_module(parent_name)
    target = f"{parent.__name__}.{child}"
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as error:
        if error.name != target:
            raise
    value = getattr(parent, child, None)
    if isinstance(value, types.ModuleType):
        return value
    known = FLAX_ONLY_NAMES.get(child) if parent_name == SOURCE else None
    why = ""
    if known is not None:
        why = f" {known.flax_versions} has it ({known.what}); flaxgraph does not ({known.where})."
    raise ModuleNotFoundError(
        f"No module named {fullname!r}: flax.nnx is bound to flaxgraph "
        f"(flaxgraph.install_as_flax_nnx), which has no module {target!r}.{why}",
        name=fullname,
    )


def is_installed() -> bool:
    """Whether :func:`install_as_flax_nnx` bound ``flax.nnx`` to flaxgraph in this process.

    Returns:
      ``True`` once the binding is in ``sys.meta_path``.
    """
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

    Call it before the library that uses Flax NNX is imported (first thing in the program);
    from then on ``from flax import nnx`` anywhere gives ``flaxgraph``, ``flax.nnx.a.b`` the
    module ``flaxgraph.a.b``, and the rest of ``flax`` (Linen, ``flax.struct``,
    ``flax.traverse_util``, ``flax.training``…) stays the real Flax, which must be installed.
    Calling it again does nothing. Flax NNX 0.12.8 names flaxgraph does not provide raise
    ``AttributeError`` (or ``ModuleNotFoundError`` for a module) naming the name and where
    ``guides/from_flax.md`` lists it.

    Example (a script; ``tunix`` stands for any library written against ``flax.nnx``):

    .. code-block:: python

        import flaxgraph

        flaxgraph.install_as_flax_nnx()

        from flax import nnx   # flaxgraph
        import tunix           # its ``from flax import nnx`` is flaxgraph too

        assert nnx is flaxgraph

    The same without editing the script: ``python -m flaxgraph.run script.py args...``.

    Raises:
      RuntimeError: the real ``flax.nnx`` (or one of its submodules, named in the message) was
        already imported, so objects of both libraries would mix. Nothing is changed then.
      ModuleNotFoundError: Flax is not installed (``pip install flax==0.12.8``); nothing is
        changed.

    The mechanism is Python's import system: a meta-path finder (PEP 451, PEP 562 for the
    ``flax.nnx`` attribute of the package).
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
