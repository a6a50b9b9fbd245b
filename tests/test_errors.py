"""Tests of flaxgraph/errors.py: the exception hierarchy and message helpers."""

import pytest

import flaxgraph as nnx
from flaxgraph import errors


@pytest.mark.parametrize(
    ("cls", "std"),
    [
        (errors.TraceContextError, ValueError),
        (errors.GraphStructureError, ValueError),
        (errors.UnmatchedLeafError, ValueError),
        (errors.StaticAttributeError, TypeError),
        (errors.InvalidFilterError, TypeError),
    ],
)
def test_each_error_subclasses_base_and_standard_type(cls, std):
    assert issubclass(cls, errors.FlaxgraphError)
    assert issubclass(cls, std)
    with pytest.raises(std, match="boom"):
        raise cls("boom")


def test_errors_are_exported_at_top_level():
    assert nnx.TraceContextError is errors.TraceContextError
    assert nnx.GraphStructureError is errors.GraphStructureError
    assert nnx.UnmatchedLeafError is errors.UnmatchedLeafError
    assert nnx.StaticAttributeError is errors.StaticAttributeError
    assert nnx.InvalidFilterError is errors.InvalidFilterError
    assert nnx.FlaxgraphError is errors.FlaxgraphError


def test_value_errors_are_not_type_errors():
    assert not issubclass(errors.GraphStructureError, TypeError)
    assert not issubclass(errors.InvalidFilterError, ValueError)


def test_numbered_fixes_formats_one_line_per_fix():
    assert errors.numbered_fixes(["do a;", "or do b."]) == "  1. do a;\n  2. or do b."


def test_numbered_fixes_single_and_empty():
    assert errors.numbered_fixes(["only"]) == "  1. only"
    assert errors.numbered_fixes([]) == ""


def test_numbered_fixes_accepts_any_sequence():
    assert errors.numbered_fixes(("x", "y", "z")).splitlines() == ["  1. x", "  2. y", "  3. z"]
