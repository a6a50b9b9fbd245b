"""Only ``variablelib`` touches a Variable's ``_var_metadata`` slot; other packages use
its accessors (``metadata_of``, ``write_metadata``, ``METADATA_SLOT``)."""

from __future__ import annotations

import re
from pathlib import Path

import jax.numpy as jnp

import flaxgraph as nnx
from flaxgraph.variablelib.variable import METADATA_SLOT, metadata_of, write_metadata

PACKAGE = Path(__file__).resolve().parents[2] / "flaxgraph"


def test_no_module_outside_variablelib_names_the_slot():
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{i}"
        for path in PACKAGE.rglob("*.py")
        if "variablelib" not in path.relative_to(PACKAGE).parts
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\b_var_metadata\b", line)
    ]
    assert offenders == []


def test_accessors_read_and_install_the_stored_dict():
    v = nnx.Param(jnp.ones(2), note="a")
    stored = metadata_of(v)
    assert stored is getattr(v, METADATA_SLOT)  # the dict itself, not a copy
    assert stored == {"note": "a"}
    new = {**stored, "note": "b"}
    write_metadata(v, new)
    assert metadata_of(v) is new and v.note == "b"
    assert v._var_metadata is new  # Flax code reading the slot keeps working
