"""The active device mesh, logical axis rules, and eager sharding of new Variables.

Sharding names live in a Variable's metadata under ``out_sharding`` (given under
the older names ``sharding`` / ``sharding_names``, deprecated in Flax NNX 0.12, they
are stored there too, with a ``DeprecationWarning``): a tuple with one entry per
dimension of the value, each a mesh-axis name, a tuple of names, or ``None`` (replicated). Two
scoped settings turn those names into placements:

* **Logical axis rules** (``with nnx.logical_axis_rules([('batch', 'data'),
  ('hidden', 'model')]):``) map *logical* names chosen by the model's author to
  the mesh axes of the machine it runs on. A name without a rule is used as is.
  An inner ``with`` replaces the outer rules for its block.
* **Eager sharding** (on by default; ``nnx.use_eager_sharding(False)`` turns it
  off): a Variable *created* while a mesh is active (``with jax.set_mesh(mesh):``)
  or with ``mesh=`` metadata, and whose metadata holds sharding names, is placed
  on that mesh at once (``jax.device_put`` with its ``NamedSharding``; inside a
  trace, a sharding constraint). No ``jit`` is needed to shard a model at
  creation. Without a mesh the names are only metadata, as before (Flax 0.12
  raises in that case instead; flaxgraph keeps names usable without a mesh).

Errors: a name that is not an axis of the mesh, or a tuple of names whose
length is not the value's rank, raises ``ShardingSpecError`` (a ``ValueError``)
naming the Variable (its path where one is known), the spec and the mesh or
shape.

Source: Flax NNX 0.12 ``nnx.use_eager_sharding``, ``nnx.using_eager_sharding``,
``nnx.logical_axis_rules`` (behaviour checked against the installed Flax 0.12.8:
inner rules replace outer ones, unknown names pass through) and the FLIP "Variable
eager sharding"; meshes and placement from ``jax.sharding``.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar

import jax
from jax.experimental.layout import Format
from jax.sharding import NamedSharding, PartitionSpec

from flaxgraph.config import Flag, FlaxConfigFlag

__all__ = [
    "OLD_SHARDING_KEYS",
    "rename_sharding_keys",
    "ShardingSpecError",
    "active_mesh",
    "check_spec",
    "get_logical_axis_rules",
    "logical_axis_rules",
    "names_of",
    "place_at_creation",
    "resolve_names",
    "use_eager_sharding",
    "using_eager_sharding",
]

OLD_SHARDING_KEYS = ("sharding", "sharding_names")
"""The older metadata names of ``out_sharding`` (deprecated in Flax NNX 0.12)."""


def rename_sharding_keys(metadata: dict[str, Any], stacklevel: int = 3) -> dict[str, Any]:
    """Renames the older sharding keys ``sharding`` and ``sharding_names`` of a
    metadata dict (which the caller owns) to ``out_sharding``, in place, and returns it.

    As Flax NNX 0.12 does, the names given as ``Param(x, sharding=...)``,
    ``sharding_names=...`` or ``set_metadata(sharding=...)`` are stored under
    ``out_sharding`` (so code that reads ``get_metadata()['out_sharding']`` finds
    them whichever name built the Variable), with a ``DeprecationWarning`` per
    older key.

    Args:
      metadata: the dict to rename in place.
      stacklevel: the warning's ``stacklevel`` (counted from this function), so that
        it points at the user's line.

    Warns:
      DeprecationWarning: ``metadata`` holds ``sharding`` or ``sharding_names``; pass
        ``out_sharding=`` instead.

    Example::

      >>> import warnings
      >>> with warnings.catch_warnings():
      ...   warnings.simplefilter('ignore', DeprecationWarning)
      ...   rename_sharding_keys({'sharding': ('a', None), 'note': 1})
      {'note': 1, 'out_sharding': ('a', None)}

    Source: Flax NNX 0.12 ``Variable.__init__``/``set_metadata`` (the deprecation of
    ``sharding``/``sharding_names`` in favour of ``out_sharding``).
    """
    for key in OLD_SHARDING_KEYS:
        if key in metadata:
            warnings.warn(
                f"The Variable metadata {key!r} is deprecated and stored as "
                f"'out_sharding'; pass out_sharding=... instead.",
                DeprecationWarning,
                stacklevel=stacklevel,
            )
            metadata["out_sharding"] = metadata.pop(key)
    return metadata


Rules = tuple[tuple[str, Any], ...]
P = ParamSpec("P")
R = TypeVar("R")

# The two scoped settings of this file (see the module docstring).
# eager sharding's default is one setting with flax.config's when real Flax is imported
EAGER_SHARDING: Flag[bool] = FlaxConfigFlag("eager_sharding", True, "flax_always_shard_variable")
LOGICAL_AXIS_RULES: Flag[Rules] = Flag("logical_axis_rules", ())


class ShardingSpecError(ValueError):
    """A sharding spec does not fit its mesh (an unknown axis name) or its value (a
    rank mismatch). The message names the Variable's path (where known), the spec,
    and the mesh axes or the value's shape."""


