"""A fast-path plan as straight-line Python: the per-call checks and reads of one
``Plan`` written out as a function, so that a repeated call costs a few attribute
reads and comparisons instead of loops over the plan's lists.

For a model of two Linear layers called as ``step(model, x)`` the generated
function reads like::

  def run(args, kwargs, statics):
      if len(args) != 2: return MISS
      if statics is not S and statics != S: return MISS
      if kwargs: return MISS
      if args[0] is not C1: return MISS            # the same model object
      if type(args[1]) is not C2: return MISS      # x is still an array
      if _ctx.trace._weakref is not TRACE: return MISS
      if C3._obj_version != 0 or C4._obj_version != 0 or ...: return MISS
      if (C6.<METADATA_SLOT> is not C7 or ...) and _list(_map(_getm, VARS)) != METAS: return MISS
      if len(C8) != 2 or C8[0] is not C9 or C8[1] is not C10: return MISS
      values = [C11.raw_value, C12.raw_value, ..., args[1]]
      out_static, out_groups = COMPILED(values, [])
      return FINISH(PLAN, out_static.value, out_groups, values)

Large graphs (more than ``UNROLL`` items of a kind) use C-level ``map`` calls
instead of one comparison per item. The source is kept on the plan
(``plan.source``) for debugging. Only identifiers made here and integer literals
enter the source; every object is reached through the function's namespace.

Source: ``docs/design.md``, "The fast path" (the compiled per-structure plan).
"""

from __future__ import annotations

import enum
import itertools
import keyword
import operator
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

from flaxgraph.graphlib.snapshot import ArrayItem, StructureSnapshot, TupleItem, same_item
from flaxgraph.tracing import trace_ctx
from flaxgraph.transforms.compiled import OutStaticChanged
from flaxgraph.transforms.leaf_access import (
    get_raw,
    get_ref_content,
    is_argument_leaf,
    level_treedef,
)
from flaxgraph.transforms.lift import IN, LeafSource, OutStatic
from flaxgraph.transforms.ref_writes import RefInstall
from flaxgraph.variablelib.variable import METADATA_SLOT, Variable, metadata_of

UNROLL = 24  # up to this many items of a kind get one comparison each


class Plan(Protocol):
    """What the generated function reads of a fast-path plan (``fastpath.Plan``, which
    imports this module, so it is named here by the members used)."""

    snapshot: StructureSnapshot
    trace: Any
    compiled: Any
    members: Any
    getters: Any
    targets: Any
    arg_checks: Any
    arg_leaves: Any
    attribute_parents: Any
    leaf_variables: Any
    kwarg_names: Any
    n_args: int
    statics: Any
    passthrough: Any
    run: Callable[..., Any]
    source: str
    last_out: OutStatic | None
    last_finish: BoundFinish | None


class VariableWrites(NamedTuple):
    """Input Variables whose new values all come from one output group, set with one
    C-level ``map``: ``targets[k].raw_value = out_groups[group][positions[k]]``."""

    targets: list[Variable]
    positions: list[int]
    group: int


class OtherWrite(NamedTuple):
    """A write that is not a plain Variable's value (an array attribute, a list item,
    a box-backed Variable): ``write(value of source)``."""

    source: LeafSource
    write: Callable[[Any], None]


class BoundFinish(NamedTuple):
    """A ``FinishPlan`` bound to one plan's objects (``FinishPlan.bind``).

    Attributes:
      var_writes: the Variables' new values, grouped by output group.
      other_writes: the other writes (array attributes, list items, boxes).
      output: ``(in_values, out_groups) -> output`` (``FinishPlan.output_reader``).
      installs: the new arrays of Ref-backed Variables (``RefInstall``), or ``None``.
      apply: ``(in_values, out_groups) -> output``: all of the above, generated
        from the one write-back template (``_write_back``, which a plan's ``run``
        also inlines); ``None`` until ``with_apply``.
    """

    var_writes: list[VariableWrites]
    other_writes: list[OtherWrite]
    output: Callable[[list[Any], Sequence[Sequence[Any]]], Any]
    installs: RefInstall | None
    apply: Callable[[list[Any], Sequence[Sequence[Any]]], Any] | None = None

    def with_apply(self) -> BoundFinish:
        """This write-back with its ``apply`` function generated."""
        src = _Source(_namespace_of_write_back(), "def apply(values, out_groups):")
        _write_back(src, self)
        source = "\n".join(src.lines) + "\n"
        exec(compile(source, f"<flaxgraph write-back {id(self):#x}>", "exec"), src.namespace)
        return self._replace(apply=src.namespace["apply"])


