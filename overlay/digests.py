"""SHA-1 and SHA-256 hash objects: CPython's own implementation for small inputs,
OpenSSL's (:mod:`hashlib`) for large ones.

Importing :mod:`hashlib` loads OpenSSL, which costs a command more than hashing what
most of overlay's digests cover (the objects of a few trees and commits written, the
cache key of a few kilobytes of records); OpenSSL's hashing is several times faster
per byte. So :func:`sha1` and :func:`sha256` give CPython's own (``_sha1``, and
``_sha256``, named ``_sha2`` from 3.12) until the process has given it :data:`BULK`
bytes in all, and OpenSSL's from then on (or from the start, when :mod:`hashlib` is
loaded already): a command that hashes little never loads OpenSSL, and one that hashes
much (the trees of a long series) pays the slower hashing for at most what the import
costs. The digests are the same.
"""

from __future__ import annotations

import functools
import importlib
import sys
from typing import Any

#: From this many bytes hashed in the process on, OpenSSL's: about what CPython's own
#: SHA-1 hashes in the time the import of OpenSSL takes (measured on the benchmark
#: machine, docs/engine.md).
BULK = 1 << 19

#: The bytes given to CPython's own implementations so far in this process.
_given = [0]

# the module of this version first: a failed import searches the whole path
_OWN = {
    "sha1": ("_sha1",),
    "sha256": ("_sha2", "_sha256") if sys.version_info >= (3, 12) else ("_sha256",),
}


def sha1(data: bytes = b"", size: int = 0) -> Any:
    """A SHA-1 hash object of ``data``.

    Args:
        data: the first bytes hashed.
        size: how many bytes the caller hashes in all, when it goes on with
            ``update`` (the larger of this and ``len(data)`` is what is counted).
    Returns:
        A :mod:`hashlib`-style object (``update``, ``digest``, ``hexdigest``).
    """
    return _constructor("sha1", max(size, len(data)))(data)


def sha256(data: bytes = b"", size: int = 0) -> Any:
    """A SHA-256 hash object of ``data``; the arguments and the result as for :func:`sha1`."""
    return _constructor("sha256", max(size, len(data)))(data)


def _constructor(name: str, size: int) -> Any:
    """``name``'s constructor for an input of ``size`` bytes (counted in :data:`_given`
    when it is CPython's own)."""
    if _given[0] + size < BULK and "hashlib" not in sys.modules:
        own = _own(name)
        if own is not None:
            _given[0] += size
            return own
    import hashlib  # OpenSSL's: a large input, or a Python without its own

    return getattr(hashlib, name)


@functools.cache
def _own(name: str) -> Any:
    """CPython's own constructor of ``name``, or ``None`` where this Python has none."""
    for module in _OWN[name]:
        try:
            return getattr(importlib.import_module(module), name)
        except ImportError:
            continue
    return None


__all__ = ["BULK", "sha1", "sha256"]
