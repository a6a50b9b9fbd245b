"""Counts of the code's shape that may only go down, read from the source with ``ast``.

``python tests/code_counts.py`` (run by ``make lint``) prints each count with its limit
and fails if one is over; ``tests/test_code_counts.py`` asserts the same limits. A limit
is the count the code has reached: lower it in ``LIMITS`` when you lower a count, so
it cannot grow back. Nothing is imported from ``flaxgraph``; each count names its sites
with ``--sites NAME``.

The counts (issue 31: records, names, classification):

* ``duplicate_class_names``: top-level class names defined in two modules (one
  concept, one name), except the names Flax NNX itself gives to two public classes
  (``ALLOWED_DUPLICATE_CLASSES``).
* ``record_setattr``: ``object.__setattr__`` outside ``pytreelib/`` and
  ``variablelib/`` (the object model's own base classes) that changes an object after
  its constructor (outside ``__init__``, ``__new__``, ``__post_init__``): records are
  frozen dataclasses or NamedTuples, never changed once built.
* ``object_setattr``: every ``object.__setattr__`` outside ``pytreelib/`` and
  ``variablelib/``, constructors included (a frozen dataclass or a NamedTuple needs
  none). What stays: ``GraphDef.__init__`` (``graphlib/graphdefs.py``), a hand-made
  frozen record (its ``__setattr__`` raises) that sets its three fields once in its
  own constructor, because its public signature ``GraphDef(root, leaf_paths, tree)``
  takes ``leaf_paths``, which is no field (it fills the ``DerivedValues`` cache
  cell), from split's walks.
* ``duplicate_private_constants``: ``_UPPER_CASE`` module constants defined in two
  modules (one definition, imported where needed under a public name).
* ``zip_filled_records``: a constructor taking ``*values`` that ``zip``s them onto
  field names (``zip`` stops at the shorter side: a missing field is silently unset).
* ``bare_any``: annotations that are exactly ``Any`` in ``graphlib/``, ``statelib/``,
  ``variablelib/`` and ``transforms/``. A value only passed on is ``object``. What
  stays is arbitrary or reached through untyped code: what a user's function returns
  and what the public transforms and State methods give back (Flax types them
  ``Any``, and ``object`` would make users' type checkers refuse every use), pytrees
  and JAX values read by attribute (a ``PyTreeDef``, a ``jax.Ref``, boxes: JAX ships
  no stubs for them), and Variables inside ``variablelib``'s own helpers, which
  cannot import ``Variable`` for typing without an import circle.
* ``registry_table_reads``: reads of the node registry's tables (``REGISTRY.kinds``,
  ``.impls``, ``.tracer_kinds``, ``GRAPH_NODE_IMPLS``) outside ``graphlib/registry.py``;
  other modules ask its public functions.
* ``isinstance_variable``: ``isinstance(x, ...Variable...)`` outside ``variablelib/``.
  A walk (the fast path's included) asks ``REGISTRY.kind_of`` or its kind cache,
  other code the public predicate ``variablelib.is_variable`` (a ``TypeGuard``).
  What stays: the classification's own test (``graphlib/registry.py``) and a
  measured hot loop (``statelib/state.py``'s ``_flatten_into``: the call costs
  3-9 % of a ``flat_state``). ``issubclass`` and ``isinstance(x, Param)`` (a kind,
  not the question "is it a Variable") are not counted.
* ``module_docstrings``: modules whose docstring is missing or whose first line is
  empty or a mere word or two (a module's first docstring line says what it holds).
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "flaxgraph"

TYPED_PACKAGES = ("graphlib", "statelib", "variablelib", "transforms")
OBJECT_MODEL = ("pytreelib", "variablelib")
ALLOWED_DUPLICATE_CLASSES = {
    # Flax NNX's public ``nnx.Module`` and ``nnx.bridge.Module`` are two classes.
    "Module": {"module_class.py", "bridge/module.py"},
    # Flax NNX's ``nnx.pytreelib.ArrayRepr`` (a reprlib record) and ``nnx.summary.ArrayRepr``
    # (a table cell) are two classes.
    "ArrayRepr": {"flax_surface/pytreelib_records.py", "summary.py"},
    # Flax NNX's ``nnx.module.ModuleMeta`` and ``nnx.bridge.module.ModuleMeta``.
    "ModuleMeta": {"flax_surface/module_records.py", "bridge/module.py"},
    # Flax NNX's ``nnx.graphlib.Static`` (a static pytree box) and ``nnx.Static`` (an
    # attribute annotation) are two classes.
    "Static": {"flax_surface/graphlib_records.py", "pytreelib/attribute_kinds.py"},
    # Flax NNX's ``nnx.Object`` (pytreelib) and ``nnx.reprlib.Object`` (a repr record).
    "Object": {"pytreelib/objects.py", "reprlib.py"},
}

LIMITS = {
    "duplicate_class_names": 0,
    "record_setattr": 0,
    "object_setattr": 3,
    "duplicate_private_constants": 0,
    "zip_filled_records": 0,
    "bare_any": 285,
    "registry_table_reads": 0,
    "isinstance_variable": 2,
    "module_docstrings": 0,
}


class Site(NamedTuple):
    """One place a count counts: the module (relative to ``flaxgraph/``), a line, what."""

    module: str
    line: int
    what: str


class Source(NamedTuple):
    """A module of the package: its path relative to ``flaxgraph/`` and its syntax tree."""

    module: str
    tree: ast.Module


def sources(package: Path = PACKAGE) -> list[Source]:
    """Every ``.py`` file of ``package``, parsed."""
    return [
        Source(file.relative_to(package).as_posix(), ast.parse(file.read_text(encoding="utf-8")))
        for file in sorted(package.rglob("*.py"))
    ]


def _in(module: str, packages: tuple[str, ...]) -> bool:
    return module.split("/")[0] in packages


def duplicate_class_names(srcs: list[Source]) -> list[Site]:
    """One site per class name defined at the top level of two or more modules."""
    where: dict[str, list[Site]] = defaultdict(list)
    for src in srcs:
        for node in src.tree.body:
            if isinstance(node, ast.ClassDef):
                where[node.name].append(Site(src.module, node.lineno, node.name))
    return [
        Site(sites[0].module, sites[0].line, f"{name}: " + ", ".join(s.module for s in sites))
        for name, sites in sorted(where.items())
        if len({s.module for s in sites}) > 1
        and {s.module for s in sites} != ALLOWED_DUPLICATE_CLASSES.get(name)
    ]


def _is_object_setattr(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "__setattr__"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "object"
    )


CONSTRUCTORS = {"__init__", "__new__", "__post_init__"}


def object_setattr(srcs: list[Source]) -> list[Site]:
    """``object.__setattr__`` calls outside the object model's packages."""
    return [
        Site(src.module, node.lineno, ast.unparse(node)[:80])
        for src in srcs
        if not _in(src.module, OBJECT_MODEL)
        for node in ast.walk(src.tree)
        if _is_object_setattr(node)
    ]


