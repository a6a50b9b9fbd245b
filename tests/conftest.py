"""Test-suite configuration: hypothesis profiles and strict JAX numerics.

Hypothesis profiles (choose with ``pytest --hypothesis-profile=NAME``; the
Makefile passes ``ci`` when ``$CI`` is set and ``dev`` otherwise; a plain
``pytest`` run uses ``ci`` when ``$CI`` is set, else ``dev``):

* ``dev``: thorough, 200 examples per property;
* ``ci``: bounded, 15 examples per property, no ``too_slow`` health check.

Both turn the per-example deadline off: the first example of a test compiles
with ``jax.jit``, which would trip any fixed deadline.

JAX runs with ``jax_numpy_rank_promotion='raise'``, so implicit broadcasting of
arrays of different ranks (a classic silent bug in layer code) fails loudly.
"""

import os

import jax
from hypothesis import HealthCheck, settings

settings.register_profile("dev", max_examples=200, deadline=None)
settings.register_profile(
    "ci",
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
# `--hypothesis-profile` (read by hypothesis's pytest plugin after this file is
# imported) overrides this default.
settings.load_profile("ci" if os.environ.get("CI") else "dev")

jax.config.update("jax_numpy_rank_promotion", "raise")


def pytest_terminal_summary(terminalreporter):
    """Ends the run with the number of call sequences the differential property of
    ``tests/transforms/test_call_sequences.py`` ran (its tests record it as the
    ``call_sequences`` user property; the count travels with the report, so it is
    right under pytest-xdist too)."""
    total = distinct = tests = 0
    for outcome in ("passed", "failed"):
        for report in terminalreporter.stats.get(outcome, []):
            props = dict(getattr(report, "user_properties", ()))
            if "call_sequences" in props and report.when == "call":
                tests += 1
                total += props["call_sequences"]
                distinct += props["distinct_call_sequences"]
    if tests:
        terminalreporter.write_line(
            f"call sequences run: {total} ({distinct} distinct) in {tests} tests"
        )
