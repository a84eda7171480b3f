"""Git trees computed in Python, for a run of small edits of one tree.

The stepwise apply needs the tree after every patch of the series. Asking git for
each one (``git write-tree`` on an index) costs a process per patch; here the
trees are computed from the tree below the series (one ``git ls-tree -r -t``
listing, or, inside :meth:`overlay.git.store.Store.reading`, only the directories
on the way to an edit, read by the store's ``cat-file``) and the entries git's
apply produced, and every new tree object is written to the store in one go
(:func:`write_objects`: loose files written here, or one ``git index-pack`` for
many; :func:`overlay.git.loose.write_typed`). The
objects are git's own format, so their names are the ones ``git write-tree``
gives for the same index (``tests/test_engine_chain.py`` and
``tests/test_git_treemodel.py`` compare them). A rebase builds its fork layer
the same way (:func:`edit_tree`), its resolution blobs in the same write.

Only SHA-1 stores are handled (the object names are computed here); a caller
falls back to git for anything else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from operator import itemgetter

from overlay.digests import sha1
from overlay.git.loose import write_typed
from overlay.git.objects import parse_ls_tree
from overlay.git.store import EMPTY_TREE, Store

_TREE_MODE = "40000"
#: The sort key of an entry of :func:`_entry` (its third item), as a C function.
_SORT_KEY = itemgetter(2)


class TreeConflict(Exception):
    """An edit would put a file where a directory is, or under a file (git refuses it too)."""


class TreeModel:
    """A tree and the edits made to it, with the new tree objects computed on demand.

    Args:
        listing: ``(mode, kind, oid, path)`` for every entry of the tree, directories
            included (``git ls-tree -r -t -z --full-tree``; see :func:`listing`).
        root: the tree's own name.
        loader: instead of a listing, reads one directory's entries by its tree name
            (:meth:`overlay.git.objects.ObjectReader.tree`): only the directories on the
            way to an edit are read (see :func:`tree_model`).
    """

    def __init__(
        self,
        listing: Iterable[tuple[str, str, str, str]],
        root: str,
        loader: Callable[[str], list[tuple[str, str, str, str]]] | None = None,
    ):
        self._loader = loader
        self._raw: dict[str, list[tuple[str, str, str, str]]] = {}
        for mode, kind, oid, path in listing:
            parent, _, name = path.rpartition("/")
            self._raw.setdefault(parent, []).append((mode, kind, oid, name))
        # dir -> name -> (mode, oid, sort key, encoded entry); a directory's mode is 40000
        self._dirs: dict[str, dict[str, tuple[str, str, bytes, bytes]]] = {}
        self._oid: dict[str, str | None] = {"": root}
        self._dirty: set[str] = set()
        self.objects: dict[str, bytes] = {}  # new tree objects: name -> content

    def _dir(self, path: str) -> dict[str, tuple[str, str, bytes, bytes]]:
        """The entries of directory ``path``, read from the listing on first use."""
        entries = self._dirs.get(path)
        if entries is None:
            entries = {}
            raw = self._raw.pop(path, None)
            oid = self._oid.get(path)
            if raw is None and self._loader is not None and oid:
                raw = self._loader(oid)
            for mode, kind, oid, name in raw or ():
                entries[name] = _entry(
                    name, _TREE_MODE if kind == "tree" else mode, oid
                )
                if kind == "tree":
                    self._oid[f"{path}/{name}" if path else name] = oid
            self._dirs[path] = entries
        return entries

    def _touch(self, directory: str) -> None:
        """Mark ``directory`` and every directory above it for rewriting."""
        while True:
            self._dirty.add(directory)
            if not directory:
                return
            directory = directory.rpartition("/")[0]

    def set(self, path: str, mode: str, oid: str) -> None:
        """Put a blob (or gitlink) ``oid`` with ``mode`` at ``path``, making directories on the way.

        Raises:
            TreeConflict: a file is on the way, or a directory is at ``path``.
        """
        parts = path.split("/")
        directory = ""
        for part in parts[:-1]:
            entries = self._dir(directory)
            child = f"{directory}/{part}" if directory else part
            have = entries.get(part)
            if have is None:
                entries[part] = (_TREE_MODE, "", b"", b"")
                self._dirs[child] = {}
                self._oid[child] = None
            elif have[0] != _TREE_MODE:
                raise TreeConflict(f"{child} is a file, {path} cannot be made under it")
            directory = child
        entries = self._dir(directory)
        have = entries.get(parts[-1])
        if have is not None and have[0] == _TREE_MODE:
            raise TreeConflict(f"{path} is a directory")
        entries[parts[-1]] = _entry(parts[-1], mode, oid)
        self._touch(directory)

    def remove(self, path: str) -> None:
        """Remove the file at ``path`` (nothing when it is absent).

        Raises:
            TreeConflict: ``path`` is a directory.
        """
        parts = path.split("/")
        directory = ""
        for part in parts[:-1]:
            have = self._dir(directory).get(part)
            if have is None or have[0] != _TREE_MODE:
                return  # nothing of that name on the way: the path is absent
            directory = f"{directory}/{part}" if directory else part
        name = parts[-1]
        entries = self._dir(directory)
        have = entries.get(name)
        if have is None:
            return
        if have[0] == _TREE_MODE:
            raise TreeConflict(f"{path} is a directory")
        del entries[name]
        self._touch(directory)

    def write(self) -> str:
        """The name of the tree as it is now; every new tree object is added to :attr:`objects`.

        Directories left empty disappear, as ``git write-tree`` leaves them out.
        """
        for directory in sorted(
            self._dirty, key=lambda d: d.count("/") + (1 if d else 0), reverse=True
        ):
            entries = self._dirs[directory]
            parent, _, name = directory.rpartition("/")
            if not entries and directory:
                del self._dirs[directory]
                self._oid.pop(directory, None)
                self._dir(parent).pop(name, None)
                continue
            oid = _tree_object(entries.values(), self.objects)
            self._oid[directory] = oid
            if directory:
                self._dir(parent)[name] = _entry(name, _TREE_MODE, oid)
        self._dirty.clear()
        return self._oid[""] or EMPTY_TREE


def _entry(name: str, mode: str, oid: str) -> tuple[str, str, bytes, bytes]:
    """``(mode, oid, sort key, encoded)`` of one tree entry: git sorts a directory as if
    its name ended in ``/``; the encoding is ``<mode> <name>NUL<20-byte name>``."""
    raw = name.encode("utf-8", "surrogateescape")
    key = raw + b"/" if mode == _TREE_MODE else raw
    return (
        mode,
        oid,
        key,
        b"%s %s\0" % (mode.encode(), raw) + bytes.fromhex(oid) if oid else b"",
    )


def _tree_object(
    entries: Iterable[tuple[str, str, bytes, bytes]], objects: dict[str, bytes]
) -> str:
    """Hash one tree object from its entries (see :func:`_entry`) in git's order; add it
    to ``objects``; return its name."""
    body = b"".join([e[3] for e in sorted(entries, key=_SORT_KEY)])
    oid = sha1(b"tree %d\0" % len(body) + body).hexdigest()
    objects[oid] = body
    return oid


def listing(store: Store, tree: str) -> list[tuple[str, str, str, str]]:
    """Every entry of ``tree``, directories included: ``[(mode, kind, oid, path), ...]``
    (one ``git ls-tree -r -t -z``)."""
    return list(
        parse_ls_tree(
            store.git("ls-tree", "-r", "-t", "-z", "--full-tree", tree).stdout
        )
    )


def tree_model(store: Store, tree: str) -> TreeModel:
    """A :class:`TreeModel` of ``tree``: inside :meth:`Store.reading`, reading only the
    directories it needs through the store's reader (no git process: a run edits a few
    directories of a tree of a thousand files), else from :func:`listing`."""
    reader = store.reader
    if reader is not None:
        return TreeModel((), tree, loader=reader.tree)
    return TreeModel(listing(store, tree), tree)


def remember_trees(store: Store, objects: dict[str, bytes]) -> None:
    """Tell the store's reader (inside :meth:`Store.reading`) about trees just written."""
    if store.reader is not None:
        store.reader.remember_trees(objects)


