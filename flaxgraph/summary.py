"""tabulate: a table of a model's sub-modules, their inputs, outputs and state, from one
``jax.eval_shape`` run on a copy whose methods are wrapped (each distinct call recorded
once, inside ``nnx.vmap``/``nnx.scan`` too).

Source: Flax NNX 0.12.8 ``nnx.tabulate`` and the ``flax.nnx.summary`` records;
``rich.table``; FLOPs from ``jax.jit(...).lower(...).cost_analysis()``."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import math
import uuid
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from flaxgraph.capturing import public_methods
from flaxgraph.graphlib.descendants import iter_graph
from flaxgraph.graphlib.split_merge import merge, split
from flaxgraph.graphlib.split_merge import state as graph_state
from flaxgraph.pytreelib.objects import Pytree, static
from flaxgraph.reprlib import ipython_running
from flaxgraph.rnglib.rngs import Rngs, RngState, RngStream
from flaxgraph.typing import Key, PathParts
from flaxgraph.variablelib.variable import Variable, is_variable

__all__ = [
    "ArrayRepr",
    "CallInfo",
    "NodeStats",
    "NoneDumper",
    "ObjectInfo",
    "SimpleObjectRepr",
    "SizeBytes",
    "filter_rng_streams",
    "in_ipython",
    "tabulate",
]


_TAG = "_tabulate_path"
_NO_OPTIONS: Mapping[str, Any] = MappingProxyType({})


@dataclasses.dataclass(frozen=True)
class CallInfo:
    """One recorded call, one row of the table; what ``row_filter`` receives.

    Attributes:
      call_order: the call's rank among the recorded calls (0 for the first).
      object_id: ``id`` of the called object in the caller's model.
      type: the object's class.
      path: the object's path in the model (``()`` for the model), then the method's
        name when it is not ``__call__``.
      inputs_repr: the inputs, rendered (shapes and dtypes).
      outputs: the outputs, with ``jax.ShapeDtypeStruct`` in place of arrays.
      flops: the forward pass's FLOPs (``compute_flops``), else ``None``.
      vjp_flops: the forward and backward pass's FLOPs (``compute_vjp_flops``), else ``None``.
      method: the name of the called method (``'__call__'``…; not in Flax).
    """

    call_order: int
    object_id: int
    type: type
    path: PathParts
    inputs_repr: str
    outputs: Any
    flops: int | None
    vjp_flops: int | None
    method: str = "__call__"


def filter_rng_streams(row: CallInfo) -> bool:
    """The default ``row_filter``: False for calls of random streams (``nnx.Rngs``, ``RngStream``).

    Example::

      >>> import flaxgraph as nnx
      >>> info = nnx.summary.CallInfo(0, 0, nnx.RngStream, ('rngs',), '', None, None, None)
      >>> nnx.summary.filter_rng_streams(info)
      False
    """
    return not issubclass(row.type, (RngStream, Rngs))


# -- recording ----------------------------------------------------------------------------------


@dataclasses.dataclass
class _Record:
    order: int
    path: PathParts
    type: type
    method: str
    inputs: str = ""
    outputs: Any = None
    flops: int | None = None
    vjp_flops: int | None = None


@dataclasses.dataclass
class _Recorder:
    nonce: str
    compute_flops: bool
    compute_vjp_flops: bool
    # one record per distinct call: (path, method, inputs) -> record
    records: dict[tuple[PathParts, str, str], _Record] = dataclasses.field(default_factory=dict)

    def path_of(self, obj: Any) -> PathParts | None:
        tag = obj.__dict__.get(_TAG) if isinstance(obj, Pytree) else None
        if isinstance(tag, tuple) and len(tag) == 2 and tag[0] == self.nonce:
            return tag[1]
        return None


def _abstract(x: Any) -> Any:
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return jax.ShapeDtypeStruct(x.shape, x.dtype)
    return x


def _wrap(recorder: _Recorder, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        path = recorder.path_of(self)
        if path is None:
            return fn(self, *args, **kwargs)
        inputs = _inputs_repr(args, kwargs)
        key = (path, name, inputs)
        if key in recorder.records:  # the same call again (e.g. a shared layer): one row
            return fn(self, *args, **kwargs)
        record = _Record(len(recorder.records), path, type(self), name, inputs)
        recorder.records[key] = record
        if recorder.compute_flops or recorder.compute_vjp_flops:
            out = _measured_call(recorder, record, fn, self, args, kwargs)
        else:
            out = fn(self, *args, **kwargs)
        record.outputs = jax.tree.map(_abstract, out)
        return out

    return wrapper


def _measured_call(
    recorder: _Recorder,
    record: _Record,
    fn: Callable[..., Any],
    obj: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """Calls ``fn`` through one ``jax.jit`` lowered first (for XLA's FLOPs; the jit cache then
    traces its body once); a call that cannot be lowered alone runs as is, without FLOPs."""
    state, arrays, forward = _pure_call(obj, args, kwargs, fn)

    def backward(state: Any, arrays: list[Any]) -> Any:
        out, pullback = jax.vjp(forward, state, arrays)
        return pullback(out)

    abstract = (jax.tree.map(_abstract, state), [_abstract(a) for a in arrays])
    jitted = jax.jit(forward)
    try:
        lowered = jitted.lower(*abstract)
    except Exception:  # a call that needs its caller's context
        return fn(obj, *args, **kwargs)
    if recorder.compute_flops:
        record.flops = _cost(lowered)
    if recorder.compute_vjp_flops:
        try:
            record.vjp_flops = _cost(jax.jit(backward).lower(*abstract))
        except Exception:  # e.g. integer outputs
            record.vjp_flops = None
    return jitted(state, arrays)


def _cost(lowered: Any) -> int | None:
    cost = lowered.cost_analysis()
    if isinstance(cost, list):
        cost = cost[0] if cost else {}
    flops = (cost or {}).get("flops")
    return None if flops is None else int(flops)


@contextlib.contextmanager
def _patched(recorder: _Recorder, classes: list[type]) -> Iterator[None]:
    """Wraps the methods of ``classes`` within the block; restores them even if it raises."""
    originals: dict[tuple[type, str], Any] = {}
    for cls in classes:
        for klass, name in public_methods(cls):
            if (klass, name) not in originals:
                originals[(klass, name)] = vars(klass)[name]
    try:
        for (klass, name), fn in originals.items():
            setattr(klass, name, _wrap(recorder, name, fn))
        yield
    finally:
        for (klass, name), fn in originals.items():
            setattr(klass, name, fn)


def _is_array(x: Any) -> bool:
    return isinstance(x, (jax.Array, np.ndarray, np.generic, jax.ShapeDtypeStruct))


def _pure_call(
    obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any], fn: Callable[..., Any]
) -> tuple[Any, list[Any], Callable[[Any, list[Any]], Any]]:
    """``obj``'s state, the arrays among the arguments, and ``(state, arrays) -> fn(obj, ...)``."""
    graphdef, state = split(obj)
    leaves, treedef = jax.tree.flatten((args, kwargs))

    def call(state: Any, arrays: list[Any]) -> Any:
        it = iter(arrays)
        full = [next(it) if _is_array(x) else x for x in leaves]
        call_args, call_kwargs = jax.tree.unflatten(treedef, full)
        return fn(merge(graphdef, state), *call_args, **call_kwargs)

    return state, [x for x in leaves if _is_array(x)], call


