"""``jit`` and ``jit_partial``: compile a function of objects, keeping reference semantics.

See ``docs/design.md``, "The five lift steps" and "The fast path".
Source: ``jax.jit``; the "JAX-style NNX Transforms" FLIP flax#4107; Flax NNX 0.12
``nnx.jit``, ``nnx.jit_partial`` and ``flax.nnx.transforms.compilation``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, TypeVar, overload

import jax
from jax.sharding import PartitionSpec, Sharding

from flaxgraph.graphlib.walk import flatten_with_paths
from flaxgraph.modes import Mode, resolve
from flaxgraph.tracing import is_top_level
from flaxgraph.transforms.aliasing import PrefixSpec
from flaxgraph.transforms.calling_conventions import (
    infer_argnums_and_argnames,
    merge_static,
    normalize_argnames,
    normalize_argnums,
    unbind,
)
from flaxgraph.transforms.closure_reads import warn_reads
from flaxgraph.transforms.compiled import Compiled as CompiledEntry
from flaxgraph.transforms.compiled import JitFunctions, Lowered, TracedJit
from flaxgraph.transforms.control import eval_shape
from flaxgraph.transforms.donation import (
    DONATE_VARIABLES,
    AutoDonation,
    JitExtra,
    ReadOnlyDonated,
    auto_donation,
    copy_held,
    copy_repeats,
    kept_inputs,
    mark_installed,
    regroup,
    unusable_donations,
)
from flaxgraph.transforms.lift import Call, Inner, InStatic, Slots, split_inputs
from flaxgraph.transforms.lift_types import StateSharding, reject_lift_types
from flaxgraph.transforms.prefix_groups import (
    DonatedKey,
    donated_keys,
    prefix_keys,
    same_unless_donated,
)
from flaxgraph.transforms.shard_map import shard_map as shard_map
from flaxgraph.transforms.transformed import Args, Kwargs, P, R, StaticArgs, Transformed
from flaxgraph.variablelib.closure_watch import watching

_Staged = TypeVar("_Staged", Lowered, TracedJit)


class _Unspecified:
    def __repr__(self) -> str:
        return "UNSPECIFIED"


UNSPECIFIED: object = _Unspecified()


def _is_sharding(p: object) -> bool:
    return p is None or p is UNSPECIFIED or isinstance(p, (Sharding, PartitionSpec))


SHARDING_SPEC = PrefixSpec(
    "in_shardings",
    _is_sharding,
    StateSharding,
    "give a Sharding (or None) for the whole object, or nnx.StateSharding({filter: sharding}).",
    wildcard=UNSPECIFIED,
)
OUT_SHARDING_SPEC = PrefixSpec(
    "out_shardings", _is_sharding, StateSharding, SHARDING_SPEC.fix, wildcard=UNSPECIFIED
)


def _split_prefix(prefix: object, n_args: int) -> tuple[Any, Any]:
    """A user prefix over the positional arguments -> ``(args_prefix, kwargs_prefix)``."""
    if isinstance(prefix, (tuple, list)) and not _is_sharding(prefix):
        if len(prefix) != n_args:
            raise ValueError(
                f"in_shardings has {len(prefix)} entries but the function got {n_args} "
                "positional arguments (static arguments excluded); give one per argument."
            )
        return tuple(prefix), UNSPECIFIED
    return prefix, prefix


class JitWrapped(Transformed[P, R]):
    """What ``nnx.jit`` returns: ``fun`` compiled with ``jax.jit``, called like ``fun``.

    Also ``lower``, ``trace``, ``eval_shape`` and ``cache_info()``; a method binds to its
    instance. ``fun``, the shardings, static and donated arguments (completed as
    ``jax.jit`` does) and ``mode`` are as given; ``jitted_fn``: a ``jax.jit`` per input structure.
    """

    private_reads = True  # its outputs return an input array only to its own Variable

    def __init__(
        self,
        fun: Callable[P, R],
        bound: tuple[Any, ...],
        options: JitOptions,
    ):
        super().__init__(fun, bound)
        self.mode = mode = options.mode
        self.in_shardings = in_shardings = options.in_shardings
        self.out_shardings = out_shardings = options.out_shardings
        # For a Module instance, argnums and in_shardings count the explicit
        # arguments (as jax.jit does, and as grad/remat here do): shift past self.
        n = len(bound)
        static_nums, donate_nums = (
            tuple(i + n if i >= 0 else i for i in normalize_argnums(nums))
            for nums in (options.static_argnums, options.donate_argnums)
        )
        if n and isinstance(in_shardings, (tuple, list)) and not _is_sharding(in_shardings):
            in_shardings = (UNSPECIFIED,) * n + tuple(in_shardings)
        self.sharding_prefix = in_shardings
        # As jax.jit: a static (donated) argument named in argnames may also be
        # passed by position, and one numbered in argnums by keyword.
        self.static_argnums, self.static_argnames = infer_argnums_and_argnames(
            fun, static_nums, normalize_argnames(options.static_argnames)
        )
        self.donate_argnums, self.donate_argnames = infer_argnums_and_argnames(
            fun, donate_nums, normalize_argnames(options.donate_argnames)
        )
        if self.static_argnums or self.static_argnames:
            self.static = StaticArgs(self.static_argnums, self.static_argnames)
        self.donated = bool(self.donate_argnums or self.donate_argnames)
        # Automatic donation of the arrays only their Variables hold (donation.py).
        auto = options.donate_variables
        auto = DONATE_VARIABLES.get() if auto is None else bool(auto)
        # Placing the inputs on their shardings is a per-call step: no fast path, and
        # automatic donation only without in_shardings (an explicit donation still applies).
        self.place = in_shardings is not UNSPECIFIED
        self.fast = not self.place
        self.donate_variables = auto and not self.place
        self.configured()

        in_keys = prefix_keys(in_shardings, spec=SHARDING_SPEC)
        out_keys = prefix_keys(in_shardings, out_shardings, spec=SHARDING_SPEC)
        for keys in (in_keys, out_keys):  # keyword arguments get no in_sharding
            if UNSPECIFIED not in keys:
                keys.append(UNSPECIFIED)
        self.in_keys, self.out_keys = donated_keys(in_keys), out_keys
        self.inner = Inner(
            fun,
            OUT_SHARDING_SPEC,
            out_keys,
            same_prefix=same_unless_donated,
            record_kept=True,
            mode=mode,
        )
        self.jit_kwargs = options.jax_kwargs()
        if self.place:
            self.jit_kwargs["in_shardings"] = tuple(_jax_sharding(k.prefix) for k in self.in_keys)
        self.jit_kwargs["donate_argnums"] = tuple(
            i for i, k in enumerate(self.in_keys) if k.donated
        )
        # One jax.jit per input structure, the output structure on the side
        # (compiled.py): JAX's per-call work is the arrays only.
        self.jitted_fn = JitFunctions()
        # Per input structure without automatic donation: the leaves its traces
        # left unchanged (never donated automatically: XLA deletes a donated buffer),
        # or whose buffer no output could take (JAX would warn it was not usable).
        self.read_only: dict[InStatic[JitExtra], frozenset[int]] = {}

    def pure(
        self, in_static: InStatic[JitExtra], entry: CompiledEntry, with_static: bool, *groups: Any
    ) -> object:
        """The function ``jax.jit`` compiles for one input structure: merge, call ``fun``, split."""
        extra = in_static.extra
        args_prefix, kwargs_prefix = _split_prefix(self.sharding_prefix, extra.n_args)
        in_prefixes = [self.in_keys[g] for g in in_static.slots.groups]
        statics = extra.statics

        def call(f: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> object:
            full_args, full_kwargs = merge_static(args, kwargs, statics)
            with watching() as read:  # captured Variables read while tracing
                out = f(*full_args, **full_kwargs)
            warn_reads(read, f, "jit")
            return None, out

        _, out_static, out_groups = self.inner.run(
            in_static, groups, in_prefixes, (args_prefix, kwargs_prefix), self.out_shardings, call
        )
        if self.donate_variables:
            # The leaves this trace left unchanged (donation.kept_inputs): never
            # donated automatically for this input GraphDef.
            self.note_read_only(in_static, kept_inputs(out_static))
        return entry.record(out_static, out_groups, with_static)

    def replay(
        self, in_static: InStatic[JitExtra], entry: CompiledEntry, with_static: bool, *groups: Any
    ) -> object:
        """With automatic donation: the undonated program, regrouped; raises
        ``ReadOnlyDonated`` (while tracing) if a donated leaf comes back unchanged or no
        output can take its buffer (its new value has another shape or dtype)."""
        extra = in_static.extra
        undonated = extra.undonated
        assert undonated is not None
        base = self.jitted_fn.get(undonated, self.make_jit)
        base_groups = regroup(groups, in_static.slots, undonated.slots, len(self.in_keys))
        # A call of the undonated program inside this trace: one jit equation (JAX
        # keeps its trace; XLA inlines it), so this trace costs nothing to speak of.
        out_static, out_groups = base.call(base_groups)
        read_only = kept_inputs(out_static).intersection(extra.auto_donated)
        if not read_only:  # and none that JAX could not alias (it would warn of them)
            donated_groups = [self.in_keys[g].donated for g in range(len(groups))]
            read_only = unusable_donations(
                groups, donated_groups, in_static.slots, out_groups, extra.auto_donated
            )
        if read_only:
            self.note_read_only(undonated, read_only)
            raise ReadOnlyDonated(read_only)
        return entry.record(out_static, out_groups, with_static)

    def note_read_only(self, in_static: InStatic[JitExtra], positions: frozenset[int]) -> None:
        """Adds ``positions`` to the leaves of ``in_static`` never donated automatically."""
        known = self.read_only.get(in_static)
        self.read_only[in_static] = positions if known is None else known | positions

    def make_jit(
        self, in_static: InStatic[JitExtra], entry: CompiledEntry, with_static: bool
    ) -> object:
        """The ``jax.jit`` of ``pure`` (``replay`` when donating) for one input structure."""
        kwargs = dict(self.jit_kwargs)
        # The updated state of an input keeps its in_sharding (as in Flax NNX 0.12):
        # the output groups of kept inputs are keyed by it.
        if self.out_shardings is not UNSPECIFIED or self.place:
            shardings = tuple(_jax_sharding(s) for s in self.out_keys)
            kwargs["out_shardings"] = (None, shardings) if with_static else shardings
        if in_static.extra.undonated is None:
            return jax.jit(functools.partial(self.pure, in_static, entry, with_static), **kwargs)
        fn = functools.partial(self.replay, in_static, entry, with_static)
        fn.__name__ = "pure"  # type: ignore[attr-defined]  # the same program's name in JAX
        return jax.jit(fn, **kwargs)

    def prepare(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Prepared:
        """Splits the arguments (lift step 1) and finds the compiled function of their structure."""
        if self.static is not None:
            dyn_args, dyn_kwargs, statics = self.static.split(args, kwargs)
        else:
            dyn_args, dyn_kwargs, statics = args, kwargs, ()
        prefix = _split_prefix(self.sharding_prefix, len(dyn_args))
        call = split_inputs(
            dyn_args, dyn_kwargs, prefix, SHARDING_SPEC, self.mode, private_reads=True
        )
        if self.donated:
            positions = _donated_positions(args, self.donate_argnums, self.static_argnums)
            names = self.donate_argnames
            donated = [_is_donated(path, positions, names) for path in call.graphdef.leaf_paths]
        else:
            donated = [False] * len(call.prefixes)
        auto = undonated = None
        if self.donate_variables and is_top_level():
            undonated = self.undonated_static(call, donated, statics, len(dyn_args))
            read_only = self.read_only.get(undonated)
            if read_only is None:
                # First call of this structure: trace it undonated (cached) to learn
                # which leaves it leaves unchanged (pure's note_read_only).
                self.first_trace(call, donated, undonated)
                read_only = self.read_only.get(undonated, frozenset())
            excluded = [d or i in read_only for i, d in enumerate(donated)]
            # Before any other list holds the leaf values (donation.BASELINE).
            auto = auto_donation(call.leaves, call.values, excluded)
        if auto is not None:
            copy_held(call.values, auto.positions, auto.mask)
            for i in auto.positions:
                donated[i] = True
            extra = JitExtra(statics, len(dyn_args), auto.positions, undonated)
        else:
            extra = JitExtra(statics, len(dyn_args), (), None)
        if self.donated:
            copy_repeats(call.values, [i for i, d in enumerate(donated) if d])
        call.prefixes = [DonatedKey(p, d) for p, d in zip(call.prefixes, donated)]
        slots, groups = call.groups(self.in_keys)
        if self.place:
            _place(call, slots, groups, self.in_keys)
        # The prefix trees may hold lists and dicts (unhashable): pure rebuilds them.
        in_static = InStatic.make(graphdef=call.graphdef, slots=slots, extra=extra)
        entry = self.jitted_fn.get(in_static, self.make_jit)
        return Prepared(call, entry, groups, slots, auto)

    def undonated_static(
        self, call: Call, donated: list[bool], statics: tuple[Any, ...], n_args: int
    ) -> InStatic[JitExtra]:
        """The ``InStatic`` of this call with only its explicit donation (``donated``)."""
        prefixes = [DonatedKey(p, d) for p, d in zip(call.prefixes, donated)]
        slots = call.slots_for(prefixes, self.in_keys)
        return InStatic.make(
            graphdef=call.graphdef, slots=slots, extra=JitExtra(statics, n_args, (), None)
        )

    def first_trace(self, call: Call, donated: list[bool], in_static: InStatic[JitExtra]) -> None:
        """Traces the call without automatic donation, so ``pure`` notes the unchanged leaves."""
        prefixes = [DonatedKey(p, d) for p, d in zip(call.prefixes, donated)]
        _, groups = call.groups(self.in_keys, prefixes)
        self.jitted_fn.get(in_static, self.make_jit).trace(groups)

    def call_general(
        self, args: Args, kwargs: Kwargs, dyn_args: Args, dyn_kwargs: Kwargs, statics: Args
    ) -> object:
        while True:
            call, entry, groups, slots, auto = self.prepare(args, kwargs)
            try:
                out, out_groups = entry.call(groups)
                break
            except ReadOnlyDonated:  # traced, not compiled (replay noted it): again
                continue
        result = call.finish(out, out_groups)
        if auto is not None:  # the arrays it installed, which nothing else has seen
            mark_installed(call.leaves, auto.positions, out_groups)
        self.remember(
            call, out, entry, slots, len(self.in_keys), dyn_args, dyn_kwargs, statics,
            donated=self.donated, auto=auto,
        )  # fmt: skip
        return result

    def lower(self, *args: object, **kwargs: object) -> Lowered:
        """``jax.jit(...).lower`` for these arguments; ``compile()`` is called as this is."""
        return self._staged(Lowered, "lower", args, kwargs)

    def trace(self, *args: object, **kwargs: object) -> TracedJit:
        """``jax.jit(...).trace`` for these arguments: ``jaxpr``, ``out_info``, ``lower()``."""
        return self._staged(TracedJit, "trace", args, kwargs)

    def _staged(
        self, cls: type[_Staged], stage: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> _Staged:
        """``cls`` around ``entry.lower``/``entry.trace`` of a call, again after ``replay`` raised."""
        while True:
            prepared = self.prepare((*self.bound, *args), kwargs)
            entry = prepared.entry
            try:
                return cls(getattr(entry, stage)(prepared.groups), entry, self.prepare, self.bound)
            except ReadOnlyDonated:  # replay noted the read-only leaves: again
                continue

    def eval_shape(self, *args: object, **kwargs: object) -> Any:
        """The output for these arguments with ``jax.ShapeDtypeStruct`` leaves; nothing runs."""

        def run(*args: object, **kwargs: object) -> object:
            call, entry, groups, _, _ = self.prepare(args, kwargs)
            out, out_groups = entry.call(groups)
            return call.finish(out, out_groups)

        mode = self.mode
        return eval_shape(
            run, *self.bound, *args, graph=mode.graph, graph_updates=mode.updates, **kwargs
        )


class JitOptions(NamedTuple):
    """The options of one ``nnx.jit`` (see ``jit``)."""

    mode: Mode
    in_shardings: object
    out_shardings: object
    static_argnums: int | Sequence[int] | None
    static_argnames: str | Iterable[str] | None
    donate_argnums: int | Sequence[int] | None
    donate_argnames: str | Iterable[str] | None
    keep_unused: bool
    device: object
    backend: str | None
    inline: bool
    compiler_options: dict[str, Any] | None
    donate_variables: bool | None = None

    def jax_kwargs(self) -> dict[str, Any]:
        """The options passed to ``jax.jit`` as they are."""
        kwargs: dict[str, Any] = dict(
            keep_unused=self.keep_unused, device=self.device, backend=self.backend,
            inline=self.inline,
        )  # fmt: skip
        if self.compiler_options is not None:
            kwargs["compiler_options"] = self.compiler_options
        return kwargs


class Prepared(NamedTuple):
    """One call split for ``jax.jit``: its ``Call``, compiled entry, groups and slots."""

    call: Call
    entry: CompiledEntry
    groups: Sequence[list[Any]]
    slots: Slots
    auto: AutoDonation | None


@overload
def jit(
    fun: Callable[P, R],
    *,
    in_shardings: object = ...,
    out_shardings: object = ...,
    static_argnums: int | Sequence[int] | None = ...,
    static_argnames: str | Iterable[str] | None = ...,
    donate_argnums: int | Sequence[int] | None = ...,
    donate_argnames: str | Iterable[str] | None = ...,
    keep_unused: bool = ...,
    device: object = ...,
    backend: str | None = ...,
    inline: bool = ...,
    compiler_options: dict[str, Any] | None = ...,
    graph: bool | None = ...,
    graph_updates: bool | None = ...,
    donate_variables: bool | None = ...,
) -> JitWrapped[P, R]: ...


@overload
def jit(
    fun: None = None,
    *,
    in_shardings: object = ...,
    out_shardings: object = ...,
    static_argnums: int | Sequence[int] | None = ...,
    static_argnames: str | Iterable[str] | None = ...,
    donate_argnums: int | Sequence[int] | None = ...,
    donate_argnames: str | Iterable[str] | None = ...,
    keep_unused: bool = ...,
    device: object = ...,
    backend: str | None = ...,
    inline: bool = ...,
    compiler_options: dict[str, Any] | None = ...,
    graph: bool | None = ...,
    graph_updates: bool | None = ...,
    donate_variables: bool | None = ...,
) -> Callable[[Callable[P, R]], JitWrapped[P, R]]: ...


def jit(
    fun: Callable[P, R] | None = None,
    *,
    in_shardings: object = UNSPECIFIED,
    out_shardings: object = UNSPECIFIED,
    static_argnums: int | Sequence[int] | None = None,
    static_argnames: str | Iterable[str] | None = None,
    donate_argnums: int | Sequence[int] | None = None,
    donate_argnames: str | Iterable[str] | None = None,
    keep_unused: bool = False,
    device: object = None,
    backend: str | None = None,
    inline: bool = False,
    compiler_options: dict[str, Any] | None = None,
    graph: bool | None = None,
    graph_updates: bool | None = None,
    donate_variables: bool | None = None,
) -> JitWrapped[P, R] | Callable[[Callable[P, R]], JitWrapped[P, R]]:
    """Compiles ``fun``, which may take and return objects, with ``jax.jit``.

    Args:
      fun: the function (or method, or Module instance) to compile.
      in_shardings: as in ``jax.jit``, a prefix over the positional arguments
        (static ones excluded); at an object, a Sharding for all its state or
        ``StateSharding({filter: sharding, ...})``. The updated state of an input
        object leaves with its in_sharding.
      out_shardings: the same over the output.
      static_argnums, static_argnames: compile-time constant arguments (hashable),
        each inferred from the other as in ``jax.jit`` (likewise for donation).
      donate_argnums, donate_argnames: as in ``jax.jit``; donated objects stay usable.
      donate_variables: also donate (as ``donate_argnums`` does) the buffer of every
        Variable array ``fun`` writes, so a train step keeps one copy of its
        parameters and optimizer state, not two. Only an array no code can see is
        donated itself: one an earlier ``nnx.jit`` call installed, that nothing has
        read since (``.value``, ``v[...]``, ``nnx.state``, ``nnx.split``, a pytree
        flatten, another transform...) and that nothing else holds; any other (the
        first call's arrays, a read, held, cloned or ``jax.device_put``-aliased one)
        is donated as a copy, so no code ever sees a deleted array. ``False``: only
        the explicit donation, as in Flax NNX 0.12.8; ``None``:
        ``flaxgraph.transforms.donation.DONATE_VARIABLES`` (on). See
        ``docs/design.md``, "Automatic donation".
      keep_unused, device, backend, inline, compiler_options: as in ``jax.jit``.
      graph: ``False`` for tree mode (a shared Variable is an error); ``None``: the
        default (``nnx.set_graph_mode``).
      graph_updates: ``False``: only Variable values come back, and input objects
        may not be returned; ``None``: the default (``nnx.set_graph_updates``).

    Returns:
      A ``JitWrapped`` with ``fun``'s signature (given no ``fun``: a decorator making
      one). A call updates the objects passed in place and returns ``fun``'s output;
      an output that is an input object is the caller's same object. Compilation is
      cached on the graph structure and the arrays' shapes (``cache_info()``).

    Raises:
      InconsistentAliasingError (``ValueError``): one object reaches ``fun`` along
        paths with different shardings; the message lists every path.
      TraceContextError (``ValueError``): ``fun`` mutates or returns an object it
        captured by closure.
      PrefixError (``ValueError``): ``in_shardings``/``out_shardings`` do not fit.
      SharedReferenceError (``ValueError``): in tree mode, a Variable reachable
        twice; without graph updates, ``fun`` returns an input object.
      ValueError: (when created) ``fun`` is a bound method of a Module, or the
        shardings hold a Variable, a graph node, or a ``StateSharding`` without
        graph updates.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> class Counter(nnx.Module):
      ...   def __init__(self): self.count = nnx.BatchStat(jnp.array(0))
      >>> @nnx.jit
      ... def step(c, x):
      ...   c.count += 1
      ...   return x * 2
      >>> c = Counter(); _ = step(c, 1.0); _ = step(c, 2.0)
      >>> int(c.count.value)
      2
    """
    mode = resolve(graph, graph_updates)
    reject_lift_types(
        mode, "jit", "in_shardings", in_shardings, out_shardings, plain="a Sharding (or None)"
    )
    options = JitOptions(
        mode, in_shardings, out_shardings, static_argnums, static_argnames, donate_argnums,
        donate_argnames, keep_unused, device, backend, inline, compiler_options,
        donate_variables,
    )  # fmt: skip
    make = functools.partial(_make_jit, options=options)
    return make if fun is None else make(fun)


def _make_jit(fun: Callable[P, R], *, options: JitOptions) -> JitWrapped[P, R]:
    return JitWrapped(*unbind(fun, "jit"), options)


def _place(call: Call, slots: Slots, groups: Any, keys: Sequence[Any]) -> None:
    """Puts input arrays on their ``Sharding`` and points the caller's leaves at them."""
    for key, group in zip(keys, groups):
        sharding = key.prefix
        if not isinstance(sharding, Sharding):
            continue
        for j, v in enumerate(group):
            if (
                isinstance(v, jax.Array)
                and not isinstance(v, jax.core.Tracer)
                and v.sharding != sharding
            ):
                group[j] = jax.device_put(v, sharding)
    call.values = [groups[g][j] for g, j in zip(slots.groups, slots.positions)]


