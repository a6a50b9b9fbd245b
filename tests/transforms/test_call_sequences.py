"""Correct numbers by construction (#36): every public transform, called again and
again with values that change, repeat and change type at every place a value can
be, returns what its general path, the eager call and real Flax NNX 0.12.8 return,
and leaves the model as they leave it (``call_sequences.py`` says how).

The property runs per transform: 2 sequences each at the ``ci`` profile, half the
profile's examples (100 per transform, 2,200 in all) at ``dev``;
``CALL_SEQUENCES=N`` sets N sequences per transform. Each test records how many
sequences it ran (the ``call_sequences`` user property), and the run ends with
their total (``tests/conftest.py``, "call sequences run").
``test_the_property_fails_when_the_check_is_type_only`` proves it can fail: with
the plan's generated argument checks mutated (in this test only, by replacing the
code generator's function for the duration of the test) to compare a static
argument's type instead of the value the general walk recorded, the property's
body reports stale calls. (On the issue's start commit, 9ca6d0d, it fails on a NumPy scalar
argument: the general walk made it static, the plan read it as a leaf.)
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from call_sequences import TRANSFORMS, Sequence, run_sequence, sequences
from hypothesis import given, settings

from flaxgraph.graphlib.registry import is_node_or_variable
from flaxgraph.testing.values import NpScalar, PyScalar
from flaxgraph.transforms import plan_code
from flaxgraph.transforms.plan import CheckKind

_PROFILE = settings().max_examples
_EXAMPLES = int(os.environ.get("CALL_SEQUENCES", 2 if _PROFILE < 100 else _PROFILE // 2))
_JIT = next(t for t in TRANSFORMS if t.name == "jit")


@pytest.mark.parametrize("transform", TRANSFORMS, ids=[t.name for t in TRANSFORMS])
def test_a_call_sequence_computes_what_the_general_path_eager_call_and_flax_compute(
    transform, record_property
):
    ran: list[Sequence] = []

    @settings(max_examples=_EXAMPLES)
    @given(sequences())
    def check(seq: Sequence) -> None:
        ran.append(seq)
        problems = run_sequence(transform, seq)
        assert not problems, "\n".join(problems)

    try:
        check()
    finally:
        # Every sequence hypothesis ran, shrinking included; distinct ones apart.
        record_property("call_sequences", len(ran))
        record_property("distinct_call_sequences", len(set(map(repr, ran))))


def _type_only(generate: Any) -> Any:
    """The argument-check generator with every identity check of a static value made
    a type check: the deliberate mutation (a check that tests only the type)."""

    def mutated(src: Any, plan: Any) -> None:
        kept = plan.arg_checks
        plan.arg_checks = tuple(
            c._replace(kind=CheckKind.TYPE, expected=type(c.expected))
            if c.kind is CheckKind.IS and not is_node_or_variable(c.expected)
            else c
            for c in kept
        )
        try:
            generate(src, plan)
        finally:
            plan.arg_checks = kept

    return mutated


def test_the_property_fails_when_the_check_is_type_only(monkeypatch):
    monkeypatch.setattr(plan_code, "_signature_checks", _type_only(plan_code._signature_checks))
    # A string argument is static (as in jax.jit's static arguments): another string
    # in its place must retrace, and a type check lets the plan replay instead.
    values = (PyScalar("ab"), PyScalar(""), PyScalar("ab"), PyScalar(""))
    assert run_sequence(_JIT, Sequence("positional", values))
    # The same inside a dict argument and as a keyword argument.
    assert run_sequence(_JIT, Sequence("dict_arg", values))
    assert run_sequence(_JIT, Sequence("keyword", values))


def test_the_start_commits_stale_replay_is_caught_and_gone():
    """The issue's own case: NumPy scalar arguments that change. On the issue's start
    commit (9ca6d0d) this sequence's calls 1-3 replay call 0's result (run with
    ``PYTHONPATH`` at a worktree of that commit, ``run_sequence`` returns nine
    problems for each of the three places: calls 1-3 against the general path, the
    eager call and Flax); here it returns none."""
    values = tuple(NpScalar("float32", v) for v in (1.0, 2.0, 3.0, 2.0))
    for place in ("positional", "keyword", "dict_arg"):
        assert run_sequence(_JIT, Sequence(place, values)) == [], place
