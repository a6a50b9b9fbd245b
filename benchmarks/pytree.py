"""Plain JAX on flaxgraph objects (issue 18): Modules as pytrees, the classic
``split`` + ``jax.jit`` pattern, per-object flatten costs and Ref-backed models.

The model is the MLP of ``benchmarks/transforms.py`` (L tiny layers, width 4), so a
call's time is almost all framework overhead. Timed side by side in one process
(interleaved rounds, medians, ratios per round; see ``benchmarks/common.py``), by
the process's CPU time (``time.process_time``, all threads), which other processes
on a busy machine disturb far less than wall time:

* ``module_train`` / ``module_forward``: ``jax.jit`` applied to the Module itself as
  a pytree (``jax.jit(step)(model, x)``; the train step returns the new model, as
  pure JAX code does), for flaxgraph, Flax NNX and Equinox; the floor is the same
  function on a dict of arrays;
* ``split_train`` / ``split_forward``: the pattern of Flax's performance guide,
  ``graphdef, state = nnx.split(model)`` once, then ``jax.jit`` on
  ``(graphdef, state, x)`` with ``nnx.merge(graphdef, state, copy=False)`` inside,
  the new State carried from call to call (flaxgraph and Flax NNX);
* ``ref_train`` / ``ref_forward``: ``nnx.jit`` on a model whose Variables are
  Ref-backed (``nnx.var_defaults(ref=True)``), against the same floor, with the
  number of general-path calls over the timed calls;
* per-object costs at one L: ``jax.tree.flatten`` / ``jax.tree.unflatten`` of the
  Module (µs per graph object: Modules and Variables for flaxgraph and NNX,
  Modules and arrays for Equinox, arrays for the dict), and
  ``tree_flatten_with_path`` against ``tree_flatten`` of the model's State, and
  ``jax.tree.unflatten`` of it (what the split pattern pays for the State a step
  returns); and
  the steps of the split pattern around one call (``split``, ``merge(copy=False)``,
  ``update`` of the returned State, flatten of the State), per object;
* the floor JAX's pytree protocol sets, per node of a list of 1,000 one-child nodes:
  a slotted class registered with a one-line Python flatten/unflatten (what any
  Python object pays), the same with a C-level flatten (``operator.attrgetter``)
  and an unflatten that builds nothing (JAX's own per-node cost), the C++
  dataclass kind (``register_dataclass``: flatten in C++, unflatten through the
  class's constructor), and JAX's own ``dict`` and ``tuple`` nodes.

Run from the repository root::

  python -m benchmarks.pytree            # L in 1, 8, 64, 256
  python -m benchmarks.pytree --quick    # a few seconds; skips missing comparators

Results are printed as tables and written as JSON to ``benchmarks/results/pytree.json``.
"""

from __future__ import annotations

import operator
import sys
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp

import flaxgraph
from benchmarks.common import (
    Settings,
    base_parser,
    busy_warning,
    environment,
    format_number,
    format_table,
    json_path_from_args,
    measure,
    optional_import,
    paired_ratio,
    settings_from_args,
    write_json,
)
from benchmarks.transforms import (
    FULL_LAYERS,
    LR,
    QUICK_LAYERS,
    eqx_classes,
    inputs,
    jax_mlp,
    jax_train,
    make_arrays,
    nnx_style_classes,
)

WORKLOADS = ("module_train", "module_forward", "split_train", "split_forward")
REF_WORKLOADS = ("ref_train", "ref_forward")
GOAL = 1.2  # issue 18: module pytree and split + jax.jit, at most this x the floor
REF_GOAL = 1.1  # issue 18: a Ref-backed model through nnx.jit
CLOCK = time.process_time


def _loss(model: Any, x: jax.Array) -> jax.Array:
    return jnp.mean(model(x) ** 2)


def _sgd(tree: Any, grads: Any) -> Any:
    return jax.tree.map(lambda p, g: p - LR * g, tree, grads)


def module_pytree(model: Any, workload: str, x: jax.Array) -> Callable[[], Any]:
    """``jax.jit`` on the module as a pytree (any library whose modules are pytrees
    of arrays: flaxgraph, Flax NNX >= 0.11, Equinox)."""
    if workload == "module_forward":
        forward = jax.jit(lambda m, x: m(x))
        return lambda: forward(model, x)

    @jax.jit
    def train(m: Any, x: jax.Array) -> tuple[jax.Array, Any]:
        loss, grads = jax.value_and_grad(_loss)(m, x)
        return loss, _sgd(m, grads)

    box = [model]

    def step() -> Any:
        loss, box[0] = train(box[0], x)
        return loss

    return step