class use_eager_sharding:
    """Sets whether new Variables with sharding metadata are placed on the active mesh
    at creation. Takes effect at once (for the rest of the program, in this thread)
    and, used as a context manager, restores the previous setting on exit; used as a
    decorator (``@nnx.use_eager_sharding(False)``), it holds only during each call.

    As Flax's configuration contexts, the setting is a per-thread stack over a
    default: ``get_default()`` is the configured default
    (``flax_always_shard_variable``, ``True`` unless changed with
    ``nnx.config.update``, or with ``flax.config.update`` once real Flax is imported:
    one setting, as in Flax), ``get_stack()`` the stack itself (a plain call replaces
    its top, or pushes onto an empty one; a ``with`` block pushes and pops), and
    ``current_value()`` its top, else the default (what ``using_eager_sharding()``
    returns).

    Args:
      value: ``True`` (the default setting) or ``False``.

    Raises:
      TypeError: ``value`` is not a bool.

    Example::

      >>> import flaxgraph as nnx
      >>> with nnx.use_eager_sharding(False):
      ...   nnx.using_eager_sharding(), nnx.use_eager_sharding.get_default()
      (False, True)
      >>> nnx.use_eager_sharding.current_value()
      True

    Source: Flax NNX 0.12 ``nnx.use_eager_sharding`` (``flax.typing``'s
    configuration context: ``get_default``, ``get_stack``, ``current_value``).
    """

    __slots__ = ("prev_value", "new_value")

    def __init__(self, value: bool):
        if not isinstance(value, bool):
            raise TypeError(f"use_eager_sharding takes a bool, got {value!r}.")
        stack = self.get_stack()
        self.prev_value: bool | None = stack[-1] if stack else None
        if stack:
            stack[-1] = value
        else:
            stack.append(value)
        self.new_value = value

    @classmethod
    def get_default(cls) -> bool:
        """The setting outside every ``use_eager_sharding``: the configured
        ``flax_always_shard_variable``."""
        return EAGER_SHARDING.global_value()

    @classmethod
    def get_stack(cls) -> list[bool]:
        """This thread's stack of settings (innermost last), the list itself."""
        return EAGER_SHARDING.stack()

    @classmethod
    def current_value(cls) -> bool:
        """The setting in force here: the top of the stack, else the default."""
        return EAGER_SHARDING.get()

    def __enter__(self) -> use_eager_sharding:
        # keep the replaced setting under this block's, so the exit's pop restores it
        if self.prev_value is not None:
            self.get_stack().insert(-1, self.prev_value)
        return self

    def __exit__(self, *exc: object) -> None:
        self.get_stack().pop()

    def __call__(self, f: Callable[P, R]) -> Callable[P, R]:
        # as a decorator the construction's change is undone; each call pushes it
        stack = self.get_stack()
        stack.pop()
        if self.prev_value is not None:
            stack.append(self.prev_value)
        value = self.new_value

        @functools.wraps(f)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            EAGER_SHARDING.push(value)
            try:
                return f(*args, **kwargs)
            finally:
                EAGER_SHARDING.pop()

        return wrapper

    def __repr__(self) -> str:
        return f"use_eager_sharding({self.new_value})"


def using_eager_sharding() -> bool:
    """Whether new Variables with sharding metadata are placed on the active mesh at
    creation (``True`` unless turned off with ``nnx.use_eager_sharding(False)``).

    Example::

      >>> import flaxgraph as nnx
      >>> nnx.using_eager_sharding()
      True

    Source: Flax NNX 0.12 ``nnx.using_eager_sharding``.
    """
    return EAGER_SHARDING.get()


