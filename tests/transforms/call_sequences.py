"""Call sequences for the differential property of ``test_call_sequences.py``.

A *sequence* is one transform (or a nesting of transforms), one *place* where a
value reaches the function, and four or five calls, each with a value from the
oracle's value strategy (``flaxgraph.testing.strategies.attribute_values``) drawn
from a small pool, so values change, repeat and change type. ``run_sequence`` runs
it on flaxgraph through one transformed function kept for the whole sequence (its
later calls take the fast path), and compares every call's result and the model's
state with three references, each run on its own twin model:

* the general path: the same transforms with their fast path off
  (``GeneralPathOnly``: every call is walked, so the general walk decides
  everything; compiled functions are reused per input structure, as a plan's are);
* the eager call, for the transforms that compute what their function computes
  (``jit``, ``remat``): the function called without any transform;
* real Flax NNX 0.12.8 (``flax.nnx``), the same program from the same source, where
  Flax runs it (a call Flax refuses, a string argument to ``jit`` for instance, or
  an attribute assignment Flax refuses, is compared with the other references only).
  Where a Flax call in the sequence disagrees, the reference is the same call on
  Flax with no history (``fresh_flax_outcome``): Flax's caches can replay an
  earlier value that compares equal but computes differently.

A flaxgraph call may raise only where its general path raises too, and never
where Flax returns a result (an argument JAX cannot trace, a dtype given to ``remat``,
raises in both, while the eager call returns).

One difference is deliberate and not compared: for a value read from a closure, an
eager flaxgraph ``shard_map`` or ``pmap`` compiles once per argument structure, as
``jit`` (and ``jax.pmap``) do, so it reads the closure when it traces; Flax NNX
0.12.8's eager ``shard_map`` and ``pmap`` trace on every call (``Transform.closure_as_flax``).

Source: issue #36 ("Tests that would have caught it"); ``docs/design.md``,
"The fast path".
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx as flax_nnx
from jax.sharding import PartitionSpec as P

import flaxgraph as fg_nnx
from flaxgraph.testing.strategies import attribute_values
from flaxgraph.testing.values import Description, NpScalar, canonical
from flaxgraph.transforms.transformed import Transformed

PLACES = (
    "positional",
    "keyword",
    "list_arg",
    "tuple_arg",
    "dict_arg",
    "attribute",
    "nnx_list",
    "nnx_dict",
    "submodule",
    "closure",
)
"""Where the value reaches the function: an argument, a keyword argument, inside a
list, tuple or dict argument, a Module attribute, an item of an ``nnx.List`` or
``nnx.Dict`` attribute, an attribute of a sub-module, a closure cell."""

ATTRIBUTE_PLACES = frozenset({"attribute", "nnx_list", "nnx_dict", "submodule"})


# -- the program, written once for both libraries ----------------------------------------


def leaf_score(leaf: Any) -> Any:
    """A float32 number for one pytree leaf of a value: the sum of an array (a key's
    data), else the length of its canonical form (a static value)."""
    if isinstance(leaf, (jax.Array, np.ndarray, np.generic, bool, int, float, complex)):
        a = jnp.asarray(leaf)
        if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
            a = jax.random.key_data(a)
        if jnp.issubdtype(a.dtype, jnp.complexfloating):
            a = jnp.real(a)
        return jnp.sum(a.astype(jnp.float32))
    return jnp.float32(len(str(canonical(leaf))))


def score(value: Any) -> Any:
    """A float32 scalar that changes with the value: its leaves' scores and its
    structure."""
    leaves, treedef = jax.tree_util.tree_flatten(value)
    total = jnp.float32(len(str(treedef)))
    for leaf in leaves:
        total = total + leaf_score(leaf)
    return total


@functools.cache
def classes(lib: Any) -> tuple[type, type]:
    """``(Model, Sub)`` for one library (``flax.nnx`` or flaxgraph)."""

    class Sub(lib.Module):
        def __init__(self) -> None:
            self.attr = None

    class Model(lib.Module):
        def __init__(self) -> None:
            self.w = lib.Param(jnp.arange(1.0, 4.0, dtype=jnp.float32))
            self.count = lib.BatchStat(jnp.zeros((), jnp.float32))
            self.attr = None
            self.items = lib.List([None])
            self.table = lib.Dict({"v": None})
            self.sub = Sub()

    return Model, Sub


class Setup(NamedTuple):
    """One library's side of a sequence: the model, the closure cell, the library."""

    lib: Any
    model: Any
    cell: list[Any]


def new_setup(lib: Any) -> Setup:
    return Setup(lib, classes(lib)[0](), [None])


