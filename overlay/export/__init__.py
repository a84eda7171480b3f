"""Incremental, resumable export of a layer tree into a directory (docs/design.md §5).

Only paths that differ from the last export are written; deleted paths are
removed (and directories left empty by them); unchanged files keep their
mtimes, so ninja rebuilds only what changed.

The export is a transaction recorded in the stamp ``DEST/.overlay-export.json``:

1. Before the first write, the stamp records the run in progress: the target
   tree and every path it will write (with its blob) or remove, next to the
   last finished tree and each file's ``[size, mtime_ns, blob]`` as it is on
   disk at that moment.
2. Each file is written to ``.NAME.XXXXXXXX.tmp`` in its directory and renamed;
   a first export into an empty directory writes them in place instead, with
   one ``git checkout-index`` (:mod:`overlay.export.checkout`), or with Python
   where git's attributes could change a byte.
3. The stamp is rewritten last with the finished tree and no run in progress.

A run killed anywhere leaves a stamp from which a plain re-export completes the
job: a file of the interrupted run counts as overlay's when its content is the
recorded one or the one the run was writing, and the temp files it left are
removed. A file whose content differs from both (compared by git blob hash when
its size or mtime changed) was edited by hand and is never overwritten or
deleted without ``--force``; a file that already holds what the new tree
writes is not an edit.

The export's parts: :mod:`overlay.export.run` (the run itself, in named steps),
:mod:`overlay.export.stamp` (the stamp: read, written, the files edited by hand),
:mod:`overlay.export.disk` (what DEST holds, the writers that stay inside it, the
test checkpoints), :mod:`overlay.export.checkout` (the blobs looked up, a first
export written by git), :mod:`overlay.export.links` (a tree's entries and symlinks).
This package imports each name from its module when first used
(:mod:`overlay.lazy`): ``status`` reads stamps without loading the run.
"""

from typing import TYPE_CHECKING

from overlay.lazy import attach

if TYPE_CHECKING:
    from overlay.export.links import LINKS_CACHE, tree_links, unsafe_tree_links
    from overlay.export.run import ExportResult, export_tree
    from overlay.export.stamp import edited_files, edited_note, read_stamp

# Each name is imported from its module when first used (overlay.lazy).
__getattr__, __dir__ = attach(
    __name__,
    {
        "ExportResult": "run",
        "export_tree": "run",
        "edited_files": "stamp",
        "edited_note": "stamp",
        "read_stamp": "stamp",
        "LINKS_CACHE": "links",
        "tree_links": "links",
        "unsafe_tree_links": "links",
    },
)

__all__ = [
    "LINKS_CACHE",
    "ExportResult",
    "edited_files",
    "edited_note",
    "export_tree",
    "read_stamp",
    "tree_links",
    "unsafe_tree_links",
]