def _abstract_run(
    obj: Any,
    method: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    compute_flops: bool,
    compute_vjp_flops: bool,
) -> _Recorder:
    """Calls ``obj.method`` under ``jax.eval_shape`` on a tagged copy; returns the recorder."""
    recorder = _Recorder(uuid.uuid4().hex, compute_flops, compute_vjp_flops)
    copy = merge(*split(obj))
    classes: list[type] = []
    for path, node in iter_graph(copy):
        if isinstance(node, Pytree):
            Pytree.__setattr__(node, _TAG, static((recorder.nonce, path)))
            if type(node) not in classes:
                classes.append(type(node))
    if not callable(getattr(copy, method, None)):
        raise AttributeError(
            f"nnx.tabulate: the {type(obj).__name__} has no method {method!r}.\nFix: pass "
            "the name of one of its methods, e.g. method='__call__'."
        )

    def call_method(node: Any, *a: Any, **k: Any) -> None:  # eval_shape: no output to trace
        getattr(node, method)(*a, **k)

    state, arrays, run = _pure_call(copy, args, kwargs, call_method)
    with _patched(recorder, classes):
        jax.eval_shape(run, jax.tree.map(_abstract, state), [_abstract(a) for a in arrays])
    return recorder


# -- rendering ----------------------------------------------------------------------------------


