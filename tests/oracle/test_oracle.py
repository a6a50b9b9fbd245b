"""The differential oracle: generated programs run on Flax NNX 0.12.8 and on flaxgraph.

Each example is a program (``oracle_programs.programs()``: a module graph whose attributes
are Python and NumPy scalars, NumPy and JAX arrays, typed and raw keys, dtypes, enums,
functions, partials, dataclass configs, PartitionSpecs, plain containers of these,
Variables of built-in and user kinds, ``Rngs`` from an int, a typed key or a raw key,
shared and nested sub-modules of user subclasses), built once per library per operation.
Every operation of ``oracle_run.OPERATIONS`` runs on both; where Flax succeeds flaxgraph
must give the same State paths, values and static attributes, outputs and updates;
where Flax raises, flaxgraph must raise. A difference passes only if a deviation listed
in ``tests/conformance/oracle_deviations.txt`` explains it.

How many examples: the hypothesis profile's ``max_examples``, at least 25 (the ``ci``
profile's 15 is raised to 25, derandomized so CI runs are repeatable), at most 60 so that ``make test`` stays
quick; ``ORACLE_EXAMPLES=N`` sets it. The thorough local run::

  ORACLE_EXAMPLES=2000 .venv/bin/python -m pytest -p no:randomly -n 2 tests/oracle
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, note, settings
from oracle_compare import compare
from oracle_programs import programs

_default = settings.default
_examples = int(os.environ.get("ORACLE_EXAMPLES", min(max(_default.max_examples, 25), 60)))
_derandomize = bool(os.environ.get("CI")) and "ORACLE_EXAMPLES" not in os.environ

EAGER = (
    "construct",
    "split_merge",
    "split_filters",
    "update",
    "hash",
    "display",
    "pickle",
    "pytree",
)
TRANSFORMS = ("construct", "jit", "grad", "vmap", "scan")


@pytest.mark.parametrize("ops", [EAGER, TRANSFORMS], ids=["eager", "transforms"])
@settings(
    max_examples=_examples,
    deadline=None,
    derandomize=_derandomize,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(program=programs())
def test_flaxgraph_agrees_with_flax(ops: tuple[str, ...], program) -> None:
    differences = compare(program, ops)
    undocumented = [d for d in differences if d.deviation is None]
    for d in differences:
        note(d.report())
    assert not undocumented, (
        "flaxgraph differs from Flax NNX 0.12.8 on this program, and no deviation of "
        "tests/conformance/oracle_deviations.txt explains it:\n"
        f"{program!r}\n" + "\n".join(d.report() for d in undocumented)
    )