def split_pattern(lib: ModuleType, model: Any, workload: str, x: jax.Array) -> Callable[[], Any]:
    """``split`` once, ``jax.jit`` on ``(graphdef, state)``, the State carried."""
    graphdef, state = lib.split(model)

    if workload == "split_forward":

        @jax.jit
        def forward(graphdef: Any, state: Any, x: jax.Array) -> jax.Array:
            return lib.merge(graphdef, state, copy=False)(x)

        return lambda: forward(graphdef, state, x)

    @jax.jit
    def train(graphdef: Any, state: Any, x: jax.Array) -> tuple[jax.Array, Any]:
        m = lib.merge(graphdef, state, copy=False)
        loss, grads = lib.value_and_grad(_loss)(m, x)
        params = lib.state(m, lib.Param)
        lib.update(m, _sgd(params, grads))
        return loss, lib.state(m)

    box = [state]

    def step() -> Any:
        loss, box[0] = train(graphdef, box[0], x)
        return loss

    return step


def floor(workload: str, arrays: Any, x: jax.Array) -> Callable[[], Any]:
    """The same computation on a dict of arrays with plain ``jax.jit``."""
    params = {"layers": list(arrays)}
    if workload.endswith("forward"):
        forward = jax.jit(jax_mlp)
        return lambda: forward(params, x)
    train = jax.jit(jax_train)
    box = [params]

    def step() -> Any:
        loss, box[0] = train(box[0], x)
        return loss

    return step


def ref_model_step(workload: str, arrays: Any, x: jax.Array) -> tuple[Callable[[], Any], Any]:
    """``nnx.jit`` on a Ref-backed flaxgraph model: ``(step, transformed function)``."""
    nnx = flaxgraph
    _, mlp_cls = nnx_style_classes(nnx)
    with nnx.var_defaults(ref=True):
        model = mlp_cls(arrays)
    if workload == "ref_forward":
        forward = nnx.jit(lambda m, x: m(x))
        return (lambda: forward(model, x)), forward

    @nnx.jit
    def train(m: Any, x: jax.Array) -> jax.Array:
        loss, grads = nnx.value_and_grad(_loss)(m, x)
        nnx.update(m, _sgd(nnx.state(m, nnx.Param), grads))
        return loss

    return (lambda: train(model, x)), train


def blocking(fn: Callable[[], Any]) -> Callable[[], Any]:
    return lambda: jax.block_until_ready(fn())


def contenders(
    workload: str, num_layers: int, nnx: ModuleType | None, eqx: ModuleType | None
) -> dict[str, Callable[[], Any]]:
    """name -> timed call for one workload and L."""
    arrays = make_arrays(num_layers)
    x = inputs()["x"]
    calls: dict[str, Callable[[], Any]] = {"jax": floor(workload, arrays, x)}
    libs = [("flaxgraph", flaxgraph)] + ([("nnx", nnx)] if nnx is not None else [])
    for name, lib in libs:
        model = nnx_style_classes(lib)[1](arrays)
        if workload.startswith("module"):
            calls[name] = module_pytree(model, workload, x)
        else:
            calls[name] = split_pattern(lib, model, workload, x)
    if eqx is not None and workload.startswith("module"):
        calls["eqx"] = module_pytree(eqx_classes(eqx)[1](arrays), workload, x)
    return {k: blocking(v) for k, v in calls.items()}


def run_workloads(
    layers: Sequence[int], settings: Settings, nnx: Any, eqx: Any
) -> list[dict[str, Any]]:
    """Times every workload at every L; one record per (workload, L)."""
    records = []
    for workload in WORKLOADS:
        for num_layers in layers:
            calls = contenders(workload, num_layers, nnx, eqx)
            timings = measure(calls, settings, CLOCK)
            ratios = {k: paired_ratio(t, timings["jax"]) for k, t in timings.items() if k != "jax"}
            records.append(
                {
                    "workload": workload,
                    "layers": num_layers,
                    "floor_us": timings["jax"].median * 1e6,
                    "ratios": ratios,
                }
            )
    for workload in REF_WORKLOADS:
        for num_layers in layers:
            arrays = make_arrays(num_layers)
            x = inputs()["x"]
            step, transformed = ref_model_step(workload, arrays, x)
            calls = {"jax": blocking(floor(workload, arrays, x)), "flaxgraph": blocking(step)}
            before = transformed.cache_info().general_calls
            timings = measure(calls, settings, CLOCK)
            info = transformed.cache_info()
            records.append(
                {
                    "workload": workload,
                    "layers": num_layers,
                    "floor_us": timings["jax"].median * 1e6,
                    "ratios": {"flaxgraph": paired_ratio(timings["flaxgraph"], timings["jax"])},
                    "general_calls_after_first": info.general_calls - before,
                    "calls": sum(timings["flaxgraph"].number for _ in timings["flaxgraph"].samples),
                }
            )
    return records