def _array_repr(x: Any) -> str:
    dtype = (
        jnp.dtype(x.dtype) if not jax.dtypes.issubdtype(x.dtype, jax.dtypes.extended) else x.dtype
    )
    return f"{dtype}[{','.join(str(d) for d in x.shape)}]"


def _value_repr(x: Any) -> str:
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return _array_repr(x)
    if is_variable(x):
        return f"{type(x).__name__}({_value_repr(x.raw_value)})"
    if isinstance(x, (list, tuple)):
        inner = ", ".join(_value_repr(v) for v in x)
        return f"[{inner}]" if isinstance(x, list) else f"({inner}{',' if len(x) == 1 else ''})"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k}: {_value_repr(v)}" for k, v in x.items()) + "}"
    if isinstance(x, Pytree):
        return type(x).__name__
    text = repr(x)
    return text if len(text) <= 40 else text[:37] + "..."


def _inputs_repr(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    if len(args) == 1 and not kwargs:
        return _value_repr(args[0])
    return "\n".join(
        [f"- {_value_repr(a)}" for a in args]
        + [f"{k}: {_value_repr(v)}" for k, v in kwargs.items()]
    )


def _outputs_repr(out: Any) -> str:
    if isinstance(out, tuple) and out:
        return "\n".join(f"- {_value_repr(v)}" for v in out)
    return _value_repr(out)


def _size_bytes(value: Any) -> tuple[int, int]:
    if not (hasattr(value, "shape") and hasattr(value, "dtype")):
        return 0, 0
    size = math.prod(value.shape)
    return size, size * int(value.dtype.itemsize)


def _bytes_repr(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000  # type: ignore[assignment]
    raise AssertionError  # unreachable


def _count_repr(size: int, nbytes: int) -> str:
    return f"{size:,} ({_bytes_repr(nbytes)})"


def _kind(var: Any) -> str:
    """The column of a Variable: its class name (``RngState`` for random state, as in Flax)."""
    if isinstance(var, RngState):
        return RngState.__name__
    return type(var).__name__ if is_variable(var) else "Array"


def _metadata_repr(value: Any) -> str:
    """A metadata value on one line (``repr``, shortened), whatever its type."""
    text = " ".join(repr(value).split())
    return text if len(text) <= 60 else text[:57] + "..."


def _stats(node: Any) -> tuple[dict[str, tuple[int, int]], dict[str, list[str]]]:
    """Per Variable kind ``(elements, bytes)`` of the node's sub-graph (shared ones once) and
    its own Variables as ``name: dtype[shape]`` lines."""
    totals: dict[str, tuple[int, int]] = {}
    own: dict[str, list[str]] = {}
    sub_objects = [p for p, v in iter_graph(node) if isinstance(v, Pytree) and p]
    flat = graph_state(node).flat_state() if isinstance(node, Pytree) else []
    for path, var in flat:
        kind = _kind(var)
        value = var.raw_value if is_variable(var) else var
        size, nbytes = _size_bytes(value)
        s, b = totals.get(kind, (0, 0))
        totals[kind] = (s + size, b + nbytes)
        if not any(path[: len(p)] == p for p in sub_objects):
            name = "/".join(str(k) for k in path)
            text = _array_repr(value) if hasattr(value, "dtype") else type(value).__name__
            metadata = var.get_metadata(exclude_required=True) if is_variable(var) else {}
            if metadata:  # as Flax: the value and each metadata entry, indented
                lines = [f"{name}:", f"  value: {text}"]
                lines += [f"  {k}: {_metadata_repr(v)}" for k, v in metadata.items()]
                own.setdefault(kind, []).append("\n".join(lines))
            else:
                own.setdefault(kind, []).append(f"{name}: {text}")
    return totals, own


def tabulate(
    obj: Any,
    *input_args: Any,
    depth: int | None = None,
    method: str = "__call__",
    row_filter: Callable[[CallInfo], bool] = filter_rng_streams,
    table_kwargs: Mapping[str, Any] = _NO_OPTIONS,
    column_kwargs: Mapping[str, Any] = _NO_OPTIONS,
    console_kwargs: Mapping[str, Any] = _NO_OPTIONS,
    compute_flops: bool = False,
    compute_vjp_flops: bool = False,
    **input_kwargs: Any,
) -> str:
    """A table summarising ``obj``'s sub-modules, their inputs, outputs and state.

    ``obj.method(*input_args, **input_kwargs)`` runs abstractly (``jax.eval_shape``) on a copy
    of ``obj``: nothing is computed or allocated, and ``obj`` is not changed. One row per
    distinct call; shared Variables and sub-modules count once, at their first path.

    Args:
      obj: the model (its Variables may hold ``jax.ShapeDtypeStruct``, e.g. from
        ``nnx.eval_shape``).
      *input_args, **input_kwargs: the call's arguments (arrays may be
        ``jax.ShapeDtypeStruct``).
      depth: the deepest path length shown (``0``: the model's row only; ``None``: all).
        Counts always cover the whole sub-graph.
      method: the name of the method of ``obj`` to call.
      row_filter: keeps the rows whose ``CallInfo`` it returns True for (default
        ``filter_rng_streams``).
      table_kwargs: extra arguments of ``rich.table.Table``.
      column_kwargs: extra arguments of ``rich.table.Table.add_column``.
      console_kwargs: extra arguments of ``rich.console.Console``; by default as wide as
        the table, ``force_terminal=True`` (colours, as Flax) and ``force_jupyter=False``
        (the text is always returned). ``{'force_terminal': False}`` gives plain text.
      compute_flops: adds a ``flops`` column (each call lowered, not run, and measured by
        XLA's cost analysis).
      compute_vjp_flops: adds a ``vjp_flops`` column (forward and backward pass). Calls
        that cannot be lowered on their own (inside ``vmap``/``scan``) show no FLOPs.

    Returns:
      The table as a string: columns ``path``, ``type``, ``inputs``, ``outputs``, the FLOPs
      columns, then one per Variable kind (sorted; ``RngState`` for random state) with
      ``elements (bytes)`` and the object's own Variables; a ``Total`` row and a caption
      ``Total Parameters: elements (bytes)``.

    Raises:
      AttributeError: ``obj`` has no method ``method``.
      Any error of the call itself, raised by ``obj``'s code.

    Example::

      >>> import jax.numpy as jnp, flaxgraph as nnx
      >>> model = nnx.Linear(3, 4, rngs=nnx.Rngs(0))
      >>> table = nnx.tabulate(model, jnp.ones((2, 3)), console_kwargs={'force_terminal': False})
      >>> print(table.splitlines()[2])
      ┃ path ┃ type   ┃ inputs       ┃ outputs      ┃ Param                ┃
      >>> print(table.splitlines()[-1].strip())
      Total Parameters: 16 (64 B)
    """
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    recorder = _abstract_run(
        obj, method, input_args, dict(input_kwargs), compute_flops, compute_vjp_flops
    )
    nodes = {p: v for p, v in iter_graph(obj) if isinstance(v, Pytree)}
    rows: list[tuple[CallInfo, dict[str, tuple[int, int]], dict[str, list[str]]]] = []
    for record in sorted(recorder.records.values(), key=lambda r: r.order):
        # as Flax: a method other than __call__ adds its name to the row's path
        path = record.path if record.method == "__call__" else (*record.path, record.method)
        if depth is not None and len(path) > depth:
            continue
        node = nodes.get(record.path)
        info = CallInfo(
            call_order=record.order,
            object_id=id(node),
            type=record.type,
            path=path,
            inputs_repr=record.inputs,
            outputs=record.outputs,
            flops=record.flops,
            vjp_flops=record.vjp_flops,
            method=record.method,
        )
        if row_filter(info):
            rows.append((info, *_stats(node)))
    totals, _ = _stats(obj)
    kinds = sorted(totals)

    options = {
        "title": f"{type(obj).__name__} Summary",
        "caption": "\nTotal Parameters: "
        + _count_repr(sum(s for s, _ in totals.values()), sum(b for _, b in totals.values())),
        "show_lines": True,
        **table_kwargs,
    }
    table = Table(**options)
    columns = ["path", "type", "inputs", "outputs"]
    columns += ["flops"] * compute_flops + ["vjp_flops"] * compute_vjp_flops
    for name in columns + kinds:
        table.add_column(name, **dict(column_kwargs))
    for info, counts, own in rows:
        path_text = "/".join(str(k) for k in info.path)
        cells = [path_text, info.type.__name__, info.inputs_repr, _outputs_repr(info.outputs)]
        cells += [_flops_repr(info.flops)] * compute_flops
        cells += [_flops_repr(info.vjp_flops)] * compute_vjp_flops
        for kind in kinds:
            cell = _count_repr(*counts[kind]) if kind in counts else ""
            if own.get(kind):
                cell = "\n".join(own[kind]) + "\n\n" + cell
            cells.append(cell)
        table.add_row(*cells)
    total_row: list[Any] = [""] * (len(columns) - 1) + [Text("Total", justify="right")]
    table.add_row(*total_row, *(_count_repr(*totals[k]) for k in kinds))

    buffer = io.StringIO()
    console = Console(
        file=buffer, **{"force_terminal": True, "force_jupyter": False, **console_kwargs}
    )
    if "width" not in console_kwargs:  # as wide as the table needs, not the terminal
        console.width = 100_000
        console.width = console.measure(table).maximum
    console.print(table)
    return buffer.getvalue()


def _flops_repr(flops: int | None) -> str:
    return "" if flops is None else str(flops)


# -- Flax's records at ``flax.nnx.summary`` -----------------------------------------------

in_ipython = ipython_running()
"""Whether this process runs inside IPython (decided at import, as in Flax)."""


@dataclasses.dataclass
class SizeBytes:
    """A count of array elements and their bytes; adds up, false when empty; ``repr``
    ``'9 [dim](36 B)[/dim]'`` (rich markup)."""

    size: int
    bytes: int

    @classmethod
    def from_array(cls, x: Any) -> SizeBytes:
        """The size of one array (anything with ``shape`` and ``dtype``)."""
        size = math.prod(x.shape)
        return cls(size, size * np.dtype(x.dtype).itemsize)

    @classmethod
    def from_any(cls, x: Any) -> SizeBytes:
        """The total size of the arrays among ``x``'s pytree leaves."""
        total = cls(0, 0)
        for leaf in jax.tree.leaves(x):
            if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
                total = total + cls.from_array(leaf)
        return total

    def __add__(self, other: SizeBytes) -> SizeBytes:
        return type(self)(self.size + other.size, self.bytes + other.bytes)

    def __bool__(self) -> bool:
        return bool(self.size)

    def __repr__(self) -> str:
        return f"{self.size:,} [dim]({_bytes_repr(self.bytes)})[/dim]"


class ObjectInfo(NamedTuple):
    """One object's row data: its path, sizes per Variable type, Variables per type."""

    path: PathParts
    stats: dict[type[Variable[Any]], SizeBytes]
    variable_groups: dict[type[Variable[Any]], dict[Key, Variable[Any]]]


NodeStats = dict[int, ObjectInfo | None]
"""Per object id, its :class:`ObjectInfo` (``None`` while being computed)."""


@dataclasses.dataclass
class ArrayRepr:
    """An array shown by dtype and shape in a table cell: ``'[dim]float32[/dim][2,3]'``."""

    shape: tuple[int, ...]
    dtype: Any

    @classmethod
    def from_array(cls, x: Any) -> ArrayRepr:
        """The record of ``x`` (a JAX or NumPy array)."""
        return cls(jnp.shape(x), jnp.result_type(x))

    def __str__(self) -> str:
        return f"[dim]{self.dtype}[/dim][{','.join(str(d) for d in self.shape)}]"


class SimpleObjectRepr:
    """An object shown by its type only: ``'Linear(...)'``."""

    def __init__(self, obj: Any) -> None:
        self.type = type(obj)

    def __repr__(self) -> str:
        return f"{self.type.__name__}(...)"

    __str__ = __repr__


try:
    import yaml  # type: ignore[import-untyped,unused-ignore]
except ImportError:  # pragma: no cover - PyYAML comes with Flax, not with flaxgraph

    class NoneDumper:
        """Flax's YAML dumper writing ``None`` as ``'None'``; needs PyYAML."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise ModuleNotFoundError("summary.NoneDumper needs PyYAML: pip install pyyaml")

else:

    class NoneDumper(yaml.SafeDumper):  # type: ignore[no-redef,misc,unused-ignore]
        """A YAML ``SafeDumper`` that writes ``None`` as the string ``'None'`` (Flax's
        tables dump call arguments with it)."""

    NoneDumper.add_representer(  # type: ignore[attr-defined]
        type(None), lambda dumper, _: dumper.represent_scalar("tag:yaml.org,2002:str", "None")
    )
