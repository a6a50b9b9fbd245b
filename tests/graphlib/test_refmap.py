"""Tests of flaxgraph/graphlib/refmap.py: identity-keyed maps that keep keys alive."""

import gc
import weakref

import pytest

from flaxgraph.graphlib.refmap import RefMap


def test_keys_by_identity_not_equality():
    a, b = [1], [1]
    m = RefMap()
    m[a] = "a"
    m[b] = "b"
    assert a == b and len(m) == 2
    assert m[a] == "a" and m[b] == "b"
    assert a in m and b in m and [1] not in m


def test_unhashable_keys_are_fine():
    d = {}
    m = RefMap()
    m[d] = 1
    assert m[d] == 1


def test_get_default_delete_and_iteration_order():
    a, b, c = object(), object(), object()
    m = RefMap()
    m[a], m[b], m[c] = 1, 2, 3
    assert m.get(a) == 1 and m.get(object()) is None and m.get(object(), 7) == 7
    del m[b]
    assert list(m) == [a, c]
    assert list(m.values()) == [1, 3]
    assert list(m.items()) == [(a, 1), (c, 3)]
    with pytest.raises(KeyError):
        m[b]
    with pytest.raises(KeyError):
        del m[b]


def test_overwrite_keeps_one_entry():
    a = object()
    m = RefMap()
    m[a] = 1
    m[a] = 2
    assert len(m) == 1 and m[a] == 2


def test_keys_are_kept_alive():
    class Node:
        pass

    m = RefMap()
    n = Node()
    ref = weakref.ref(n)
    m[n] = 0
    del n
    gc.collect()
    assert ref() is not None  # the map keeps it alive, so its id cannot be reused
    assert next(iter(m)) is ref()


def test_temporaries_do_not_collide():
    m = RefMap()
    for i in range(100):
        m[[i]] = i  # each temporary list would otherwise free its id for the next one
    assert len(m) == 100
    assert sorted(m.values()) == list(range(100))


def test_repr():
    m = RefMap()
    m[object()] = 1
    assert repr(m) == "RefMap(1 items)"
