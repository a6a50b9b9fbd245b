"""Tests of flaxgraph/ids.py."""

import copy

from hypothesis import given
from hypothesis import strategies as st

import flaxgraph as nnx


@given(st.integers(1, 20))
def test_uuids_are_distinct_and_copies_are_new(n):
    ids = [nnx.ids.uuid() for _ in range(n)]
    assert len(set(ids)) == n
    for i in ids:
        assert i == i and hash(i) == hash(i)
        assert copy.copy(i) != i and copy.deepcopy(i) != i