class CheckKind(enum.Enum):
    """What an argument check of a plan compares (``fastpath.ArgCheck``; its
    ``expected`` per kind is documented there)."""

    IS = "is"  # the same object
    TYPE = "type"  # a leaf of that type
    ITEMS = "items"  # a list, tuple or dict of that type with those keys or length
    PYTREE = "pytree"  # an attribute pytree of that type and one-level structure


MISS: Any = object()  # what run returns when the plan does not apply (None is an output)


class _Source:
    """The lines of the generated function and the objects they name."""

    def __init__(self, namespace: dict[str, Any], header: str = "def run(args, kwargs, statics):"):
        self.lines = [header]
        self.namespace = namespace

    def const(self, value: Any) -> str:
        name = f"C{len(self.namespace)}"
        self.namespace[name] = value
        return name

    def miss_if(self, conditions: list[str]) -> None:
        """One ``if ...: return MISS`` per chunk of conditions (readable lines)."""
        for i in range(0, len(conditions), 8):
            self.lines.append(f"    if {' or '.join(conditions[i : i + 8])}: return MISS")

    def line(self, text: str) -> None:
        self.lines.append(f"    {text}")


def compile_run(
    plan: Plan,
    finish: Callable[..., Any],
    last_out: OutStatic | None = None,
    bound: BoundFinish | None = None,
) -> tuple[Callable[..., Any], str]:
    """``(run, source)``: the fast path of ``plan`` as one generated function (see the
    module docstring); it returns ``MISS`` when the plan does not apply.

    The write-back is ``finish(plan, out_static, out_groups, values)``, unless a
    write-back ``bound`` to the plan's objects (``FinishPlan.bind``) is given for the
    ``OutStatic`` ``last_out``: it is then written out too, for calls that return
    that same ``OutStatic`` (the usual case: one per structure and shapes).
    """
    src = _Source(_namespace(plan, finish))
    _signature_checks(src, plan)
    _structure_checks(src, plan.snapshot)
    _leaf_reads(src, plan)
    _call_and_finish(src, plan, last_out if bound is not None else None, bound)
    source = "\n".join(src.lines) + "\n"
    exec(compile(source, f"<flaxgraph plan {id(plan):#x}>", "exec"), src.namespace)
    return src.namespace["run"], source


def _namespace(plan: Plan, finish: Callable[..., Any]) -> dict[str, Any]:
    """The names the generated function reads (every object enters through here)."""
    return {
        "MISS": MISS,
        "S": plan.statics,
        "TRACE": plan.trace,
        "PLAN": plan,
        "COMPILED": plan.compiled.fn,
        "CHANGED": OutStaticChanged,
        "RETRY": _retry,
        "FINISH": finish,
        "_ctx": trace_ctx,
        "_list": list,
        "_map": map,
        "_all": all,
        "_tuple": tuple,
        "_chain": itertools.chain,
        "_values": dict.values,
        "_is": operator.is_,
        "_level": level_treedef,
        "_leaf": is_argument_leaf,
        "_getattr": getattr,
        "_same": same_item,
        "_call": operator.call,
        "_getv": operator.attrgetter("_obj_version"),
        "_getm": metadata_of,
        "_getr": operator.attrgetter("raw_value"),
        "_set_raw": Variable.raw_value.__set__,  # type: ignore[attr-defined]
    }


def _namespace_of_write_back() -> dict[str, Any]:
    """The names a generated write-back reads besides its objects."""
    return {"_list": list, "_map": map, "_set_raw": Variable.raw_value.__set__}  # type: ignore[attr-defined]