def record_setattr(srcs: list[Source]) -> list[Site]:
    """``object.__setattr__`` calls outside the object model's packages and outside a
    constructor (a call in a function nested in a constructor counts as the constructor's)."""
    found = []
    for src in srcs:
        if _in(src.module, OBJECT_MODEL):
            continue
        inside: set[int] = set()
        for fn in _functions(src.tree):
            if fn.name in CONSTRUCTORS:
                inside.update(id(n) for n in ast.walk(fn))
        found += [
            Site(src.module, node.lineno, ast.unparse(node)[:80])
            for node in ast.walk(src.tree)
            if _is_object_setattr(node) and id(node) not in inside
        ]
    return found


_PRIVATE_CONSTANT = re.compile(r"_[A-Z][A-Z0-9_]*")


def duplicate_private_constants(srcs: list[Source]) -> list[Site]:
    """One site per ``_UPPER_CASE`` module-level name assigned in two or more modules."""
    where: dict[str, list[Site]] = defaultdict(list)
    for src in srcs:
        for node in src.tree.body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            for target in targets:
                if isinstance(target, ast.Name) and _PRIVATE_CONSTANT.fullmatch(target.id):
                    where[target.id].append(Site(src.module, node.lineno, target.id))
    return [
        Site(sites[0].module, sites[0].line, f"{name}: " + ", ".join(s.module for s in sites))
        for name, sites in sorted(where.items())
        if len({s.module for s in sites}) > 1
    ]


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def zip_filled_records(srcs: list[Source]) -> list[Site]:
    """Constructors taking ``*values`` that ``zip`` them (with field names), and any
    ``zip`` of a ``*values`` with ``_fields``."""
    found = []
    for src in srcs:
        for fn in _functions(src.tree):
            if fn.args.vararg is None:
                continue
            star = fn.args.vararg.arg
            for node in ast.walk(fn):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id == "zip"
                    and any(isinstance(a, ast.Name) and a.id == star for a in node.args)
                    and (fn.name in CONSTRUCTORS or "_fields" in ast.unparse(node))
                ):
                    found.append(Site(src.module, node.lineno, f"{fn.name}: {ast.unparse(node)}"))
    return found


def _annotations(tree: ast.AST) -> Iterator[ast.expr]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
                if arg is not None and arg.annotation is not None:
                    yield arg.annotation
            if node.returns is not None:
                yield node.returns
        elif isinstance(node, ast.AnnAssign):
            yield node.annotation


def _is_any(annotation: ast.expr) -> bool:
    if isinstance(annotation, ast.Constant):  # a string annotation
        return annotation.value == "Any"
    return (isinstance(annotation, ast.Name) and annotation.id == "Any") or (
        isinstance(annotation, ast.Attribute) and annotation.attr == "Any"
    )