def write_objects(store: Store, objects: dict[str, bytes], kind: str = "tree") -> None:
    """Write ``objects`` (name -> content, all of type ``kind``) into the store in one go
    (:func:`overlay.git.loose.write_typed`: loose, or one pack for many)."""
    write_typed(store.git_dir, {oid: (kind, body) for oid, body in objects.items()})


def blob_name(data: bytes) -> str:
    """The SHA-1 name git gives ``data`` as a blob (``git hash-object --no-filters``)."""
    return sha1(b"blob %d\0" % len(data) + data).hexdigest()


def edit_tree(
    store: Store,
    tree: str,
    changes: dict[str, tuple[str, str] | None],
    blobs: dict[str, bytes],
) -> str:
    """:meth:`Store.edit_tree` computed here: ``tree`` with ``changes`` (path -> ``(mode,
    oid)``, or ``None`` to delete), its new tree objects and the new ``blobs`` (name ->
    content) written in one go (:func:`overlay.git.loose.write_typed`), where the index
    way takes three git processes (``read-tree``, ``update-index``, ``write-tree``) and a
    ``hash-object`` per blob.

    Inside :meth:`Store.reading` only the directories on the way to an edit are read,
    and the new trees are told to the reader (:func:`tree_model`). A store that is
    not SHA-1, or an edit git's index would refuse (a file where a directory is), goes
    the index way, so git says what it says there.

    Returns:
        The new tree's name (the one ``git write-tree`` gives for the same index).
    """
    if not changes and not blobs:
        return tree
    typed = {oid: ("blob", data) for oid, data in blobs.items()}
    model = tree_model(store, tree) if len(tree) == 40 else None
    try:
        if model is None:
            raise TreeConflict("not a SHA-1 store")
        for path, entry in changes.items():
            if entry is None:
                model.remove(path)
            else:
                model.set(path, *entry)
        new = model.write()
    except TreeConflict:
        for data in blobs.values():
            store.hash_blob(data)
        return store.edit_tree(tree, changes)
    typed.update((oid, ("tree", body)) for oid, body in model.objects.items())
    write_typed(store.git_dir, typed)
    remember_trees(store, model.objects)
    return new
