"""A fast-path plan as straight-line Python: one template per step (signature, structure,
reads, call, write-back), objects entering only through the namespace under named
constants and ``FixedNames`` (``python -m flaxgraph.transforms.explain`` prints one).

Source: ``docs/design.md``, "The fast path" (the compiled per-structure plan).
"""

from __future__ import annotations

import itertools
import keyword
import operator
from collections.abc import Callable, Iterable
from typing import Any, TypedDict

import jax

from flaxgraph.graphlib.snapshot import ArrayItem, StructureSnapshot, TupleItem, same_item
from flaxgraph.graphlib.walk import argument_leaf
from flaxgraph.tracing import trace_ctx
from flaxgraph.transforms.compiled import OutStaticChanged
from flaxgraph.transforms.donation import (
    ReadOnlyDonated,
    copy_held,
    copy_repeats,
    has_repeats,
    unheld,
)
from flaxgraph.transforms.leaf_access import (
    get_raw,
    get_ref_content,
    level_treedef,
)
from flaxgraph.transforms.lift import IN, LeafSource, OutStatic
from flaxgraph.transforms.plan import MISS, BoundFinish, CheckKind, Plan, miss_always
from flaxgraph.variablelib.variable import (
    METADATA_SLOT,
    Variable,
    mark_fresh,
    metadata_of,
    read_slot,
    write_slot,
)

UNROLL = 24  # up to this many items of a kind get one comparison each


class _Source:
    """The lines of the generated function and the objects they name."""

    def __init__(self, namespace: dict[str, Any], header: str = "def run(args, kwargs, statics):"):
        self.lines = [header]
        self.namespace = namespace
        self.names: dict[int, str] = {}  # id of a constant -> its name

    def build(self, label: str, name: str, target: object) -> tuple[Any, str]:
        """``(function, source)``: the lines compiled, and the function ``name`` they define."""
        source = "\n".join(self.lines) + "\n"
        exec(compile(source, f"<flaxgraph {label} {id(target):#x}>", "exec"), self.namespace)
        return self.namespace[name], source

    def const(self, value: Any, role: str | None = None) -> str:
        """A name for ``value`` in the namespace: its ``role`` or type in snake case and a
        number (``linear_3``, ``arrayimpl_type_9``)."""
        name = self.names.get(id(value))
        if name is None:  # one name per object (the namespace keeps it alive)
            name = f"{_snake(role or _role_of(value))}_{len(self.names) + 1}"
            self.names[id(value)] = name
            self.namespace[name] = value
        return name

    def miss_if(self, conditions: list[str]) -> None:
        """One ``if ...: return MISS`` per chunk of conditions (readable lines)."""
        for i in range(0, len(conditions), 8):
            self.lines.append(f"    if {' or '.join(conditions[i : i + 8])}: return MISS")

    def line(self, text: str) -> None:
        self.lines.append(f"    {text}")


def _role_of(value: Any) -> str:
    """A constant's default name: a class's name and ``type``, else its type's name."""
    if isinstance(value, type):
        return f"{value.__name__}_type"
    return type(value).__name__


def _snake(name: str) -> str:
    """``name`` as a lower-case identifier (``ArrayImpl`` -> ``arrayimpl``)."""
    text = "".join(c if c.isalnum() else "_" for c in name.lower()).strip("_") or "k"
    return f"k_{text}" if text[0].isdigit() or keyword.iskeyword(text) else text


def compile_run(
    plan: Plan,
    finish: Callable[..., Any],
    last_out: OutStatic | None = None,
    bound: BoundFinish | None = None,
) -> tuple[Callable[..., Any], str]:
    """``(run, source)``: the fast path of ``plan`` as one function (``MISS``: no match);
    the write-back is ``finish(...)``, or ``bound`` written out for calls returning ``last_out``."""
    src = _Source(_namespace(plan, finish))
    _signature_checks(src, plan)
    _structure_checks(src, plan.snapshot)
    _leaf_reads(src, plan)
    _donation_copies(src, plan)
    _call_and_finish(src, plan, last_out if bound is not None else None, bound)
    return src.build("plan", "run", plan)


class CheckNames(TypedDict):
    """The fixed names the structure checks read (a part of ``FixedNames``)."""

    MISS: object
    _list: type[list[Any]]
    _map: type[map[Any]]
    _all: Callable[[Iterable[object]], bool]
    _tuple: type[tuple[Any, ...]]
    _chain: type[itertools.chain[Any]]
    _values: Callable[[dict[Any, Any]], Any]
    _same: Callable[[object, object], bool]
    _getv: Callable[[object], int]
    _getm: Callable[[Variable[Any]], dict[str, Any]]