def per_object(num_layers: int, settings: Settings, nnx: Any, eqx: Any) -> dict[str, Any]:
    """µs per object of flatten / unflatten (Modules), flatten_with_path / flatten
    (States) and the split pattern's steps, at one L."""
    arrays = make_arrays(num_layers)
    fg_model = nnx_style_classes(flaxgraph)[1](arrays)
    objects = 3 * num_layers + 1
    trees: dict[str, tuple[Any, int]] = {
        "flaxgraph": (fg_model, objects),
        "dict": ({"layers": list(arrays)}, 2 * num_layers),
    }
    if nnx is not None:
        trees["nnx"] = (nnx_style_classes(nnx)[1](arrays), objects)
    if eqx is not None:
        trees["eqx"] = (eqx_classes(eqx)[1](arrays), 3 * num_layers + 1)
    calls: dict[str, Callable[[], Any]] = {}
    for name, (tree, _) in trees.items():
        leaves, treedef = jax.tree.flatten(tree)
        calls[f"flatten/{name}"] = lambda t=tree: jax.tree.flatten(t)
        calls[f"unflatten/{name}"] = lambda d=treedef, v=leaves: jax.tree.unflatten(d, v)
    states = {"flaxgraph": flaxgraph.state(fg_model)}
    if nnx is not None:
        states["nnx"] = nnx.state(trees["nnx"][0])
    for name, state in states.items():
        state_leaves, state_treedef = jax.tree.flatten(state)
        calls[f"state_flatten/{name}"] = lambda s=state: jax.tree.flatten(s)
        calls[f"state_unflatten/{name}"] = lambda d=state_treedef, v=state_leaves: (
            jax.tree.unflatten(d, v)
        )
        calls[f"state_flatten_with_path/{name}"] = lambda s=state: (
            jax.tree_util.tree_flatten_with_path(s)
        )
    graphdef, state = flaxgraph.split(fg_model)
    calls["split/flaxgraph"] = lambda: flaxgraph.split(fg_model)
    calls["merge_nocopy/flaxgraph"] = lambda: flaxgraph.merge(graphdef, state, copy=False)
    calls["update/flaxgraph"] = lambda: flaxgraph.update(fg_model, state)
    timings = measure(calls, settings, CLOCK)
    counts = {name: n for name, (_, n) in trees.items()}
    out: dict[str, Any] = {"layers": num_layers, "us_per_object": {}, "ratios": {}}
    for key, t in timings.items():
        _, name = key.split("/")
        n = counts.get(name, objects)
        out["us_per_object"][key] = t.median * 1e6 / n
    for name in states:
        out["ratios"][f"with_path/flatten {name}"] = paired_ratio(
            timings[f"state_flatten_with_path/{name}"], timings[f"state_flatten/{name}"]
        )
    return out


class _PyNode:
    """A one-child node with a one-line Python flatten and unflatten."""

    __slots__ = ("value", "meta")


class _BareNode:
    """Flattened by a C-level callable; unflattened to a constant: JAX's own cost."""

    __slots__ = ("children", "keyed", "meta")


class _DataclassNode:
    """JAX's C++ dataclass kind: flatten in C++, unflatten calls the constructor."""

    __slots__ = ("value", "meta")

    def __init__(self, value: Any, meta: Any):
        self.value = value
        self.meta = meta


def _py_unflatten(meta: Any, children: Any) -> _PyNode:
    node = object.__new__(_PyNode)
    node.meta = meta
    node.value = children[0]
    return node


jax.tree_util.register_pytree_with_keys(
    _PyNode,
    lambda n: (((jax.tree_util.GetAttrKey("value"), n.value),), n.meta),
    _py_unflatten,
    lambda n: ((n.value,), n.meta),
)
jax.tree_util.register_pytree_with_keys(
    _BareNode,
    operator.attrgetter("keyed", "meta"),
    lambda meta, children: None,
    operator.attrgetter("children", "meta"),
)
jax.tree_util.register_dataclass(_DataclassNode, data_fields=["value"], meta_fields=["meta"])


