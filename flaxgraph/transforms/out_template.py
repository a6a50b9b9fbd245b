"""Step 4 without the walk, for a transform that traces on every call (eager vmap).

A template, kept only if it reproduces its call, gives a matching call the same
``OutStatic``; see ``docs/design.md``, "The fast path".
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple

from flaxgraph.graphlib.registry import is_hashable
from flaxgraph.graphlib.walk import argument_leaf
from flaxgraph.transforms.lift import IN, Merged, OutStatic
from flaxgraph.variablelib.variable import is_variable

_ARRAY = "array"


class Fetch(NamedTuple):
    """Where an output group's value comes from: output array or input leaf ``at`` (-1: none)."""

    from_output: bool
    at: int


class TemplateMatch(NamedTuple):
    """``try_template``'s result (``out_static`` ``None``: the call does not match)."""

    hooks_ran: bool
    out_static: OutStatic | None
    out_groups: tuple[list[Any], ...] = ()


_NO_MATCH = TemplateMatch(False, None)


def plain_structure(x: Any, leaves: list[Any]) -> Hashable | None:
    """``x``'s structure of ``walk.argument_leaf`` leaves in lists, tuples, dicts, or ``None``."""
    t = type(x)
    if t is list or t is tuple or t is dict:
        keys = []
        for c in x.values() if t is dict else x:
            k = plain_structure(c, leaves)
            if k is None:
                return None
            keys.append(k)
        return (t, tuple(x), tuple(keys)) if t is dict else (t, tuple(keys))
    if argument_leaf(x):
        leaves.append(x)
        return _ARRAY
    return None


class OutTemplate:
    """One call's step-4 result (``OutStatic``, where each value comes from), for matching calls."""

    __slots__ = ("structure", "out_static", "variables", "changed", "out_inputs", "fetch")

    def __init__(
        self,
        structure: Hashable,
        out_static: OutStatic,
        merged: Merged,
        out_leaves: Sequence[Any],
        walk_leaves: Sequence[tuple[Any, Any]],
        n_groups: int,
    ):
        self.structure = structure
        self.out_static = out_static
        self.variables = [i for i, v in enumerate(merged.leaves) if is_variable(v)]
        self.changed = [merged.unchanged_input(merged.leaves[i]) for i in self.variables]
        self.out_inputs = [merged.unchanged_input(x) for x in out_leaves]
        self.fetch: list[list[Fetch]] = [[] for _ in range(n_groups)]
        for j, ((path, leaf), source) in enumerate(zip(walk_leaves, out_static.sources)):
            if source.origin == IN:
                continue
            g = source.at
            if path[0] == 0:  # the output part: its arrays come first, in walk order
                self.fetch[g].append(Fetch(True, j))
            else:
                i = merged.in_leaf.get(leaf) if is_variable(leaf) else None
                if i is None:
                    i = merged.raw_in.get(id(leaf))
                self.fetch[g].append(Fetch(False, -1 if i is None else i))

    def reproduces(
        self, out_groups: Sequence[Sequence[Any]], merged: Merged, out_leaves: Sequence[Any]
    ) -> bool:
        """Whether ``read`` gives back exactly ``out_groups`` (same objects)."""
        if any(f.at == -1 for group in self.fetch for f in group):
            return False
        got = self.read(merged, out_leaves)
        return len(got) == len(out_groups) and all(
            len(a) == len(b) and all(x is y for x, y in zip(a, b)) for a, b in zip(got, out_groups)
        )

    def matches(self, merged: Merged) -> bool:
        """Whether the inputs kept their structure and the same Variables changed."""
        assert merged.snapshot is not None
        if not merged.snapshot.unchanged():
            return False
        leaves, unchanged = merged.leaves, merged.unchanged_input
        return all(unchanged(leaves[i]) == c for i, c in zip(self.variables, self.changed))

    def read(self, merged: Merged, out_leaves: Sequence[Any]) -> tuple[list[Any], ...]:
        """The output groups of a matching call."""
        leaves = merged.leaves

        def value(from_output: bool, k: int) -> Any:
            if from_output:
                return out_leaves[k]
            leaf = leaves[k]
            return leaf.raw_value if is_variable(leaf) else leaf

        # Unpacked in the loop (a tuple unpack is cheaper than two field reads).
        return tuple([value(o, k) for o, k in group] for group in self.fetch)


def try_template(
    template: OutTemplate | None,
    merged: Merged,
    output: Any,
    on_output_leaf: Callable[[Any, Any], None] | None,
) -> TemplateMatch:
    """Step 4 through ``template`` instead of the walk (``out_static`` ``None``: no match)."""
    if template is None:
        return _NO_MATCH
    out_leaves: list[Any] = []
    if plain_structure(output, out_leaves) != template.structure:
        return _NO_MATCH
    if [merged.unchanged_input(x) for x in out_leaves] != template.out_inputs:
        return _NO_MATCH
    if on_output_leaf is not None:
        for leaf, prefix in zip(merged.leaves, merged.prefixes):
            if is_variable(leaf):
                on_output_leaf(leaf, prefix[0])
    if not template.matches(merged):
        return TemplateMatch(True, None)
    return TemplateMatch(True, template.out_static, template.read(merged, out_leaves))


class Templates:
    """The templates of one transform, by input structure (``Inner(templates=...)``)."""

    __slots__ = ("by_input",)

    def __init__(self) -> None:
        self.by_input: dict[Any, OutTemplate] = {}

    def try_reuse_split(
        self,
        in_static: Any,
        merged: Merged,
        output: Any,
        on_output_leaf: Callable[[Any, Any], None] | None,
    ) -> TemplateMatch:
        """The split of an earlier call with the same input structure, if this call matches."""
        if not is_hashable(in_static):  # e.g. in_axes holding a dict: no templates
            return _NO_MATCH
        return try_template(self.by_input.get(in_static), merged, output, on_output_leaf)

    def record(
        self,
        in_static: Any,
        merged: Merged,
        output: Any,
        walk_leaves: Sequence[tuple[Any, Any]],
        out_static: OutStatic,
        out_groups: Sequence[Sequence[Any]],
    ) -> None:
        """Makes a template of this call if it qualifies and reproduces the call."""
        if not out_static.inputs_kept or not is_hashable(in_static) or in_static in self.by_input:
            return
        # Only arguments' own arrays may be raw leaves (others change without a structural change).
        if any(
            len(path) > 2 and not is_variable(leaf)
            for path, leaf in zip(in_static.graphdef.leaf_paths, merged.leaves)
        ):
            return
        out_leaves: list[Any] = []
        structure = plain_structure(output, out_leaves)
        if structure is None:
            return
        template = OutTemplate(
            structure, out_static, merged, out_leaves, walk_leaves, len(out_groups)
        )
        if template.reproduces(out_groups, merged, out_leaves):
            if len(self.by_input) >= 64:
                self.by_input.clear()
            self.by_input[in_static] = template