def _jax_sharding(s: object) -> object:
    return None if s is UNSPECIFIED else s


def _donated_positions(
    args: tuple[Any, ...], donate_nums: tuple[int, ...], static_nums: tuple[int, ...]
) -> set[int]:
    """Donated positions renumbered after removing static arguments."""
    n = len(args)
    statics = {i % n for i in static_nums if -n <= i < n}
    positions = set()
    for i in donate_nums:
        if not -n <= i < n:  # not passed by position (e.g. a donate_argnames by keyword)
            continue
        j = i % n
        positions.add(j - sum(1 for s in statics if s < j))
    return positions


def _is_donated(path: Any, positions: set[int], names: tuple[str, ...]) -> bool:
    root, key = path[0], path[1] if len(path) > 1 else None
    return (root == 0 and key in positions) or (root == 1 and key in names)


def jit_partial(
    fun: Callable[..., Any],
    *partial_args: object,
    in_shardings: object = UNSPECIFIED,
    out_shardings: object = UNSPECIFIED,
    static_argnums: int | Sequence[int] | None = None,
    static_argnames: str | Iterable[str] | None = None,
    donate_argnums: int | Sequence[int] | None = None,
    donate_argnames: str | Iterable[str] | None = None,
    keep_unused: bool = False,
    device: object = None,
    backend: str | None = None,
    inline: bool = False,
    graph: bool | None = None,
    graph_updates: bool | None = None,
    donate_variables: bool | None = None,
) -> Transformed[..., Any]:
    """``nnx.jit(fun)`` with its first positional arguments bound to ``partial_args``.

    Args:
      fun: the function to compile.
      *partial_args: its first positional arguments (a model, an optimizer…);
        ``fun``'s updates to them are written back after each call.
      in_shardings, out_shardings, static_argnums, static_argnames, donate_argnums,
        donate_argnames, keep_unused, device, backend, inline, graph, graph_updates,
        donate_variables: as in ``nnx.jit``; positions count the bound arguments too.

    Returns:
      A function of the remaining arguments, with ``cache_info()``.

    Raises:
      SharedReferenceError (``ValueError``): in tree mode, a Variable reachable twice
        among ``partial_args`` (raised here).
      As ``nnx.jit`` (at the first call for the other arguments).

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> counter = nnx.Variable(jnp.array(0))
      >>> def add(c, n):
      ...   c[...] += n
      >>> add_to = nnx.jit_partial(add, counter)
      >>> add_to(2); add_to(3); int(counter[...]), add_to.cache_info().general_calls
      (5, 1)
    """
    if not resolve(graph, graph_updates).graph:
        # Tree mode: a Variable shared among the bound objects is an error now, not
        # at the first call (as Flax NNX 0.12).
        flatten_with_paths(partial_args, root_name="args", graph=False)
    jitted = jit(
        fun, in_shardings=in_shardings, out_shardings=out_shardings,
        static_argnums=static_argnums, static_argnames=static_argnames,
        donate_argnums=donate_argnums, donate_argnames=donate_argnames,
        keep_unused=keep_unused, device=device, backend=backend, inline=inline,
        graph=graph, graph_updates=graph_updates, donate_variables=donate_variables,
    )  # fmt: skip
    return jitted.partial(*partial_args)
