"""A tree's entries and its symlinks, as an export and the checks of ``status`` and
``verify`` read them.

The symlinks of a tree are kept in the store under the tree's name
(:data:`LINKS_CACHE`): ``status`` and ``verify`` ask which of them point out of the
tree (:func:`unsafe_tree_links`) without listing the tree again, and without
loading the export's run (:mod:`overlay.export.run`).
"""

from __future__ import annotations

import contextlib

from overlay.errors import UnsafePath
from overlay.fs.paths import unsafe_links
from overlay.git.store import CatFile, Store, zsplit

#: path -> ``(mode, blob)`` of a tree's entries.
Entries = dict[str, tuple[str, str]]


def tree_entries(store: Store, tree: str) -> Entries:
    """Every file, link and gitlink of ``tree``: path -> ``(mode, oid)`` (one ``ls-tree``)."""
    out = {}
    for rec in zsplit(store.git("ls-tree", "-r", "-z", "--full-tree", tree).stdout):
        meta, path = rec.split("\t", 1)
        mode, _kind, oid = meta.split()
        out[path] = (mode, oid)
    return out


#: The store's directory of each tree's symlinks (:meth:`Store.cache_read`), keyed on the
#: tree's name: a tree never changes, so neither do its links.
LINKS_CACHE = "overlay-links"


def tree_links(
    store: Store,
    tree: str,
    *,
    entries: dict[str, tuple[str, str]] | None = None,
    cat: CatFile | None = None,
) -> dict[str, str]:
    """Every symlink of ``tree``: path -> target (undecodable bytes kept as surrogates).

    Kept in the store under the tree's name (:data:`LINKS_CACHE`): a later question
    about the same tree (``status``, ``verify``, the next export) reads the record
    instead of listing the whole tree and reading each target.

    Args:
        store: git store holding the tree.
        tree: tree SHA.
        entries: the tree's entries when already read (``{path: (mode, oid)}``).
        cat: an open :class:`overlay.git.store.CatFile` to read the targets with.
    Returns:
        ``{path: target}``.
    """
    if entries is None:
        kept = store.cache_read(LINKS_CACHE, tree)
        if kept is not None and isinstance(kept.get("links"), dict):
            return dict(kept["links"])
    entries = entries if entries is not None else tree_entries(store, tree)
    wanted = {p: oid for p, (mode, oid) in entries.items() if mode == "120000"}
    links: dict[str, str] = {}
    if wanted:
        with contextlib.ExitStack() as stack:
            reader = cat if cat is not None else stack.enter_context(store.cat_file())
            links = {
                p: reader.read(oid)[1].decode("utf-8", "surrogateescape")
                for p, oid in wanted.items()
            }
    store.cache_write(LINKS_CACHE, tree, {"links": links})
    return links


def unsafe_tree_links(store: Store, tree: str) -> dict[str, UnsafePath]:
    """The symlinks of ``tree`` that export refuses (:func:`overlay.fs.paths.unsafe_links`).

    Args:
        store: git store holding the tree.
        tree: tree SHA.
    Returns:
        ``{path: UnsafePath}``, in path order.
    """
    return unsafe_links(tree_links(store, tree))
