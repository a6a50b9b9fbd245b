"""The active device mesh, logical axis rules, and eager sharding of new Variables
(``docs/design.md``, "Axis metadata").

Source: Flax NNX 0.12.8 ``nnx.use_eager_sharding``, ``nnx.using_eager_sharding``,
``nnx.logical_axis_rules``, the FLIP "Variable eager sharding"; ``jax.sharding``."""

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
    """Renames ``sharding``/``sharding_names`` of ``metadata`` to ``out_sharding`` in place, with
    a ``DeprecationWarning`` per key at ``stacklevel``; returns ``metadata``."""
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

# eager sharding's default is one setting with flax.config's when real Flax is imported
EAGER_SHARDING: Flag[bool] = FlaxConfigFlag("eager_sharding", True, "flax_always_shard_variable")
LOGICAL_AXIS_RULES: Flag[Rules] = Flag("logical_axis_rules", ())


class ShardingSpecError(ValueError):
    """A sharding spec names an axis its mesh lacks, or has more entries than its value's rank.

    The message names the Variable's path (where known), the spec, and the mesh axes or
    the value's shape.
    """


class use_eager_sharding:
    """Sets whether new Variables with sharding metadata are placed on the active mesh.

    At once (this thread); as a context manager until its exit, as a decorator during each
    call. As Flax's configuration contexts it has ``get_default()``, ``get_stack()`` and
    ``current_value()``.

    Raises:
      TypeError: ``value`` is not a bool.

    Example::

      >>> import flaxgraph as nnx
      >>> with nnx.use_eager_sharding(False):
      ...   nnx.using_eager_sharding(), nnx.use_eager_sharding.get_default()
      (False, True)
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
        """The setting outside every ``use_eager_sharding`` (``flax_always_shard_variable``)."""
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
    """Whether new Variables with sharding metadata are placed on the active mesh at creation.

    Example::

      >>> import flaxgraph as nnx
      >>> nnx.using_eager_sharding()
      True
    """
    return EAGER_SHARDING.get()


@contextlib.contextmanager
def logical_axis_rules(rules: Sequence[tuple[str, str | tuple[str, ...] | None]]) -> Iterator[None]:
    """Maps logical axis names to mesh axes inside the ``with`` block.

    Args:
      rules: ``(logical_name, mesh_axes)`` pairs, ``mesh_axes`` a mesh-axis name, a tuple
        of them or ``None``. The last rule for a name wins; names without a rule stay.
        Inner blocks replace outer rules, Linen's rule blocks included.

    Raises:
      TypeError: a rule is not a ``(str, str | tuple | None)`` pair.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> w = nnx.Param(jnp.ones((2, 3)), out_sharding=('embed', 'mlp'))
      >>> with nnx.logical_axis_rules([('embed', None), ('mlp', 'model')]):
      ...   nnx.get_partition_spec(w).value
      P(None, 'model')
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
    """``flax.core.spmd`` if the program imported it (Linen sets its rules there), else ``None``."""
    return sys.modules.get("flax.core.spmd")


def get_logical_axis_rules() -> Rules:
    """The logical axis rules in effect (``()`` outside any block), Linen's blocks included."""
    shared = _flax_core_spmd()
    if shared is not None:
        rules = shared.get_logical_axis_rules()
        if rules:
            return tuple((logical, mesh_axes) for logical, mesh_axes in rules)
    return LOGICAL_AXIS_RULES.get()


def resolve_names(names: Sequence[Any], local_rules: Any = ()) -> tuple[Any, ...]:
    """``names`` with each logical name replaced by its mesh axes under the active rules plus
    ``local_rules`` (a Variable's ``sharding_rules``).

    Raises:
      ValueError: a local rule disagrees with the active rules for a name.
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
    """The sharding names in ``out_sharding`` metadata (a ``PartitionSpec`` too), or ``None``."""
    names = metadata.get("out_sharding")
    return tuple(names) if isinstance(names, (tuple, PartitionSpec)) else None


def active_mesh() -> Any:
    """The mesh of ``jax.set_mesh`` (abstract while tracing), or ``None``."""
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
    """``spec`` without trailing ``None`` entries (JAX drops them)."""
    entries = tuple(spec)
    while entries and entries[-1] is None:
        entries = entries[:-1]
    return entries


def check_spec(spec: PartitionSpec, mesh: Any, shape: tuple[int, ...] | None, where: str) -> None:
    """Raises ``ShardingSpecError`` when ``spec`` names an axis ``mesh`` lacks, or has more
    non-trailing-``None`` entries than ``shape`` has dimensions; ``where`` names the Variable."""
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
    """The Variable-creation hook: ``value`` placed with its sharding when eager sharding is on
    and a mesh is known, else unchanged (``kind`` is for errors)."""
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
    if names is None:  # most Variables: no mesh lookup
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