def _signature_checks(src: _Source, plan: Plan) -> None:
    """The call's signature: the same objects, leaves of the same types."""
    const = src.const
    src.line(f"if len(args) != {plan.n_args}: return MISS")
    src.line("if statics is not S and statics != S: return MISS")
    if not plan.kwarg_names:
        src.line("if kwargs: return MISS")
    else:
        src.line(f"if kwargs.keys() != {const(plan.kwarg_names)}: return MISS")
    # Containers before their items, so each access below is safe once reached.
    conditions = []
    attrs = plan.attribute_parents
    for check in plan.arg_checks:
        access = _access(check.root, check.keys, const, attrs)
        kind, expected = check.kind, check.expected
        if kind is CheckKind.IS:
            conditions.append(f"{access} is not {const(expected)}")
        elif kind is CheckKind.TYPE:
            # Another leaf type (a NumPy array for a jax.Array) is still a leaf.
            conditions.append(f"(type({access}) is not {const(expected)} and not _leaf({access}))")
        elif kind is CheckKind.PYTREE:
            t, treedef = expected
            conditions.append(f"type({access}) is not {const(t)}")
            conditions.append(f"_level({access}) != {const(treedef)}")
        else:
            t, items = expected
            conditions.append(f"type({access}) is not {const(t)}")
            if t is dict:
                conditions.append(f"_tuple({access}) != {const(items)}")
            else:
                conditions.append(f"len({access}) != {items}")
    src.miss_if(conditions)
    src.line("if _ctx.trace._weakref is not TRACE: return MISS")


def _structure_checks(src: _Source, snap: StructureSnapshot) -> None:
    """The structure: Objects' versions, Variables' metadata, lists' and dicts' items
    (graphlib/snapshot.py)."""
    const = src.const
    if len(snap.objects) <= UNROLL:
        src.miss_if(
            [f"{const(o)}._obj_version != {v}" for o, v in zip(snap.objects, snap.versions)]
        )
    else:
        objs, versions = const(snap.objects), const(snap.versions)
        src.line(f"if _list(_map(_getv, {objs})) != {versions}: return MISS")
    if snap.variables:
        full = f"_list(_map(_getm, {const(snap.variables)})) != {const(snap.metadata)}"
        if len(snap.variables) <= UNROLL:
            # Identity is the common case; an equal replacement dict is still the same
            # structure (the full comparison decides).
            quick = " or ".join(
                f"{const(v)}.{METADATA_SLOT} is not {const(m)}"
                for v, m in zip(snap.variables, snap.metadata)
            )
            src.line(f"if ({quick}) and {full}: return MISS")
        else:
            src.line(f"if {full}: return MISS")
    _container_checks(src, snap)


def _leaf_reads(src: _Source, plan: Plan) -> None:
    """The leaves' current values, in the order the compiled function takes them."""
    const = src.const
    attrs = plan.attribute_parents
    arg_at = {a.position: _access(a.root, a.keys, const, attrs) for a in plan.arg_leaves}
    n_leaves = len(plan.getters)
    if plan.leaf_variables is not None and n_leaves <= 4 * UNROLL:
        variables = iter(plan.leaf_variables)
        items = [
            arg_at.get(pos) or f"{const(next(variables))}.raw_value" for pos in range(n_leaves)
        ]
        src.line(f"values = [{', '.join(items)}]")
    elif plan.leaf_variables is not None:
        src.line(f"values = _list(_map(_getr, {const(plan.leaf_variables)}))")
        for pos in sorted(arg_at):
            src.line(f"values.insert({pos}, {arg_at[pos]})")
    elif n_leaves <= 4 * UNROLL:  # e.g. Ref-backed Variables: each read written out
        items = [
            arg_at.get(pos) or _read(getter, target, const)
            for pos, (getter, target) in enumerate(zip(plan.getters, plan.targets))
        ]
        src.line(f"values = [{', '.join(items)}]")
    else:
        src.line(f"values = _list(_map(_call, {const(plan.getters)}, {const(plan.targets)}))")
        for pos in sorted(arg_at):
            src.line(f"values[{pos}] = {arg_at[pos]}")


