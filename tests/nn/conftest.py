"""Shared NumPy references for the layer tests (as fixtures: the test directories
are not packages)."""

import numpy as np
import pytest


def _reference_attention(q, k, v, mask=None):
    """softmax(q kᵀ / sqrt(depth)) v for (B, L, H, D) arrays, in NumPy, one head at a time."""
    q, k, v = map(np.asarray, (q, k, v))
    B, Lq, H, D = q.shape
    out = np.zeros((B, Lq, H, v.shape[-1]))
    for b in range(B):
        for h in range(H):
            logits = q[b, :, h] @ k[b, :, h].T / np.sqrt(D)
            if mask is not None:
                logits = np.where(np.asarray(mask)[b, 0] > 0, logits, -np.inf)
            w = np.exp(logits - logits.max(-1, keepdims=True))
            w = w / w.sum(-1, keepdims=True)
            out[b, :, h] = w @ v[b, :, h]
    return out


@pytest.fixture
def reference_attention():
    return _reference_attention
