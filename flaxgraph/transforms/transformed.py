"""The object every flaxgraph transform returns: ``Transformed``, and ``Wrapped``.

See ``docs/design.md``, "The five lift steps" ("One transform object").
Source: Flax NNX 0.12 ``nnx.jit``'s ``JitWrapped``; ``typing.ParamSpec``.
"""

from __future__ import annotations

import copy
import functools
import types
from collections.abc import Callable
from typing import Any, Generic, ParamSpec, TypeVar

from flaxgraph.transforms.calling_conventions import split_static
from flaxgraph.transforms.donation import AutoDonation
from flaxgraph.transforms.fastpath import CacheInfo, PlanCache, same_trace
from flaxgraph.transforms.lift import Call, OutStatic, Slots
from flaxgraph.transforms.plan import MISS, Plan, record_key

P = ParamSpec("P")
R = TypeVar("R")
Args = tuple[Any, ...]  # positional arguments (and statics) as the call paths pass them
Kwargs = dict[str, Any]

_WRAPPER_ASSIGNMENTS = ("__module__", "__name__", "__qualname__", "__doc__", "__annotations__")


class StaticArgs:
    """Which arguments a transform treats as compile-time constants (``argnums``, ``argnames``)."""

    __slots__ = ("argnums", "argnames")

    def __init__(self, argnums: tuple[int, ...], argnames: tuple[str, ...]):
        self.argnums = argnums
        self.argnames = argnames

    def split(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any], tuple[Any, ...]]:
        """``(dynamic_args, dynamic_kwargs, statics)``; ``TypeError`` if a static is unhashable."""
        return split_static(args, kwargs, self.argnums, self.argnames)


class Transformed(Generic[P, R]):
    """A transformed function: ``fun`` called with ``bound`` first, through its ``plans``."""

    fast: bool = True
    static: StaticArgs | None = None
    # Whether step 1 reads Variables without handing their arrays out (Plan.private_reads).
    private_reads: bool = False

    def __init__(self, fun: Callable[P, R], bound: tuple[Any, ...] = ()):
        # The wrapped function's name and docstring, not its __dict__: a user
        # function's attributes would shadow this class's methods.
        functools.update_wrapper(self, fun, assigned=_WRAPPER_ASSIGNMENTS, updated=())
        self.fun = fun
        self.bound = bound
        self.plans = PlanCache()
        self.configured()

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Calls the function: the fast path if a plan matches, else the general path."""
        if self.plain:  # the common case, inline: a few attribute reads per call
            plan = self.plans.recent()
            if plan is not None:
                result: R = plan.run(args, kwargs, ())
                if result is not MISS:
                    return result
        general: R = self.call_with(args, kwargs)
        return general

    def call_with(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``__call__`` in full: bound and static arguments, the fast path, the general path."""
        if self.bound:
            args = (*self.bound, *args)
        if self.static is not None:
            dyn_args, dyn_kwargs, statics = self.static.split(args, kwargs)
        else:
            dyn_args, dyn_kwargs, statics = args, kwargs, ()
        if self.fast:
            plans = self.plans
            plan = plans.recent()
            if plan is not None:
                result = plan.run(dyn_args, dyn_kwargs, statics)
                if result is not MISS:
                    return result
            result = plans.run_any(dyn_args, dyn_kwargs, statics)
            if result is not MISS:
                return result
        self.plans.general_calls += 1
        return self.call_general(args, kwargs, dyn_args, dyn_kwargs, statics)

    def configured(self) -> None:
        """Sets ``plain``; a subclass calls it after setting ``fast``, ``static`` or ``bound``."""
        self.plain = self.fast and not self.bound and self.static is None

    def call_general(
        self, args: Args, kwargs: Kwargs, dyn_args: Args, dyn_kwargs: Kwargs, statics: Args
    ) -> object:
        """The transform's general path for one call; it may ``remember`` a plan."""
        raise NotImplementedError

    def remember(
        self,
        call: Call,
        out: OutStatic,
        compiled: Any,
        slots: Slots,
        n_groups: int,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        statics: tuple[Any, ...] = (),
        *,
        donated: bool = False,
        auto: AutoDonation | None = None,
    ) -> None:
        """Records the plan of a general call that kept its inputs' structure in this trace."""
        if not (self.fast and out.inputs_kept and same_trace(call)):
            return
        plan = Plan(
            call, compiled, slots, n_groups, args, kwargs, statics, donated=donated, auto=auto,
            private_reads=self.private_reads,
        )  # fmt: skip
        self.plans.put(record_key(plan.arg_checks, statics), plan)

    def partial(self, *args: object) -> Transformed[..., R]:
        """This function with ``args`` bound after ``bound``, sharing compiled code and plans."""
        bound = copy.copy(self)
        bound.bound = (*self.bound, *args)
        bound.configured()
        return bound

    def cache_info(self, verbose: bool = False) -> CacheInfo:
        """``CacheInfo(general_calls, plans)``; ``verbose`` also prints each plan's source."""
        if verbose:
            for i, source in enumerate(self.plans.sources()):
                print(f"# plan {i + 1} of {len(self.plans.plans)}\n{source}")
        return self.plans.info()

    def __get__(self, obj: object, objtype: object = None) -> object:
        """As a method: bound to ``obj`` the way a function is."""
        if obj is None:
            return self
        return types.MethodType(self, obj)

    def __repr__(self) -> str:
        name = getattr(self.fun, "__qualname__", None) or repr(self.fun)
        return f"<{type(self).__name__} of {name}>"


class Wrapped(Transformed[P, R]):
    """A transform without a fast path, given as ``run(*args, **kwargs)`` (``grad``, ``remat``…)."""

    fast = False

    def __init__(self, fun: Callable[P, R], run: Callable[..., Any], bound: tuple[Any, ...] = ()):
        super().__init__(fun, bound)
        self.run = run

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        self.plans.general_calls += 1
        result: R = (
            self.run(*self.bound, *args, **kwargs) if self.bound else self.run(*args, **kwargs)
        )
        return result
