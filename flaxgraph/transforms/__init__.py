"""JAX-style transforms that accept objects: one lifting machine, many transforms."""