def put(setup: Setup, place: str, value: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Puts ``value`` at ``place``: the call's ``(args, kwargs)`` for an argument
    place, else sets the model's attribute (or the closure cell) and gives no
    arguments."""
    m = setup.model
    if place == "positional":
        return (value,), {}
    if place == "keyword":
        return (), {"v": value}
    if place == "list_arg":
        return ([value],), {}
    if place == "tuple_arg":
        return ((value,),), {}
    if place == "dict_arg":
        return ({"v": value},), {}
    if place == "attribute":
        m.attr = value
    elif place == "nnx_list":
        m.items[0] = value
    elif place == "nnx_dict":
        m.table["v"] = value
    elif place == "submodule":
        m.sub.attr = value
    else:
        setup.cell[0] = value
    return (), {}


def read(place: str, m: Any, cell: list[Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The value at ``place`` as the function sees it."""
    if place == "positional":
        return args[0]
    if place == "keyword":
        return kwargs["v"]
    if place == "list_arg":
        return args[0][0]
    if place == "tuple_arg":
        return args[0][0]
    if place == "dict_arg":
        return args[0]["v"]
    if place == "attribute":
        return m.attr
    if place == "nnx_list":
        return m.items[0]
    if place == "nnx_dict":
        return m.table["v"]
    if place == "submodule":
        return m.sub.attr
    return cell[0]


def user_function(place: str, cell: list[Any], mutate: bool) -> Callable[..., Any]:
    """``f(m, *args, **kwargs)``: a scalar that depends on the model's weights and on
    the value at ``place``; it counts its calls in ``m.count`` when ``mutate``."""

    def f(m: Any, *args: Any, **kwargs: Any) -> Any:
        s = score(read(place, m, cell, args, kwargs))
        if mutate:
            m.count[...] = m.count[...] + 1.0
        return jnp.sum(m.w[...] * (1.0 + s))

    return f


# -- the transforms ------------------------------------------------------------------------

Call = Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]


@dataclasses.dataclass(frozen=True)
class Transform:
    """One transform (or nesting) under test.

    Attributes:
      name: the test id.
      build: ``build(lib, f) -> call``: the transformed function of ``f(m, *args,
        **kwargs)`` as ``call(m, args, kwargs)``, made once per sequence.
      mutate: whether the function writes ``m.count`` (not where broadcast state is
        read only: ``vmap``, ``pmap``, ``scan``, ``shard_map``, ``eval_shape``).
      eager: whether the function called without a transform is a reference.
      bakes: whether values the function reads from outside its arguments and the
        model (the closure) are fixed at trace time, as in ``jax.jit``: the eager
        call is then no reference for the closure place.
      closure_as_flax: whether Flax reads a closure when flaxgraph does.
    """

    name: str
    build: Callable[[Any, Callable[..., Any]], Call]
    mutate: bool = True
    eager: bool = False
    bakes: bool = True
    closure_as_flax: bool = True


def _plain(wrap: Callable[[Any, Callable[..., Any]], Callable[..., Any]]) -> Any:
    def build(lib: Any, f: Callable[..., Any]) -> Call:
        g = wrap(lib, f)
        return lambda m, args, kwargs: g(m, *args, **kwargs)

    return build