def bare_any(srcs: list[Source]) -> list[Site]:
    """Annotations that are exactly ``Any`` in the typed packages."""
    return [
        Site(src.module, annotation.lineno, "Any")
        for src in srcs
        if _in(src.module, TYPED_PACKAGES)
        for annotation in _annotations(src.tree)
        if _is_any(annotation)
    ]


_TABLES = {"kinds", "impls", "tracer_kinds"}


def registry_table_reads(srcs: list[Source]) -> list[Site]:
    """``REGISTRY.<table>`` and ``GRAPH_NODE_IMPLS`` outside ``graphlib/registry.py``."""
    found = []
    for src in srcs:
        if src.module == "graphlib/registry.py":
            continue
        for node in ast.walk(src.tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in _TABLES
                and isinstance(node.value, ast.Name)
                and node.value.id == "REGISTRY"
            ) or (isinstance(node, ast.Name) and node.id == "GRAPH_NODE_IMPLS"):
                found.append(Site(src.module, node.lineno, ast.unparse(node)))
    return found


def isinstance_variable(srcs: list[Source]) -> list[Site]:
    """``isinstance(x, T)`` where ``T`` names ``Variable``, outside ``variablelib/``."""
    found = []
    for src in srcs:
        if _in(src.module, ("variablelib",)):
            continue
        for node in ast.walk(src.tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "isinstance"
                and len(node.args) == 2
                and any(
                    (isinstance(n, ast.Name) and n.id == "Variable")
                    or (isinstance(n, ast.Attribute) and n.attr == "Variable")
                    for n in ast.walk(node.args[1])
                )
            ):
                found.append(Site(src.module, node.lineno, ast.unparse(node)[:80]))
    return found


MIN_FIRST_LINE_WORDS = 4  # "Exceptions raised by flaxgraph", not "Helpers."


def module_docstrings(srcs: list[Source]) -> list[Site]:
    """Modules with no docstring, or whose docstring's first line has fewer than
    ``MIN_FIRST_LINE_WORDS`` words (it should say what the module holds)."""
    found = []
    for src in srcs:
        doc = ast.get_docstring(src.tree, clean=False)
        first = "" if doc is None else doc.split("\n", 1)[0].strip()
        if len(first.split()) < MIN_FIRST_LINE_WORDS:
            found.append(Site(src.module, 1, f"first docstring line: {first!r}"))
    return found


COUNTS: dict[str, Callable[[list[Source]], list[Site]]] = {
    "duplicate_class_names": duplicate_class_names,
    "record_setattr": record_setattr,
    "object_setattr": object_setattr,
    "duplicate_private_constants": duplicate_private_constants,
    "zip_filled_records": zip_filled_records,
    "bare_any": bare_any,
    "registry_table_reads": registry_table_reads,
    "isinstance_variable": isinstance_variable,
    "module_docstrings": module_docstrings,
}


def count_all(package: Path = PACKAGE) -> dict[str, list[Site]]:
    """Every count's sites in ``package``."""
    srcs = sources(package)
    return {name: count(srcs) for name, count in COUNTS.items()}


def over_limit(found: dict[str, list[Site]]) -> dict[str, tuple[int, int]]:
    """``name -> (count, limit)`` for every count above its limit."""
    return {
        name: (len(sites), LIMITS[name])
        for name, sites in found.items()
        if len(sites) > LIMITS[name]
    }


def lower_limits(counts: dict[str, int], file: Path = Path(__file__)) -> None:
    """Rewrites ``LIMITS`` in ``file`` so that each limit is ``min(limit, count)``."""
    text = file.read_text(encoding="utf-8")
    for name, count in counts.items():
        if count < LIMITS[name]:
            text = text.replace(f'    "{name}": {LIMITS[name]},', f'    "{name}": {count},', 1)
            LIMITS[name] = count
    file.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sites", choices=sorted(COUNTS), action="append", default=[])
    parser.add_argument(
        "--lower", action="store_true", help="lower each limit in this file to its count"
    )
    args = parser.parse_args(argv)
    found = count_all()
    if args.lower:
        lower_limits({name: len(sites) for name, sites in found.items()})
    for name, sites in found.items():
        mark = "  OVER" if len(sites) > LIMITS[name] else ""
        print(f"{name:30} {len(sites):5} (limit {LIMITS[name]}){mark}")
        if name in args.sites:
            for site in sites:
                print(f"    flaxgraph/{site.module}:{site.line}: {site.what}")
    over = over_limit(found)
    if over:
        print(
            "Over the limit: "
            + ", ".join(f"{n} {c} > {lim}" for n, (c, lim) in over.items())
            + ". See the sites with `python tests/code_counts.py --sites NAME`; "
            "the limits only go down (tests/code_counts.py, LIMITS).",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