class FixedNames(CheckNames):
    """The names every generated ``run`` may read besides its constants."""

    S: object
    TRACE: object
    PLAN: Plan
    COMPILED: Callable[..., Any]
    CHANGED: type[Exception]
    RETRY: Callable[..., Any]
    READ_ONLY: type[Exception]
    GIVE_UP: Callable[[Plan], object]
    FINISH: Callable[..., Any]
    _ctx: object
    _is: Callable[[object, object], bool]
    _level: Callable[[object], object]
    _leaf: Callable[[object], bool]
    _getattr: Callable[..., Any]
    _call: Callable[..., Any]
    _getr: Callable[[Variable[Any]], Any]
    _set_raw: Callable[[Variable[Any], object], None]
    _set_fresh: Callable[[Variable[Any], object], None]
    _repeat: type[itertools.repeat[Any]]
    _unheld: Callable[[list[Any], Any, Any], list[bool]]
    _copy_held: Callable[[list[Any], Any, Any], None]
    _repeats: Callable[[list[Any], Any], bool]
    _copy_repeats: Callable[[list[Any], Any], None]


def _namespace(plan: Plan, finish: Callable[..., Any]) -> dict[str, Any]:
    """The ``FixedNames`` a generated function reads (the constants are added later)."""
    names: FixedNames = {
        **_fixed_checks(),
        "S": plan.statics,
        "TRACE": plan.trace,
        "PLAN": plan,
        "COMPILED": plan.compiled.fn,
        "CHANGED": OutStaticChanged,
        "RETRY": _retry,
        "READ_ONLY": ReadOnlyDonated,
        "GIVE_UP": _give_up,
        "FINISH": finish,
        "_ctx": trace_ctx,
        "_is": operator.is_,
        "_level": level_treedef,
        "_leaf": argument_leaf,
        "_getattr": getattr,
        "_call": operator.call,
        "_getr": read_slot,
        "_set_raw": write_slot,
        "_set_fresh": mark_fresh,
        "_repeat": itertools.repeat,
        "_unheld": unheld,
        "_copy_held": copy_held,
        "_repeats": has_repeats,
        "_copy_repeats": copy_repeats,
    }
    return dict(names)


def compile_structure_check(snap: StructureSnapshot) -> tuple[Callable[[], Any], str]:
    """``(check, source)``: a plan's structure checks of ``snap`` alone (``check()`` is
    ``MISS`` when the structure changed), tested against ``StructureSnapshot.unchanged``."""
    src = _Source(dict(_fixed_checks()), "def check():")
    _structure_checks(src, snap)
    src.line("return None")
    return src.build("structure check", "check", snap)


def _fixed_checks() -> CheckNames:
    """The ``CheckNames``."""
    return {
        "MISS": MISS,
        "_list": list,
        "_map": map,
        "_all": all,
        "_tuple": tuple,
        "_chain": itertools.chain,
        "_values": dict.values,
        "_same": same_item,
        "_getv": operator.attrgetter("_obj_version"),
        "_getm": metadata_of,
    }


def with_apply(bound: BoundFinish) -> BoundFinish:
    """``bound`` with its ``apply`` generated from the write-back template ``run`` inlines."""
    src = _Source(_namespace_of_write_back(), "def apply(values, out_groups):")
    _write_back(src, bound)
    return bound._replace(apply=src.build("write-back", "apply", bound)[0])


def _namespace_of_write_back() -> dict[str, Any]:
    """The names a generated write-back reads besides its objects."""
    return {
        "_list": list,
        "_map": map,
        "_set_raw": write_slot,
        "_set_fresh": mark_fresh,
        "_repeat": itertools.repeat,
    }