def _vjp(lib: Any, f: Callable[..., Any]) -> Call:
    def call(m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        out, back = lib.vjp(lambda m: f(m, *args, **kwargs), m)
        return out, back(jnp.float32(1.0))[0]

    return call


def _jvp(lib: Any, f: Callable[..., Any]) -> Call:
    def call(m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        tangent = lib.State({"w": lib.Param(jnp.ones(3, jnp.float32))})
        return lib.jvp(lambda m: f(m, *args, **kwargs), (m,), (tangent,))

    return call


def _batched(lib: Any, f: Callable[..., Any], transform: str, nested: bool = False) -> Call:
    """vmap or pmap of ``f`` over a batch of one (one CPU device): the model and the
    value broadcast, a batched scale mapped."""

    def g(m: Any, xs: Any, *args: Any, **kwargs: Any) -> Any:
        return f(m, *args, **kwargs) * xs

    cache: dict[int, Any] = {}

    def call(m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        n = len(args)
        t = cache.get(n)
        if t is None:
            in_axes = (None, 0) + (None,) * n
            t = getattr(lib, transform)(g, in_axes=in_axes)
            if nested:
                t = lib.jit(t)
            cache[n] = t
        return t(m, jnp.ones((1,), jnp.float32), *args, **kwargs)

    return call


def _scan(lib: Any, f: Callable[..., Any]) -> Call:
    def step(m: Any, c: Any, x: Any, *args: Any, **kwargs: Any) -> Any:
        y = f(m, *args, **kwargs) * x
        return c + y, y

    cache: dict[int, Any] = {}

    def call(m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        n = len(args)
        t = cache.get(n)
        if t is None:
            t = cache[n] = lib.scan(
                step, in_axes=(None, lib.Carry, 0) + (None,) * n, out_axes=(lib.Carry, 0)
            )
        return t(m, jnp.float32(0.0), jnp.arange(2.0, dtype=jnp.float32), *args, **kwargs)

    return call


def _fori(lib: Any, f: Callable[..., Any]) -> Call:
    def call(m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        def body(i: Any, carry: Any) -> Any:
            m, acc, args, kwargs = carry
            return m, acc + f(m, *args, **kwargs), args, kwargs

        return lib.fori_loop(0, 2, body, (m, jnp.float32(0.0), args, kwargs))[1]

    return call


def _while(lib: Any, f: Callable[..., Any]) -> Call:
    def call(m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        def cond(carry: Any) -> Any:
            return carry[1] < 2

        def body(carry: Any) -> Any:
            m, i, acc, args, kwargs = carry
            return m, i + 1, acc + f(m, *args, **kwargs), args, kwargs

        return lib.while_loop(cond, body, (m, 0, jnp.float32(0.0), args, kwargs))[2]

    return call


def _cond(lib: Any, f: Callable[..., Any]) -> Call:
    def call(m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return lib.cond(
            True,
            lambda m, *a: f(m, *a, **kwargs),
            lambda m, *a: -f(m, *a, **kwargs),
            m,
            *args,
        )

    return call


def _cond_jit(lib: Any, f: Callable[..., Any]) -> Call:
    def g(m: Any, flag: Any, *args: Any, **kwargs: Any) -> Any:
        return lib.cond(flag, lambda m: f(m, *args, **kwargs), lambda m: -f(m, *args, **kwargs), m)

    t = lib.jit(g)
    return lambda m, args, kwargs: t(m, jnp.bool_(True), *args, **kwargs)


def _switch(lib: Any, f: Callable[..., Any]) -> Call:
    def call(m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        branches = (
            lambda m, *a: -f(m, *a, **kwargs),
            lambda m, *a: f(m, *a, **kwargs),
        )
        return lib.switch(1, branches, m, *args)

    return call


def _eval_shape(lib: Any, f: Callable[..., Any]) -> Call:
    def call(m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        out = lib.eval_shape(f, m, *args, **kwargs)
        return (tuple(out.shape), str(out.dtype))

    return call


def _shard_map(lib: Any, f: Callable[..., Any]) -> Call:
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("x",))
    cache: dict[int, Any] = {}

    def call(m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        n = len(args)
        t = cache.get(n)
        if t is None:
            t = cache[n] = lib.shard_map(f, mesh=mesh, in_specs=(P(),) + (P(),) * n, out_specs=P())
        return t(m, *args, **kwargs)

    return call


def _custom_vjp(lib: Any, f: Callable[..., Any], under_grad: bool = False) -> Call:
    """``custom_vjp`` of ``f`` with a backward rule of its own (ten times the weights
    times the cotangent), the value arguments non-differentiable; called directly or
    through ``grad``."""
    cache: dict[int, Any] = {}

    def call(m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        n = len(args)
        g = cache.get(n)
        if g is None:
            cv = lib.custom_vjp(f, nondiff_argnums=tuple(range(1, n + 1)))

            def fwd(m: Any, *args: Any, **kwargs: Any) -> Any:
                return f(m, *args, **kwargs), m.w[...]

            def bwd(*rest: Any) -> Any:
                w, ct = rest[-2:]
                return (lib.State({"w": lib.Param(10.0 * w * ct)}),)

            cv.defvjp(fwd, bwd)
            g = cache[n] = lib.grad(cv) if under_grad else cv
        return g(m, *args, **kwargs)

    return call


TRANSFORMS: tuple[Transform, ...] = (
    Transform("jit", _plain(lambda lib, f: lib.jit(f)), eager=True),
    Transform("remat", _plain(lambda lib, f: lib.remat(f)), eager=True),
    Transform("jit_remat", _plain(lambda lib, f: lib.jit(lib.remat(f))), eager=True),
    Transform("grad", _plain(lambda lib, f: lib.grad(f)), bakes=False),
    Transform("value_and_grad", _plain(lambda lib, f: lib.value_and_grad(f)), bakes=False),
    Transform("jit_grad", _plain(lambda lib, f: lib.jit(lib.grad(f)))),
    Transform(
        "jit_value_and_grad_remat", _plain(lambda lib, f: lib.jit(lib.value_and_grad(lib.remat(f))))
    ),
    Transform("vjp", _vjp, bakes=False),
    Transform("jvp", _jvp, bakes=False),
    Transform("vmap", functools.partial(_batched, transform="vmap"), mutate=False),
    Transform("jit_vmap", functools.partial(_batched, transform="vmap", nested=True), mutate=False),
    Transform(
        "pmap", functools.partial(_batched, transform="pmap"), mutate=False, closure_as_flax=False
    ),
    Transform("scan", _scan, mutate=False),
    Transform("fori_loop", _fori),
    Transform("while_loop", _while),
    Transform("cond", _cond),
    Transform("jit_cond", _cond_jit),
    Transform("switch", _switch),
    Transform("eval_shape", _eval_shape, mutate=False),
    Transform("shard_map", _shard_map, mutate=False, closure_as_flax=False),
    Transform("custom_vjp", _custom_vjp),
    Transform("grad_custom_vjp", functools.partial(_custom_vjp, under_grad=True)),
)
"""Every public transform, and nestings of them."""


# -- sequences -----------------------------------------------------------------------------


class Sequence(NamedTuple):
    """A drawn call sequence: the place and the value of each call."""

    place: str
    values: tuple[Description, ...]


@st.composite
def sequences(draw: Any, places: tuple[str, ...] = PLACES) -> Sequence:
    """A place and 4 or 5 calls whose values come from a pool of 2 or 3 drawn
    descriptions (so they repeat), the first pool value a NumPy or Python number
    half of the time (the values #36 found stale)."""
    place = draw(st.sampled_from(places))
    numbers = st.builds(
        NpScalar,
        st.sampled_from(("float32", "float64", "int32", "int64", "bool")),
        st.sampled_from((0.0, 1.0, 2.0, 3.0)),
    )
    pool = draw(st.lists(attribute_values(max_depth=1), min_size=1, max_size=2))
    pool = [draw(numbers | attribute_values(max_depth=1)), *pool, draw(numbers)]
    indices = draw(st.lists(st.integers(0, len(pool) - 1), min_size=4, max_size=5))
    return Sequence(place, tuple(pool[i] for i in indices))


# -- comparison ----------------------------------------------------------------------------


class Outcome(NamedTuple):
    """A call's result and the model's state after it, as plain data, or the error."""

    result: Any
    state: Any
    error: type[BaseException] | None


def plain(x: Any) -> Any:
    """Comparable data of a result or State: arrays as NumPy arrays (keys as their
    data), States as pure dicts, the rest by ``canonical``."""
    if isinstance(x, (fg_nnx.State, flax_nnx.State)):
        x = x.to_pure_dict()
    if isinstance(x, (fg_nnx.Variable, flax_nnx.Variable)):
        x = x[...]
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in sorted(x.items(), key=lambda kv: str(kv[0]))}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if isinstance(x, (jax.Array, np.ndarray, np.generic)):
        a = jnp.asarray(x)
        if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
            a = jax.random.key_data(a)
        return np.asarray(a)
    return canonical(x)


def state_of(setup: Setup) -> Any:
    """The model's Variables (``w`` and ``count``): what a caller sees change."""
    m = setup.model
    return {"w": np.asarray(m.w[...]), "count": np.asarray(m.count[...])}


def same(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        if a.shape != b.shape or a.dtype.kind != b.dtype.kind:
            return False
        if a.dtype.kind in "fc":
            return bool(np.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True))
        return bool(np.array_equal(a, b))
    return bool(a == b)


def outcome(setup: Setup, call: Callable[[], Any]) -> Outcome:
    try:
        result = plain(call())
    except Exception as e:  # the references decide whether an error is right
        return Outcome(None, state_of(setup), type(e))
    return Outcome(result, state_of(setup), None)


class GeneralPathOnly:
    """flaxgraph as a library whose transforms have their fast path off: a
    transformed function it makes (a ``Transformed``) takes the general path on
    every call (``fast = False``, the setting ``jit`` itself uses when it places
    its outputs) and records no plan."""

    def __getattr__(self, name: str) -> Any:
        value = getattr(fg_nnx, name)
        if not callable(value) or isinstance(value, type):
            return value

        @functools.wraps(value)
        def made(*args: Any, **kwargs: Any) -> Any:
            out = value(*args, **kwargs)
            if isinstance(out, Transformed):
                out.fast = False
                out.configured()
            return out

        return made


GENERAL = GeneralPathOnly()


def pure_state(setup: Setup) -> Any:
    """The Flax model's state as a pure dict (arrays only): what a twin is given."""
    return flax_nnx.to_pure_dict(flax_nnx.state(setup.model))


def fresh_flax_outcome(
    transform: Transform, place: str, description: Description, state: Any
) -> Outcome:
    """The outcome of one call on Flax with no history: a new model given ``state``,
    the value put at ``place``, a newly built transform called once.

    The reference where a Flax call in a sequence disagrees with flaxgraph: Flax
    NNX 0.12.8 can replay a trace cached for an earlier value that compares equal
    to the new one though it computes differently. NumPy's ``dtype == scalar``
    compares a dtype equal to any scalar of that dtype (``np.dtype('float32') ==
    np.float32(0.0)`` is True), so after a ``dtype`` attribute, a NumPy scalar
    attribute replays the dtype's trace in Flax's ``scan`` and ``cond``. flaxgraph's
    call must then equal what Flax computes for that value on its first call."""
    twin = new_setup(flax_nnx)
    st = flax_nnx.state(twin.model)
    flax_nnx.replace_by_pure_dict(st, state)
    flax_nnx.update(twin.model, st)
    args, kwargs = put(twin, place, description.build())
    call = transform.build(flax_nnx, user_function(place, twin.cell, transform.mutate))
    return outcome(twin, lambda: call(twin.model, args, kwargs))


def run_sequence(transform: Transform, seq: Sequence) -> list[str]:
    """Runs ``seq`` through ``transform`` (see the module docstring) and returns the
    differences found, one line each (empty: the sequence passed)."""
    place = seq.place
    fast = new_setup(fg_nnx)
    general = new_setup(fg_nnx)
    eager = new_setup(fg_nnx)
    flax = new_setup(flax_nnx)
    mutate = transform.mutate
    fast_call = transform.build(fg_nnx, user_function(place, fast.cell, mutate))
    general_call = transform.build(GENERAL, user_function(place, general.cell, mutate))
    flax_call = transform.build(flax_nnx, user_function(place, flax.cell, mutate))
    eager_f = user_function(place, eager.cell, mutate)
    flax_runs = transform.closure_as_flax or place != "closure"
    eager_runs = transform.eager and not (transform.bakes and place == "closure")
    problems: list[str] = []
    for n, description in enumerate(seq.values):
        where = f"call {n} ({transform.name}, {place}, {description!r})"
        args, kwargs = put(fast, place, description.build())
        got = outcome(fast, lambda: fast_call(fast.model, args, kwargs))
        g_args, g_kwargs = put(general, place, description.build())
        ref = outcome(general, lambda: general_call(general.model, g_args, g_kwargs))
        if got.error is not ref.error:
            problems.append(f"{where}: raised {got.error}, the general path {ref.error}")
        elif got.error is None and not (
            same(got.result, ref.result) and same(got.state, ref.state)
        ):
            problems.append(
                f"{where}: {got.result} (state {got.state}), the general path gives "
                f"{ref.result} (state {ref.state})"
            )
        if eager_runs:
            e_args, e_kwargs = put(eager, place, description.build())
            ref = outcome(eager, lambda: eager_f(eager.model, *e_args, **e_kwargs))
            if got.error is not None:
                # The transform refused what the eager call takes (a dtype argument
                # JAX cannot trace; the general path decides whether that is right):
                # the eager model has moved on, so it is compared no further.
                eager_runs = False
            elif ref.error is None:
                if not (same(got.result, ref.result) and same(got.state, ref.state)):
                    problems.append(
                        f"{where}: {got.result} (state {got.state}), the eager call gives "
                        f"{ref.result} (state {ref.state})"
                    )
        if flax_runs:
            try:
                f_args, f_kwargs = put(flax, place, description.build())
            except Exception:
                flax_runs = False  # Flax refuses the attribute: compare no further
                continue
            before = pure_state(flax)
            ref = outcome(flax, lambda: flax_call(flax.model, f_args, f_kwargs))
            if ref.error is not None:
                flax_runs = False  # Flax's state may be half-updated: compare no further
            elif got.error is not None:
                problems.append(f"{where}: raised {got.error}, Flax returns {ref.result}")
            elif not (same(got.result, ref.result) and same(got.state, ref.state)):
                fresh = fresh_flax_outcome(transform, place, description, before)
                if not (same(got.result, fresh.result) and same(got.state, fresh.state)):
                    problems.append(
                        f"{where}: {got.result} (state {got.state}), Flax gives "
                        f"{ref.result} (state {ref.state})"
                    )
                # Else Flax's own cache replayed an earlier call (see
                # ``fresh_flax_outcome``): its first call of this value agrees.
    return problems
