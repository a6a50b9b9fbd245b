"""``capture``: collect what a call sows (and taps with ``perturb``) without changing the
model (``docs/design.md``, "Capture").

Source: Flax NNX 0.12 ``nnx.capture`` (and ``Module.sow``/``Module.perturb``)."""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any, cast

from flaxgraph.config import Flag
from flaxgraph.module_class import CAPTURES, Module
from flaxgraph.rnglib.rngs import Rngs, RngStream
from flaxgraph.statelib import State
from flaxgraph.typing import PathParts
from flaxgraph.variablelib.variable import Variable, is_variable

METHOD_OUTPUTS: Flag[Any] = Flag("capture_method_outputs", None)
"""The kind ``capture(method_outputs=...)`` sows method outputs with, in the capturing
thread (``None`` outside)."""

_PATCH_LOCK = threading.Lock()
_BASE_MODULES = ("flaxgraph.module_class", "flaxgraph.pytreelib.objects")


def _captured_modules(module: Module) -> list[tuple[PathParts, Module]]:
    # Random streams are Modules in flaxgraph but not layers: Flax does not capture them.
    return [(p, m) for p, m in module.iter_modules() if not isinstance(m, (Rngs, RngStream))]


def _initial(init: Any) -> dict[PathParts, list[tuple[str, Variable[Any]]]]:
    """``init``'s Variables grouped by module path: ``{path: [(name, variable)]}``."""
    if init is None:
        return {}
    state = init if isinstance(init, State) else State(init)
    grouped: dict[PathParts, list[tuple[str, Variable[Any]]]] = {}
    flat = state.flat_state()
    for path, leaf in zip(flat.paths, flat.leaves):
        if not is_variable(leaf):
            raise TypeError(
                f"capture(init=...): the value at {'/'.join(map(str, path))} is a "
                f"{type(leaf).__name__}, expected a Variable (e.g. nnx.Perturbation); pass "
                "a State returned by nnx.capture."
            )
        grouped.setdefault(tuple(path[:-1]), []).append((str(path[-1]), leaf))
    return grouped


# -- method outputs ----------------------------------------------------------------------------