def _signature_checks(src: _Source, plan: Plan) -> None:
    """The call's signature: the same objects, leaves of the same types."""
    const = src.const
    src.line(f"if len(args) != {plan.n_args}: return MISS")
    src.line("if statics is not S and statics != S: return MISS")
    if not plan.kwarg_names:
        src.line("if kwargs: return MISS")
    else:
        src.line(f"if kwargs.keys() != {const(plan.kwarg_names, 'kwarg_names')}: return MISS")
    # Containers before their items, so each access below is safe once reached.
    conditions = []
    attrs = plan.attribute_parents
    for check in plan.arg_checks:
        access = _access(check.root, check.keys, const, attrs)
        kind, expected = check.kind, check.expected
        if kind is CheckKind.IS:
            conditions.append(f"{access} is not {const(expected)}")
        elif kind is CheckKind.TYPE:
            # Another leaf type may still be a leaf (walk.argument_leaf decides; always
            # for a Tracer, whose kind depends on its aval).
            if issubclass(expected, jax.core.Tracer):
                conditions.append(f"not _leaf({access})")
            else:
                conditions.append(
                    f"(type({access}) is not {const(expected)} and not _leaf({access}))"
                )
        elif kind is CheckKind.PYTREE:
            t, treedef = expected
            conditions.append(f"type({access}) is not {const(t)}")
            conditions.append(f"_level({access}) != {const(treedef, 'treedef')}")
        else:
            t, items = expected
            conditions.append(f"type({access}) is not {const(t)}")
            if t is dict:
                conditions.append(f"_tuple({access}) != {const(items, 'keys')}")
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
        objs, versions = const(snap.objects, "objects"), const(snap.versions, "versions")
        src.line(f"if _list(_map(_getv, {objs})) != {versions}: return MISS")
    if snap.variables:
        full = f"_list(_map(_getm, {const(snap.variables, 'variables')})) != {const(snap.metadata, 'metadata')}"
        if len(snap.variables) <= UNROLL:
            # Identity first; an equal replacement dict is decided by the full comparison.
            quick = " or ".join(
                f"{const(v)}.{METADATA_SLOT} is not {const(m, 'metadata')}"
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
        items = [arg_at.get(pos) or f"{const(next(variables))}._var_raw" for pos in range(n_leaves)]
        src.line(f"values = [{', '.join(items)}]")
    elif plan.leaf_variables is not None:
        src.line(f"values = _list(_map(_getr, {const(plan.leaf_variables, 'variables')}))")
        for pos in sorted(arg_at):
            src.line(f"values.insert({pos}, {arg_at[pos]})")
    elif n_leaves <= 4 * UNROLL:  # e.g. Ref-backed Variables: each read written out
        items = [
            arg_at.get(pos) or _read(getter, target, const)
            for pos, (getter, target) in enumerate(zip(plan.getters, plan.targets))
        ]
        src.line(f"values = [{', '.join(items)}]")
    else:
        src.line(
            f"values = _list(_map(_call, {const(plan.getters, 'getters')}, {const(plan.targets, 'targets')}))"
        )
        for pos in sorted(arg_at):
            src.line(f"values[{pos}] = {arg_at[pos]}")
    if not plan.private_reads:  # a read that may hand the arrays out (donation.py)
        plain = plan.leaf_variables
        if plain is None:
            plain = [t for g, t in zip(plan.getters, plan.targets) if g is get_raw]
        if plain:
            src.line(f"_list(_map(_set_fresh, {const(plain, 'read_variables')}, _repeat(None)))")


def _donation_copies(src: _Source, plan: Plan) -> None:
    """The donation's copies (``donation.py``): a held candidate and a repeated donated array."""
    if plan.auto is not None:
        positions = src.const(plan.auto.positions, "donation_candidates")
        variables = src.const([plan.leaves[p] for p in plan.auto.positions], "candidates")
        unheld_all = src.const([True] * len(plan.auto.positions), "all_unheld")
        src.line(f"mask = _unheld(values, {positions}, {variables})")
        src.line(f"if mask != {unheld_all}: _copy_held(values, {positions}, mask)")
    if plan.repeat_positions:
        positions = src.const(plan.repeat_positions, "donated_positions")
        src.line(f"if _repeats(values, {positions}): _copy_repeats(values, {positions})")


def _call_and_finish(
    src: _Source, plan: Plan, last_out: OutStatic | None, bound: BoundFinish | None
) -> None:
    """The call of the compiled function and the write-back."""
    const = src.const
    if plan.passthrough:
        groups = ", ".join(["values"] + ["[]"] * (len(plan.members) - 1))
    else:
        src.line("get = values.__getitem__")
        groups = ", ".join(f"_list(_map(get, {const(m, 'positions')}))" for m in plan.members)
    # With automatic donation, a trace for new shapes may find a donated leaf unchanged
    # (compilation.JitWrapped.replay): the plan gives up and the general path decides.
    read_only = ["except READ_ONLY:", "    return GIVE_UP(PLAN)"] if plan.auto is not None else []
    if plan.compiled.with_static:
        if read_only:
            src.line("try:")
        src.line(f"{'    ' if read_only else ''}out_static, out_groups = COMPILED({groups})")
        for text in read_only:
            src.line(text)
        src.line("out = out_static.value")
        if last_out is not None:
            src.namespace["LAST"] = last_out
            src.line("if out is not LAST: return FINISH(PLAN, out, out_groups, values)")
    else:
        # Every trace returned OUT (compiled.py); one that disagrees raises CHANGED.
        src.namespace["OUT"] = plan.compiled.out_static
        src.line("try:")
        src.line(f"    out_groups = COMPILED({groups})")
        src.line("except CHANGED:")
        src.line("    return RETRY(PLAN, FINISH, args, kwargs, statics)")
        for text in read_only:
            src.line(text)
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
        return f"{const(target)}._var_raw"
    if getter is get_ref_content:
        return f"{const(target)}._refs._buf"
    return f"{const(getter)}({const(target)})"


def _access(
    root: int,
    keys: tuple[Any, ...],
    const: Callable[[Any], str],
    attribute_parents: frozenset[tuple[int, tuple[Any, ...]]] = frozenset(),
) -> str:
    """The expression reaching an argument's item: ``args[1][k_3]``, ``args[2].tokens``."""
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
    """The call after the compiled function switched to returning its ``OutStatic``: ``run`` again."""
    if not plan.compiled.with_static:
        plan.compiled.switch()
    plan.run, plan.source = compile_run(plan, finish, plan.last_out, plan.last_finish)
    return plan.run(args, kwargs, statics)


def _give_up(plan: Plan) -> object:
    """A plan whose call found a donated leaf unchanged: never applies again (``MISS``)."""
    plan.run = miss_always
    return MISS


def _value_of(source: LeafSource) -> str:
    """The expression of a leaf's value in the generated function."""
    if source.origin == IN:
        return f"values[{source.at}]"
    return f"out_groups[{source.at}][{source.position}]"


def _write_back(src: _Source, bound: BoundFinish) -> None:
    """The lines writing the outputs of a call that returned ``bound``'s ``OutStatic``."""
    const = src.const
    if bound.installs is not None:  # Ref-backed Variables: all checked, then installed
        src.line(f"{const(bound.installs, 'ref_installs')}(out_groups)")
    # Each write also notes the new array as fresh (nnx.jit donating automatically), or
    # forgets a noted one (donation.py).
    for w in bound.var_writes:
        if len(w.targets) <= UNROLL:
            for t, p in zip(w.targets, w.positions):
                value = f"out_groups[{w.group}][{p}]"
                src.line(f"_set_raw({const(t)}, {value})")
                src.line(f"_set_fresh({const(t)}, {value if bound.fresh else None})")
        else:
            targets = const(w.targets, "targets")
            values = f"_map(out_groups[{w.group}].__getitem__, {const(w.positions, 'positions')})"
            src.line(f"_list(_map(_set_raw, {targets}, {values}))")
            fresh = values if bound.fresh else "_repeat(None)"
            src.line(f"_list(_map(_set_fresh, {targets}, {fresh}))")
    for other in bound.other_writes:
        src.line(f"{const(other.write, 'write')}({_value_of(other.source)})")
    single = getattr(bound.output, "source", None)  # a one-leaf output: its source
    if single is not None:
        src.line(f"return {_value_of(single)}")
    else:
        src.line(f"return {const(bound.output, 'output')}(values, out_groups)")


def _item_check(src: _Source, access: str, key: Any) -> str:
    """The condition that the item at ``access`` no longer matches its snapshot ``key``."""
    if type(key) is ArrayItem:  # the same array type, else snapshot.same_item decides
        if issubclass(key.type, jax.core.Tracer):
            return f"not _same({access}, {src.const(key)})"
        return f"(type({access}) is not {src.const(key.type)} and not _same({access}, {src.const(key)}))"
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
                        f"not _all(_map(_same, {name}, {const(items, 'item_keys')}))",
                    ]
                )
    else:  # many lists: their lengths, then all their items in one pass
        lengths = [len(items) for items in snap.list_items]
        all_items = [x for list_items in snap.list_items for x in list_items]
        lists = const(snap.lists, "lists")
        src.miss_if(
            [
                f"_list(_map(len, {lists})) != {const(lengths, 'lengths')}",
                f"not _all(_map(_same, _chain(*{lists}), {const(all_items, 'item_keys')}))",
            ]
        )
    if len(snap.dicts) <= UNROLL:
        for d, (keys, values) in zip(snap.dicts, snap.dict_items):
            name = const(d)
            src.miss_if(
                [
                    f"len({name}) != {len(keys)}",
                    f"_tuple({name}) != {const(keys, 'keys')}",
                    f"not _all(_map(_same, {name}.values(), {const(values, 'item_keys')}))",
                ]
            )
    else:  # many dicts: their keys, then all their values in one pass
        all_keys = [k for dict_keys, _ in snap.dict_items for k in dict_keys]
        all_values = [v for _, dict_values in snap.dict_items for v in dict_values]
        dicts = const(snap.dicts, "dicts")
        lengths = [len(dict_keys) for dict_keys, _ in snap.dict_items]
        src.miss_if(
            [
                f"_list(_map(len, {dicts})) != {const(lengths, 'lengths')}",
                f"_list(_chain(*{dicts})) != {const(all_keys, 'keys')}",
                f"not _all(_map(_same, _chain(*_map(_values, {dicts})), {const(all_values, 'item_keys')}))",
            ]
        )
