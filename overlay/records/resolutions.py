"""The resolutions ``patches-rocm/resolved/PATH``: every reader and writer of them.

A resolution is a whole file: the content of PATH where the fork delta conflicts with
the pin (docs/design.md §3 and §5). ``PATH`` is a repository path, written with ``/``;
the files are read as records (:func:`overlay.fs.reading.read_record_dir`: regular
files inside the repository, no symlink followed, size-capped).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from overlay import layout
from overlay.fs.atomic import atomic_write, prune_empty, write_if_changed
from overlay.fs.paths import check_path
from overlay.fs.reading import RecordError, read_record_dir, scan_record_dir


def _full(root: str, path: str) -> str:
    """``<root>/patches-rocm/resolved/<path>`` for the file system."""
    return os.path.join(layout.under(root, layout.RESOLVED_DIR), *path.split("/"))


def read_resolutions(root: str) -> dict[str, bytes]:
    """Every resolution of ``root``, keyed by repository path, sorted.

    Raises:
        RecordError: a refused entry (exit 2); UnsafePath: a hostile name.
    """
    out = read_record_dir(root, layout.RESOLVED_DIR, what="resolution")
    for rel in out:
        check_path(rel, what="resolution")
    return dict(sorted(out.items()))


def scan_resolutions(
    root: str, *, skip_ignored: bool = True
) -> tuple[dict[str, bytes], list[RecordError]]:
    """The resolutions that can be read and one error per refused entry, never raising
    for what the directory holds (``verify`` reports each error as a finding).

    Args:
        root: the overlay repository.
        skip_ignored: leave out what git ignores (default); ``False`` reads everything
            without asking git.
    Returns:
        ``({path: bytes}, [RecordError, ...])`` as
        :func:`overlay.fs.reading.scan_record_dir` gives them; the paths are not
        checked (a hostile one is the caller's finding).
    """
    return scan_record_dir(
        root, layout.RESOLVED_DIR, what="resolution", skip_ignored=skip_ignored
    )


def write_resolution(root: str, path: str, data: bytes) -> None:
    """Write the resolution of ``path`` (temp + rename; its directories made).

    Raises:
        OSError: it cannot be written.
    """
    full = _full(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    atomic_write(full, data)


def write_resolutions(
    root: str, wanted: Mapping[str, bytes], present: Iterable[str]
) -> None:
    """Make ``patches-rocm/resolved/`` hold exactly ``wanted``: each ``present`` path
    not wanted is deleted, each wanted file written unless it already holds those
    bytes, and the directories left empty removed.

    Args:
        root: the overlay repository.
        wanted: repository path -> the resolution's bytes.
        present: the resolutions on disk (:func:`read_resolutions` or
            :func:`scan_resolutions` names them).
    Raises:
        OSError: a file cannot be deleted or written.
    """
    for path in present:
        if path not in wanted:
            os.unlink(_full(root, path))
    for path, data in wanted.items():
        full = _full(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        write_if_changed(full, data)
    prune_resolution_dirs(root)


def prune_resolution_dirs(root: str) -> None:
    """Remove the empty directories under ``patches-rocm/resolved/`` (the directory
    too, when nothing is left in it)."""
    prune_empty(layout.under(root, layout.RESOLVED_DIR))