def _call_and_finish(
    src: _Source, plan: Plan, last_out: OutStatic | None, bound: BoundFinish | None
) -> None:
    """The call of the compiled function and the write-back (``bound`` written out
    for calls returning ``last_out``)."""
    const = src.const
    if plan.passthrough:
        groups = ", ".join(["values"] + ["[]"] * (len(plan.members) - 1))
    else:
        src.line("get = values.__getitem__")
        groups = ", ".join(f"_list(_map(get, {const(m)}))" for m in plan.members)
    if plan.compiled.with_static:
        src.line(f"out_static, out_groups = COMPILED({groups})")
        src.line("out = out_static.value")
        if last_out is not None:
            src.namespace["LAST"] = last_out
            src.line("if out is not LAST: return FINISH(PLAN, out, out_groups, values)")
    else:
        # The compiled function's traces all returned OUT (see compiled.py); a new
        # trace that disagrees raises CHANGED, and the call goes the general way.
        src.namespace["OUT"] = plan.compiled.out_static
        src.line("try:")
        src.line(f"    out_groups = COMPILED({groups})")
        src.line("except CHANGED:")
        src.line("    return RETRY(PLAN, FINISH, args, kwargs, statics)")
        src.line("out = OUT")
        if last_out is not plan.compiled.out_static:
            bound = None
    if last_out is None or bound is None:
        src.line("return FINISH(PLAN, out, out_groups, values)")
    else:
        _write_back(src, bound)


def _read(getter: Any, target: Any, const: Callable[[Any], str]) -> str:
    """The expression reading one leaf (``getter(target)``), attribute reads inline."""
    if getter is get_raw:
        return f"{const(target)}.raw_value"
    if getter is get_ref_content:
        return f"{const(target)}._refs._buf"
    return f"{const(getter)}({const(target)})"


def _access(
    root: int,
    keys: tuple[Any, ...],
    const: Callable[[Any], str],
    attribute_parents: frozenset[tuple[int, tuple[Any, ...]]] = frozenset(),
) -> str:
    """The expression reaching an argument's item: ``args[1][C3]`` (integer keys as
    literals, others through the namespace), ``args[2].tokens`` below an attribute
    pytree (a dataclass)."""
    text = "args" if root == 0 else "kwargs"
    for i, k in enumerate(keys):
        if (root, keys[:i]) in attribute_parents:
            plain = k.isidentifier() and not keyword.iskeyword(k)
            text = f"{text}.{k}" if plain else f"_getattr({text}, {const(k)})"
        else:
            text += f"[{k}]" if type(k) is int else f"[{const(k)}]"
    return text


def _retry(
    plan: Plan,
    finish: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    statics: Any,
) -> Any:
    """The call after the plan's compiled function switched to returning its
    ``OutStatic`` (see compiled.py): the plan's function is generated again for
    that form, and runs the call (nothing was done yet)."""
    if not plan.compiled.with_static:
        plan.compiled.switch()
    plan.run, plan.source = compile_run(plan, finish, plan.last_out, plan.last_finish)
    return plan.run(args, kwargs, statics)


def miss_always(args: tuple[Any, ...], kwargs: dict[str, Any], statics: Any) -> Any:
    """A ``run`` for a plan without generated code: never applies."""
    return MISS


def _install_refs(src: _Source, installs: RefInstall) -> None:
    """The lines installing the new arrays of Ref-backed Variables (a ``RefInstall``):
    written out when the Refs' boxes are reachable and there are few, else a call."""
    const = src.const
    if installs.direct is None or len(installs.checks) > UNROLL:
        src.line(f"{const(installs)}(out_groups)")
        return
    checks = []
    for i, w in enumerate(installs.checks):
        src.line(f"r{i} = out_groups[{w.group}][{w.position}]")
        checks.append(f"r{i}.shape != {const(w.shape)} or r{i}.dtype != {const(w.dtype)}")
    # A value that does not fit: the RefInstall raises, naming the Variable (nothing
    # has been written yet).
    for i in range(0, len(checks), 4):
        src.line(f"if {' or '.join(checks[i : i + 4])}: {const(installs)}(out_groups)")
    for i, box in enumerate(installs.direct):
        src.line(f"{const(box)}._buf = r{i}")