def protocol_floor(settings: Settings, nodes: int = 1000) -> dict[str, dict[str, float]]:
    """µs per node of flatten / unflatten / flatten_with_path for lists of ``nodes``
    one-child nodes of each kind (see the module docstring)."""
    meta = {"kind": "param"}
    key = jax.tree_util.GetAttrKey("value")
    py, bare, dc = [], [], []
    for i in range(nodes):
        p = object.__new__(_PyNode)
        p.value, p.meta = i, meta
        b = object.__new__(_BareNode)
        b.children, b.keyed, b.meta = (i,), ((key, i),), meta
        py.append(p)
        bare.append(b)
        dc.append(_DataclassNode(i, meta))
    trees = {
        "python node": py,
        "C-level flatten": bare,
        "dataclass kind": dc,
        "dict": [{"value": i} for i in range(nodes)],
        "tuple": [(i,) for i in range(nodes)],
    }
    calls: dict[str, Callable[[], Any]] = {}
    for name, tree in trees.items():
        leaves, treedef = jax.tree.flatten(tree)
        calls[f"{name}/flatten"] = lambda t=tree: jax.tree.flatten(t)
        calls[f"{name}/unflatten"] = lambda d=treedef, v=leaves: jax.tree.unflatten(d, v)
        calls[f"{name}/with_path"] = lambda t=tree: jax.tree_util.tree_flatten_with_path(t)
    timings = measure(calls, settings, CLOCK)
    out: dict[str, dict[str, float]] = {}
    for key_name, t in timings.items():
        name, op = key_name.split("/")
        out.setdefault(name, {})[op] = t.median * 1e6 / nodes
    for row in out.values():
        row["with_path/flatten"] = row["with_path"] / row["flatten"]
    return out


def report(
    records: Sequence[dict[str, Any]],
    objects: dict[str, Any],
    floor_rows: dict[str, dict[str, float]] | None = None,
) -> str:
    """The printed tables."""
    names = ["flaxgraph", "nnx", "eqx"]
    lines = []
    by = {(r["workload"], r["layers"]): r for r in records}
    layers = sorted({r["layers"] for r in records})
    rows = []
    for workload in WORKLOADS + REF_WORKLOADS:
        for name in names:
            cells = [by[(workload, n)]["ratios"].get(name) for n in layers]
            if any(c is not None for c in cells):
                goal = REF_GOAL if workload.startswith("ref") else GOAL
                ok = all(c is not None and c <= goal for c in cells)
                rows.append(
                    [f"{workload} {name}", *(format_number(c) for c in cells), f"<= {goal}"]
                    + (["ok" if ok else "over"] if name == "flaxgraph" else [""])
                )
    lines.append("Per call, x the floor (plain jax.jit on a dict of arrays):")
    lines.append(format_table(["workload", *(f"L={n}" for n in layers), "goal", ""], rows))
    general = [
        f"{r['workload']} L={r['layers']}: {r['general_calls_after_first']} general calls"
        for r in records
        if "general_calls_after_first" in r
    ]
    lines.append("Ref-backed model, nnx.jit general-path calls while timed: " + "; ".join(general))
    lines.append(f"\nPer object at L={objects['layers']} (µs):")
    rows = [[k, format_number(v, 3)] for k, v in objects["us_per_object"].items()]
    rows += [[k, format_number(v)] for k, v in objects["ratios"].items()]
    lines.append(format_table(["operation", "µs/object or ratio"], rows))
    if floor_rows:
        lines.append("\nJAX's pytree protocol, µs per node (lists of 1,000 one-child nodes):")
        ops = ["flatten", "unflatten", "with_path", "with_path/flatten"]
        rows = [[name, *(format_number(r[op], 3) for op in ops)] for name, r in floor_rows.items()]
        lines.append(format_table(["node", *ops], rows))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0], "pytree.json")
    args = parser.parse_args(argv)
    settings = settings_from_args(args)
    nnx_mod = optional_import("flax.nnx", required=not args.quick)
    eqx_mod = optional_import("equinox", required=not args.quick)
    layers = QUICK_LAYERS if args.quick else FULL_LAYERS
    warning = busy_warning()
    if warning:
        print(warning, file=sys.stderr)
    records = run_workloads(layers, settings, nnx_mod, eqx_mod)
    objects = per_object(max(layers), settings, nnx_mod, eqx_mod)
    floor_rows = protocol_floor(settings)
    print(report(records, objects, floor_rows))
    path = write_json(
        json_path_from_args(args),
        {
            "environment": environment(),
            "records": records,
            "per_object": objects,
            "protocol_floor": floor_rows,
        },
    )
    print(f"\nwritten to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