@contextlib.contextmanager
def logical_axis_rules(rules: Sequence[tuple[str, str | tuple[str, ...] | None]]) -> Iterator[None]:
    """Maps logical axis names to mesh axes inside the ``with`` block.

    Args:
      rules: ``(logical_name, mesh_axes)`` pairs; ``mesh_axes`` is a mesh-axis name,
        a tuple of them, or ``None`` (replicated). The last rule for a name wins
        (Flax 0.12.8 reads the rules into a dict); names without a rule are used
        unchanged. Inner blocks replace outer rules, Linen's rule blocks included.

    Raises:
      TypeError: a rule is not a ``(str, str | tuple | None)`` pair.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> w = nnx.Param(jnp.ones((2, 3)), out_sharding=('embed', 'mlp'))
      >>> with nnx.logical_axis_rules([('embed', None), ('mlp', 'model')]):
      ...   nnx.get_partition_spec(w).value
      P(None, 'model')

    Source: Flax 0.12 ``nnx.logical_axis_rules`` (``flax.core.spmd``).
    """
    checked = []
    for rule in rules:
        if (
            not isinstance(rule, (tuple, list))
            or len(rule) != 2
            or not isinstance(rule[0], str)
            or not (rule[1] is None or isinstance(rule[1], (str, tuple)))
        ):
            raise TypeError(
                f"logical_axis_rules: each rule is a (logical_name, mesh_axes) pair with "
                f"mesh_axes a str, a tuple of str or None; got {rule!r}."
            )
        checked.append((rule[0], rule[1]))
    shared = _flax_core_spmd()
    with contextlib.ExitStack() as stack:
        stack.enter_context(LOGICAL_AXIS_RULES.scoped(tuple(checked)))
        if shared is not None:  # one store with Linen's rules, as in Flax
            stack.enter_context(shared.logical_axis_rules(tuple(checked)))
        yield


def _flax_core_spmd() -> Any:
    """Flax's ``flax.core.spmd`` module if the program has imported it (Linen and
    ``flax.core`` code set logical axis rules there: ``flax.linen.partitioning.axis_rules``,
    ``flax.linen.logical_axis_rules``), else ``None``; never imports it."""
    return sys.modules.get("flax.core.spmd")


def get_logical_axis_rules() -> Rules:
    """The logical axis rules in effect (``()`` outside any rules block).

    As in Flax NNX 0.12, ``nnx.logical_axis_rules`` and Linen's rule blocks
    (``flax.linen.partitioning.axis_rules``, which set ``flax.core.spmd``'s rules)
    are one setting: when the program has imported ``flax.core``, the innermost
    block of either kind is in effect.
    """
    shared = _flax_core_spmd()
    if shared is not None:
        rules = shared.get_logical_axis_rules()
        if rules:
            return tuple((logical, mesh_axes) for logical, mesh_axes in rules)
    return LOGICAL_AXIS_RULES.get()


def resolve_names(names: Sequence[Any], local_rules: Any = ()) -> tuple[Any, ...]:
    """``names`` with every logical name replaced by its mesh axes under the active
    rules plus ``local_rules`` (a Variable's own ``sharding_rules`` metadata); a name
    without a rule, and ``None``, stay.

    Raises:
      ValueError: a local rule maps a logical name to other axes than the active
        rules do ("Inconsistent logical axis annotations").
    """
    rules = get_logical_axis_rules()
    if not rules and not local_rules:
        return tuple(names)
    table: dict[str, Any] = {}
    for logical, mesh_axes in rules:
        table[logical] = mesh_axes  # the last rule for a name wins, as in Flax 0.12.8
    for logical, mesh_axes in local_rules or ():
        if logical in table and table[logical] != mesh_axes:
            raise ValueError(
                f"Inconsistent logical axis annotations for {logical!r}: the active "
                f"nnx.logical_axis_rules map it to {table[logical]!r}, the Variable's "
                f"sharding_rules to {mesh_axes!r}.\nFix: drop one of the two rules."
            )
        table[logical] = mesh_axes

    def one(name: Any) -> Any:
        if isinstance(name, str):
            return table.get(name, name)
        if isinstance(name, tuple):
            return tuple(table.get(n, n) if isinstance(n, str) else n for n in name)
        return name

    return tuple(one(n) for n in names)