def _value_of(source: LeafSource) -> str:
    """The expression of a leaf's value in the generated function."""
    if source.origin == IN:
        return f"values[{source.at}]"
    return f"out_groups[{source.at}][{source.position}]"


def _write_back(src: _Source, bound: BoundFinish) -> None:
    """The lines writing the outputs of a call that returned the ``OutStatic`` the
    write-back ``bound`` was made for."""
    const = src.const
    if bound.installs is not None:  # Ref-backed Variables: all checked, then installed
        _install_refs(src, bound.installs)
    for w in bound.var_writes:
        if len(w.targets) <= UNROLL:
            for t, p in zip(w.targets, w.positions):
                src.line(f"_set_raw({const(t)}, out_groups[{w.group}][{p}])")
        else:
            src.line(
                f"_list(_map(_set_raw, {const(w.targets)}, "
                f"_map(out_groups[{w.group}].__getitem__, {const(w.positions)})))"
            )
    for other in bound.other_writes:
        src.line(f"{const(other.write)}({_value_of(other.source)})")
    single = getattr(bound.output, "source", None)  # a one-leaf output: its source
    if single is not None:
        src.line(f"return {_value_of(single)}")
    else:
        src.line(f"return {const(bound.output)}(values, out_groups)")


def _item_check(src: _Source, access: str, key: Any) -> str:
    """The condition that the list or dict item at ``access`` no longer matches its
    snapshot ``key`` (graphlib/snapshot.py: arrays by type, the rest by identity)."""
    if type(key) is ArrayItem:
        return f"type({access}) is not {src.const(key.type)}"
    if type(key) is TupleItem:
        return f"not _same({access}, {src.const(key)})"
    return f"{access} is not {src.const(key)}"


def _container_checks(src: _Source, snap: StructureSnapshot) -> None:
    """The checks that the lists and dicts inside the graph hold the same items."""
    const = src.const
    if len(snap.lists) <= UNROLL:
        for c, items in zip(snap.lists, snap.list_items):
            name = const(c)
            if len(items) <= UNROLL:
                src.miss_if(
                    [f"len({name}) != {len(items)}"]
                    + [_item_check(src, f"{name}[{j}]", x) for j, x in enumerate(items)]
                )
            else:
                src.miss_if(
                    [
                        f"len({name}) != {len(items)}",
                        f"not _all(_map(_same, {name}, {const(items)}))",
                    ]
                )
    else:  # many lists: their lengths, then all their items in one pass
        lengths = [len(items) for items in snap.list_items]
        all_items = [x for list_items in snap.list_items for x in list_items]
        lists = const(snap.lists)
        src.miss_if(
            [
                f"_list(_map(len, {lists})) != {const(lengths)}",
                f"not _all(_map(_same, _chain(*{lists}), {const(all_items)}))",
            ]
        )
    if len(snap.dicts) <= UNROLL:
        for d, (keys, values) in zip(snap.dicts, snap.dict_items):
            name = const(d)
            src.miss_if(
                [
                    f"len({name}) != {len(keys)}",
                    f"_tuple({name}) != {const(keys)}",
                    f"not _all(_map(_same, {name}.values(), {const(values)}))",
                ]
            )
    else:  # many dicts: their keys, then all their values in one pass
        all_keys = [k for dict_keys, _ in snap.dict_items for k in dict_keys]
        all_values = [v for _, dict_values in snap.dict_items for v in dict_values]
        dicts = const(snap.dicts)
        lengths = [len(dict_keys) for dict_keys, _ in snap.dict_items]
        src.miss_if(
            [
                f"_list(_map(len, {dicts})) != {const(lengths)}",
                f"_list(_chain(*{dicts})) != {const(all_keys)}",
                f"not _all(_map(_same, _chain(*_map(_values, {dicts})), {const(all_values)}))",
            ]
        )
