"""The listed deviations of the oracle: how each is recognised, and its minimal example.

``tests/conformance/oracle_deviations.txt`` lists them, one a line: ``<name> | <reason>``
(``#`` starts a comment). Each name has one ``Deviation`` here: a predicate that says
whether a difference the oracle found is that deviation (by the program's description
and the two outcomes: never by flaxgraph's own code), and a minimal program that shows
it. ``test_oracle_deviations.py`` checks that every listed deviation still occurs on its
example, and that the file and this table name the same deviations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from oracle_programs import Container, Item, Marked, NodeSpec, Program, Raw, Sub

from flaxgraph.testing import values

FILE = Path(__file__).resolve().parent.parent / "conformance" / "oracle_deviations.txt"


def listed() -> dict[str, str]:
    """The deviations of ``oracle_deviations.txt``: name -> reason."""
    out = {}
    for line in FILE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, reason = line.partition("|")
            out[name.strip()] = reason.strip()
    return out


@dataclasses.dataclass(frozen=True)
class Deviation:
    """One listed deviation: ``explains(program, op, flax, flaxgraph)`` and its ``example``."""

    name: str
    explains: Callable[[Program, str, Any, Any], bool]
    example: Program
    op: str


def _items(spec: NodeSpec) -> list[Item]:
    """Every item of the program, nested ones (in sub-nodes and containers) included."""
    return [i for _, item in spec.attrs for i in _flatten(item)]


def _flatten(item: Item) -> list[Item]:
    if isinstance(item, Sub):
        return [item, *_items(item.node)]
    if isinstance(item, Container):
        return [item, *(i for element in item.items for i in _flatten(element))]
    return [item]


def _raw_values(program: Program) -> list[values.Description]:
    """The values of the program's unmarked attributes, and of the marked attributes of
    its ``pytree=False`` nodes (both libraries drop the marks there: each value is
    classified as if unmarked)."""
    out = [item.value for item in _items(program.root) if isinstance(item, Raw)]
    return out + _opaque_marked_values(program.root)


def _opaque_marked_values(root: NodeSpec) -> list[values.Description]:
    nodes = [root, *(i.node for i in _items(root) if isinstance(i, Sub))]
    return [
        item.value
        for node in nodes
        if node.kind == "opaque"
        for _, item in node.attrs
        if isinstance(item, Marked)
    ]


def _plain_container_with_arrays(d: values.Description) -> bool:
    """A plain list, tuple or dict holding an array or key at any depth."""
    if isinstance(d, values.SeqValue | values.MapValue):
        return values.contains(d, values.LEAF_KINDS)
    if isinstance(d, values.ConfigValue):  # a config is a leaf; look inside for containers
        return _plain_container_with_arrays(d.width) or _plain_container_with_arrays(d.name)
    return False


def _unhashable_static(d: values.Description) -> bool:
    """A static value holding a plain list or dict (no array: those are data)."""
    if values.contains(d, values.LEAF_KINDS):
        return False
    return values.contains(d, (values.MapValue,)) or _contains_list(d)


def _contains_list(d: values.Description) -> bool:
    if isinstance(d, values.SeqValue):
        return d.kind == "list" or any(_contains_list(i) for i in d.items)
    if isinstance(d, values.MapValue):
        return any(_contains_list(i) for _, i in d.items)
    if isinstance(d, values.ConfigValue):
        return _contains_list(d.width) or _contains_list(d.name)
    if isinstance(d, values.PartialValue):
        return _contains_list(d.factor)
    return False


def _static_values(program: Program) -> list[values.Description]:
    out = _raw_values(program)
    out += [i.value for i in _items(program.root) if isinstance(i, Marked) and i.mark == "static"]
    return out


def _plain_container_with_data(item: Item) -> bool:
    """A plain list, tuple or dict of Variables, nodes, Rngs or arrays."""
    if not isinstance(item, Container) or item.kind not in ("list", "tuple", "dict"):
        return False
    return any(
        not isinstance(e, Raw) or values.contains(e.value, values.LEAF_KINDS) for e in item.items
    )


def _plain_containers(program: Program, op: str, flax: Any, ours: Any) -> bool:
    return (
        not flax.ok
        and ours.ok
        and "data" in flax.error
        and (
            any(_plain_container_with_arrays(d) for d in _raw_values(program))
            or any(_plain_container_with_data(i) for i in _items(program.root))
        )
    )


def _static_plain_list_or_dict(item: Item) -> bool:
    """A plain list or dict of values without arrays (static in Flax: in its GraphDef)."""
    return (
        isinstance(item, Container)
        and item.kind in ("list", "dict")
        and not _plain_container_with_data(item)
    )


def _hashable_containers(program: Program, op: str, flax: Any, ours: Any) -> bool:
    return (
        op == "hash"
        and not flax.ok
        and ours.ok
        and "unhashable" in flax.error
        and (
            any(_unhashable_static(d) for d in _static_values(program))
            or any(_static_plain_list_or_dict(i) for i in _items(program.root))
        )
    )


def _partial_equality(program: Program, op: str, flax: Any, ours: Any) -> bool:
    return (
        op == "hash"
        and flax.ok
        and ours.ok
        and flax.value["equal"] is False
        and ours.value["equal"] is True
        and any(values.contains(d, (values.PartialValue,)) for d in _static_values(program))
    )


def _non_array_data(d: values.Description) -> bool:
    """Holds a leaf that is not an array: a scalar, string, enum, dtype, function, partial,
    config (an object JAX does not flatten, whatever it holds) or PartitionSpec."""
    if isinstance(d, values.SeqValue):
        return any(_non_array_data(i) for i in d.items)
    if isinstance(d, values.MapValue):
        return any(_non_array_data(i) for _, i in d.items)
    if isinstance(d, values.ArrayValue | values.KeyValue):
        return False
    return not (isinstance(d, values.PyScalar) and d.value is None)


def _mapped_non_array_data(program: Program, op: str, flax: Any, ours: Any) -> bool:
    return (
        op in ("vmap", "scan")
        and not flax.ok
        and ours.ok
        and "is not a valid JAX type" in flax.error
        and any(
            isinstance(i, Marked) and i.mark == "data" and _non_array_data(i.value)
            for i in _items(program.root)
        )
    )


def _loosen(value: Any) -> Any:
    """Plain data with the leaf types forgotten: a Python scalar and a 0-d array are
    ``('scalar', value)``, a NumPy and a JAX array ``('array', dtype, shape, values)``."""
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and value[0] in ("int", "float", "complex", "bool")
    ):
        return ("scalar", value[1])
    if isinstance(value, tuple) and len(value) == 4 and value[0] in ("jax", "numpy"):
        return ("scalar", value[3]) if value[2] == () else ("array", *value[1:])
    if isinstance(value, list | tuple):
        return type(value)(_loosen(v) for v in value)
    if isinstance(value, dict):
        return {k: _loosen(v) for k, v in value.items()}
    return value


def _jit_unchanged_leaves(program: Program, op: str, flax: Any, ours: Any) -> bool:
    from oracle_compare import same  # a cycle at import: oracle_compare imports this module

    return op == "jit" and flax.ok and ours.ok and same(_loosen(flax.value), _loosen(ours.value))


def _one(name: str, item: Item, kind: str = "box") -> Program:
    return Program(NodeSpec(kind, ((name, item),)))


DEVIATIONS = (
    Deviation(
        "plain-container-arrays",
        _plain_containers,
        _one("a", Raw(values.SeqValue("list", (values.ArrayValue("jax", "float32", (2,), 0),)))),
        "construct",
    ),
    Deviation(
        "hashable-graphdef-containers",
        _hashable_containers,
        _one("a", Raw(values.SeqValue("list", (values.PyScalar(1),)))),
        "hash",
    ),
    Deviation(
        "partial-graphdef-equality",
        _partial_equality,
        _one("a", Raw(values.PartialValue("scale_by", values.PyScalar(2)))),
        "hash",
    ),
    Deviation(
        "mapped-non-array-data",
        _mapped_non_array_data,
        _one("a", Marked("data", values.EnumValue("RED"))),
        "vmap",
    ),
    Deviation(
        "jit-keeps-unchanged-leaves",
        _jit_unchanged_leaves,
        _one("a", Marked("data", values.PyScalar(1j))),  # read by no branch: stays untraced
        "jit",
    ),
)
"""Every deviation the oracle knows, in the order it tries them."""