def names_of(metadata: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """The sharding names in a Variable's metadata (``out_sharding``), or ``None``.
    A ``PartitionSpec`` counts as a tuple."""
    names = metadata.get("out_sharding")
    return tuple(names) if isinstance(names, (tuple, PartitionSpec)) else None


def active_mesh() -> Any:
    """The mesh set by ``jax.set_mesh``: the concrete ``Mesh`` outside ``jit``, the
    ``AbstractMesh`` while tracing; ``None`` when no mesh is set."""
    try:
        mesh: Any = jax.sharding.get_mesh()
    except ValueError:  # inside a trace only the abstract mesh is available
        mesh = jax.sharding.get_abstract_mesh()
    return None if mesh.empty else mesh


def _axes_in(entry: Any) -> tuple[Any, ...]:
    if entry is None:
        return ()
    return entry if isinstance(entry, tuple) else (entry,)


def _trimmed(spec: PartitionSpec) -> tuple[Any, ...]:
    """``spec`` without its trailing ``None`` entries (JAX drops them: ``P('a', None)``
    places a rank-1 value as ``P('a')`` does)."""
    entries = tuple(spec)
    while entries and entries[-1] is None:
        entries = entries[:-1]
    return entries


def check_spec(
    spec: PartitionSpec,
    mesh: Any,
    shape: tuple[int, ...] | None,
    where: str,
) -> None:
    """Raises ``ShardingSpecError`` when ``spec`` names an axis ``mesh`` lacks or has
    more entries than ``shape`` has dimensions, trailing ``None`` entries aside
    (``shape`` None: rank not checked). A shorter spec is fine: as in JAX, the
    missing trailing entries are ``None``.
    ``where`` names the Variable (its path, or its kind and shape)."""
    if mesh is not None:
        axis_names = tuple(mesh.axis_names)
        missing = [a for e in spec for a in _axes_in(e) if a not in axis_names]
        if missing:
            raise ShardingSpecError(
                f"The sharding of {where} is {spec}, which names the "
                f"{'axis' if len(missing) == 1 else 'axes'} {', '.join(map(repr, missing))} "
                "that the mesh lacks: the mesh axes are "
                f"{axis_names}.\nFix: name only mesh axes in the Variable's out_sharding, "
                "or map logical names to mesh axes with nnx.logical_axis_rules([...])."
            )
    if shape is not None and len(_trimmed(spec)) > len(shape):
        raise ShardingSpecError(
            f"The sharding of {where} is {spec} with {len(spec)} entries, but its value has "
            f"shape {tuple(shape)} (rank {len(shape)}).\nFix: give at most one name (or "
            "None) per dimension of the value; missing trailing entries mean None."
        )


def place_at_creation(value: Any, metadata: Mapping[str, Any], kind: str) -> Any:
    """The Variable-creation hook: ``value`` placed with its sharding when eager
    sharding is on, the metadata holds names, and a mesh is known (``mesh`` metadata,
    else the active mesh); otherwise ``value`` unchanged. ``kind`` is the Variable's
    class name, used in errors."""
    given = metadata.get("out_sharding")
    if given is None or metadata.get("eager_sharding") is False:  # nothing to place
        return value
    if not hasattr(value, "shape") or isinstance(value, jax.ShapeDtypeStruct):
        return value
    if not EAGER_SHARDING.get():  # read last: its default may be flax.config's
        return value
    if isinstance(given, NamedSharding):  # a full sharding: its own mesh and spec
        check_spec(given.spec, given.mesh, tuple(value.shape), f"a new {kind}")
        if isinstance(value, jax.core.Tracer):
            return jax.lax.with_sharding_constraint(value, given)
        return jax.device_put(value, given)
    if isinstance(given, Format):  # a layout and a sharding
        return jax.device_put(value, given)
    names = names_of(metadata)
    if names is None:
        return value
    mesh = metadata.get("mesh") or active_mesh()
    if mesh is None:
        return value
    spec = PartitionSpec(*resolve_names(names, metadata.get("sharding_rules") or ()))
    check_spec(spec, mesh, tuple(value.shape), f"a new {kind} of shape {tuple(value.shape)}")
    sharding = NamedSharding(mesh, spec)
    types = set(getattr(mesh, "axis_types", ()))
    if len(types) > 1:
        raise ShardingSpecError(
            f"Cannot place a new {kind} of shape {tuple(value.shape)} with {spec}: the mesh "
            f"mixes axis types {tuple(mesh.axis_types)} (Mesh must have all axes as Explicit "
            "or all axes as Auto).\nFix: make the mesh's axes all Auto or all Explicit, or "
            "create the Variable with eager_sharding=False."
        )
    if types == {jax.sharding.AxisType.Explicit}:
        return jax.sharding.reshard(value, sharding)  # explicit axes: a sharding in the type
    if isinstance(value, jax.core.Tracer) or isinstance(mesh, jax.sharding.AbstractMesh):
        # inside a transform (only the abstract mesh is known): a constraint
        return jax.lax.with_sharding_constraint(value, sharding)
    return jax.device_put(value, sharding)
