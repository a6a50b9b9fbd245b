"""One input structure's compiled function, with the output structure recorded on the side.

The ``OutStatic`` returns through JAX only once a trace disagrees with the recorded
one; see ``docs/design.md``, "The fast path".
Source: ``jax.jit`` and its stages; Flax NNX 0.12 ``nnx.jit(...).jitted_fn``,
``lower`` and ``trace``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from flaxgraph.transforms.lift import AuxValue, OutStatic


class OutStaticChanged(Exception):
    """Raised in a trace whose ``OutStatic`` differs from the recorded one (``Compiled.call``)."""


class Compiled:
    """The compiled ``fn`` of one input structure (``with_static``: ``OutStatic`` through JAX)."""

    __slots__ = ("fn", "out_static", "with_static", "_make")

    def __init__(self, make: Callable[[Compiled, bool], Callable[..., Any]]):
        """``make(self, with_static)`` builds the ``jax.jit``; its traces end with ``record``."""
        self._make = make
        self.out_static: OutStatic | None = None
        self.with_static = False
        self.fn: Any = make(self, False)  # a jax.jit function (lower, trace, _cache_size)

    def record(self, out_static: OutStatic, out_groups: Any, with_static: bool) -> Any:
        """What a trace returns; ``OutStaticChanged`` if it disagrees with the recorded one."""
        if with_static:
            return AuxValue(out_static), out_groups
        if self.out_static is None:
            self.out_static = out_static
        elif self.out_static != out_static:
            raise OutStaticChanged
        return out_groups

    def call(self, groups: Sequence[Any]) -> tuple[OutStatic, Any]:
        """Calls the compiled function: ``(out_static, out_groups)``."""
        if not self.with_static:
            try:
                out_groups = self.fn(*groups)
            except OutStaticChanged:
                self.switch()
            else:
                assert self.out_static is not None
                return self.out_static, out_groups
        static, out_groups = self.fn(*groups)
        return static.value, out_groups

    def lower(self, groups: Sequence[Any]) -> Any:
        """``jax.jit(...).lower`` for these groups."""
        return self._stage("lower", groups)

    def trace(self, groups: Sequence[Any]) -> Any:
        """``jax.jit(...).trace`` for these groups."""
        return self._stage("trace", groups)

    def _stage(self, name: str, groups: Sequence[Any]) -> Any:
        try:
            return getattr(self.fn, name)(*groups)
        except OutStaticChanged:
            self.switch()
            return getattr(self.fn, name)(*groups)

    def switch(self) -> None:
        """From now on, the ``OutStatic`` comes back through JAX."""
        self.with_static = True
        self.fn = self._make(self, True)


class JitFunctions:
    """The ``jax.jit`` functions of one ``nnx.jit`` (``jitted_fn``): a ``Compiled`` per structure.

    ``_cache_size()``, as ``jax.jit``'s, counts the executables of every structure.
    """

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: dict[Any, Compiled] = {}

    def get(self, in_static: Any, make: Callable[[Any, Compiled, bool], Any]) -> Compiled:
        """The ``Compiled`` of ``in_static``, made with ``make`` the first time."""
        entry = self.entries.get(in_static)
        if entry is None:
            entry = Compiled(lambda e, with_static: make(in_static, e, with_static))
            self.entries[in_static] = entry
        return entry

    def _cache_size(self) -> int:
        """How many executables ``jax.jit`` holds over all input structures."""
        return sum(entry.fn._cache_size() for entry in self.entries.values())

    def _clear_cache(self) -> None:
        """Drops every compiled executable (as ``jax.jit``'s ``_clear_cache``)."""
        for entry in self.entries.values():
            entry.fn._clear_cache()

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        return f"JitFunctions({len(self.entries)} input structures)"


class Traced:
    """``Compiled``'s interface for a transform that traces on every call (eager ``vmap``)."""

    __slots__ = ("fn",)
    with_static = True
    out_static = None

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn

    def call(self, groups: Sequence[Any]) -> tuple[OutStatic, Any]:
        """Calls ``fn``: ``(out_static, out_groups)``."""
        static, out_groups = self.fn(*groups)
        return static.value, out_groups


class _Stage:
    """A JAX stage of ``nnx.jit`` (``wrapped``) with what takes and updates objects; every
    other attribute is JAX's."""

    __slots__ = ("wrapped", "entry", "prepare", "prefix")

    def __init__(
        self, wrapped: Any, entry: Compiled, prepare: Callable[..., Any], prefix: tuple[Any, ...]
    ):
        self.wrapped = wrapped
        self.entry = entry
        self.prepare = prepare
        self.prefix = prefix

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)


class Lowered(_Stage):
    """``nnx.jit(f).lower(*args)``: JAX's ``Lowered``; ``compile()`` takes and updates objects.

    Every other attribute (``as_text()``, ``cost_analysis()``…) is JAX's.
    """

    __slots__ = ()

    def compile(self, *args: Any, **kwargs: Any) -> AotCompiled:
        """``jax`` ``Lowered.compile`` wrapped to take and update objects."""
        compiled = self.wrapped.compile(*args, **kwargs)
        return AotCompiled(compiled, self.entry, self.prepare, self.prefix)


class TracedJit(_Stage):
    """``nnx.jit(f).trace(*args)``: JAX's ``Traced``; its ``lower()`` gives a ``Lowered``."""

    __slots__ = ()

    def lower(self, *args: Any, **kwargs: Any) -> Lowered:
        """``jax`` ``Traced.lower``, whose ``compile()`` takes and updates objects."""
        return Lowered(self.wrapped.lower(*args, **kwargs), self.entry, self.prepare, self.prefix)


class AotCompiled(_Stage):
    """A compiled executable of ``nnx.jit``, called with objects and writing their updates back.

    The arguments must have ``lower``'s structure (else JAX's ``TypeError``).
    """

    __slots__ = ()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Arguments of another structure or donation partition than lower()'s: JAX's
        # TypeError names the mismatch before anything runs (nothing is donated).
        call, _, groups = self.prepare((*self.prefix, *args), kwargs)[:3]
        out = self.wrapped(*groups)
        if self.entry.with_static:
            static, out_groups = out
            out_static = static.value
        else:
            out_static, out_groups = self.entry.out_static, out
        return call.finish(out_static, out_groups)