def _capturing_wrapper(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = method(self, *args, **kwargs)
        kind = METHOD_OUTPUTS.get()
        # Record only the method the module's class resolves `name` to (not a
        # super() call), and only for modules of a running capture.
        if (
            kind is not None
            and CAPTURES in getattr(self, "__dict__", {})
            and getattr(type(self), name, None) is wrapper
        ):
            self.sow(kind, name, out)
        return out

    wrapper._flaxgraph_original = method  # type: ignore[attr-defined]
    wrapper._flaxgraph_users = 0  # type: ignore[attr-defined]
    return wrapper


def public_methods(cls: type) -> list[tuple[type, str]]:
    """``(defining class, name)`` of the public methods and ``__call__`` of ``cls``, below
    flaxgraph's base classes."""
    found = []
    for name in dir(cls):
        if name.startswith("_") and name != "__call__":
            continue
        owner = next((c for c in cls.__mro__ if name in c.__dict__), None)
        if owner is None or owner is object or owner.__module__ in _BASE_MODULES:
            continue
        attr = owner.__dict__[name]
        if inspect.isfunction(attr) or hasattr(attr, "_flaxgraph_original"):
            found.append((owner, name))
    return found


def _patch(classes: set[type]) -> list[tuple[type, str, Any]]:
    patched = []
    with _PATCH_LOCK:
        targets = {t for cls in classes for t in public_methods(cls)}
        for owner, name in sorted(targets, key=lambda t: (t[0].__qualname__, t[1])):
            attr = owner.__dict__[name]
            if not hasattr(attr, "_flaxgraph_original"):
                attr = _capturing_wrapper(name, attr)
                setattr(owner, name, attr)
            attr._flaxgraph_users += 1
            patched.append((owner, name, attr))
    return patched


def _unpatch(patched: list[tuple[type, str, Any]]) -> None:
    with _PATCH_LOCK:
        for owner, name, wrapper in patched:
            wrapper._flaxgraph_users -= 1
            if wrapper._flaxgraph_users == 0 and owner.__dict__.get(name) is wrapper:
                setattr(owner, name, cast(Any, wrapper)._flaxgraph_original)


# -- capture --------------------------------------------------------------------------------------


def _target(fn: Any, args: tuple[Any, ...]) -> Module:
    if inspect.ismethod(fn) and isinstance(fn.__self__, Module):
        return fn.__self__
    if isinstance(fn, Module):
        return fn
    if args and isinstance(args[0], Module):
        return args[0]
    got = f"args[0] is a {type(args[0]).__name__}" if args else "it got no positional argument"
    raise TypeError(
        f"nnx.capture: {getattr(fn, '__name__', fn)!r} is neither a Module nor a bound "
        f"method of one, so its first positional argument must be the Module to capture "
        f"from, but {got}.\nFix: call it with the module first, or capture "
        "the module (nnx.capture(model, ...)) or its method (nnx.capture(model.encode, ...))."
    )


def capture(
    fn: Any,
    *var_types: type[Variable[Any]],
    init: Any = None,
    method_outputs: type[Variable[Any]] | None = None,
) -> Any:
    """Wraps ``fn`` to return what it sows (and perturbs) next to its output.

    The model is left as it was.

    Args:
      fn: a Module (its ``__call__``), a bound method of one, or a function whose first
        positional argument is the Module. A Variable kind here makes ``capture`` a
        decorator factory: ``@nnx.capture(nnx.Intermediate)``.
      *var_types: the Variable kinds to capture and return, one State each.
      init: a State of starting values by module path and name (as returned), e.g.
        ``nnx.Perturbation`` values whose gradient is that of an intermediate; its kinds
        are captured too (returned only if listed).
      method_outputs: a Variable kind: also sow every public method's (and
        ``__call__``'s) output under the method's name.

    Returns:
      A function with ``fn``'s arguments returning ``fn``'s output alone (no
      ``var_types``), or ``(output, *states)``; each State maps module paths to
      ``{name: Variable}`` (modules that sowed nothing are absent).

    Raises:
      TypeError: ``fn`` is a plain function whose first argument is not a Module; or
        ``init`` holds something other than Variables.
      TraceContextError (``ValueError``): the module was captured by closure inside a
        transform.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> class Block(nnx.Module):
      ...   def __call__(self, x):
      ...     self.sow(nnx.Intermediate, 'y', x * 3)
      ...     return x.sum()
      >>> block = Block()
      >>> out, sown = nnx.capture(block, nnx.Intermediate)(jnp.ones(2))
      >>> sown['y'].value
      (Array([3., 3.], dtype=float32),)
      >>> 'y' in vars(block)
      False
    """
    if isinstance(fn, type) and issubclass(fn, Variable):
        kinds = (fn, *var_types)
        return lambda actual: capture(actual, *kinds, init=init, method_outputs=method_outputs)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        module = _target(fn, args)
        initial = _initial(init)
        kinds = list(
            dict.fromkeys([*var_types, *(type(v) for vs in initial.values() for _, v in vs)])
        )
        modules = _captured_modules(module)
        installed: list[tuple[PathParts, Module, Any]] = []  # (path, module, slots before)
        patched: list[tuple[type, str, Any]] = []
        try:
            for path, m in modules:
                start = {
                    k: {n: v.raw_value for n, v in initial.get(path, []) if type(v) is k}
                    for k in kinds
                }
                before = m.__dict__.get(CAPTURES)
                setattr(m, CAPTURES, tuple(k(start[k]) for k in kinds))
                installed.append((path, m, before))
            if method_outputs is not None:
                patched = _patch({type(m) for _, m in modules})
                with METHOD_OUTPUTS.scoped(method_outputs):
                    result = fn(*args, **kwargs)
            else:
                result = fn(*args, **kwargs)
        finally:
            _unpatch(patched)
            collected: dict[type, list[tuple[PathParts, Variable[Any]]]] = {
                k: [] for k in var_types
            }
            for path, m, before in installed:
                slots = m.__dict__.get(CAPTURES, ())
                if before is not None:  # a capture around this one: give back its slots
                    setattr(m, CAPTURES, before)
                elif CAPTURES in m.__dict__:
                    delattr(m, CAPTURES)
                for slot in slots:
                    if type(slot) in collected:
                        collected[type(slot)].extend(
                            ((*path, name), type(slot)(value)) for name, value in slot.value.items()
                        )
        states = [State.from_flat_path(collected[k]) for k in var_types]
        if not states:
            return result
        return (result, *states)

    return wrapper
