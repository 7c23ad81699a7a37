"""Equality that never raises: for comparing static values that may hold anything.

Caches compare static data (Variable metadata, a module's attributes, traced keyword
arguments) with `==`, and that data may be an array (whose `==` is elementwise and
whose truth value is ambiguous), a tracer (whose truth value is unknown until run time)
or a type without a useful `__eq__`. `safe_equal` answers False whenever `==` cannot
give a plain answer, which for a cache means "not provably the same": recompute.
"""

from __future__ import annotations


def safe_equal(a: object, b: object) -> bool:
    """`a is b`, or `bool(a == b)` when that is a plain answer; False when it is not.

    False when `==` or its truth value raises a `TypeError` or `ValueError` (arrays with
    more than one element, tracers, JAX key arrays). Other errors of a broken `__eq__`
    propagate.

    >>> safe_equal(("embed", None), ("embed", None)), safe_equal(np.ones(2), np.ones(2))
    (True, False)
    """
    if a is b:
        return True
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False
