"""A first export written by git: a scratch index and ``git checkout-index``.

A cold export (no stamp, DEST empty: the "direct" run of :mod:`overlay.export`) lets
git write the files: the tree is read into a scratch index (``git read-tree``, before
the journal, so that a tree git refuses falls back to the Python writer with nothing
written), then ``git checkout-index -a`` writes every file into DEST in place, as the
Python writer of a direct run would, and one ``lstat`` per file afterwards takes the
``[size, mtime_ns]`` the stamp records. One git process writing 1,000 files costs less
CPU than ``git archive | tar -x`` and less than Python writing them one by one.

Nothing git does may change a byte: the git store's configuration is sanitized
(:mod:`overlay.git.run`, ``core.autocrlf=false``), and the attributes that could
convert content (``text``, ``eol``, ``ident``, ``filter``, ``working-tree-encoding``)
come only from files the checkout is told to ignore (the system and the user's
attributes files) or that :func:`git_may_write` rules out (a ``.gitattributes`` in the
tree, the store's ``info/attributes``): with one of those the export is written by
Python. Every file is checked afterwards anyway (type and size against the blob),
and one git did not write exactly is written again by Python.

Crash safety is that of a direct run: the journal (``"direct": true``) is written
before git starts, git creates each file with ``O_EXCL`` and writes it in place, so a
kill leaves files that are complete, cut short (the start of their blob: the next
export completes them) or absent. The child holds DEST's lock (the descriptor is passed
to it): when overlay is killed while git writes, the next export waits for git to end.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator

from overlay.errors import GitError
from overlay.export.disk import checkpoint, replace_file, safe_parent
from overlay.git.store import Store, run_git

#: path -> ``(mode, blob)`` of a tree's entries (as :mod:`overlay.export`).
Entries = dict[str, tuple[str, str]]

#: The configuration of the checkout on top of the store's: no attributes file of the
#: user's (``core.attributesFile`` defaults to ``~/.config/git/attributes``, read even
#: with the global configuration hidden), links as links, every entry written.
_CHECKOUT_CONFIG = {
    "core.attributesFile": os.devnull,
    "core.symlinks": "true",
    "core.sparseCheckout": "false",
}


def git_may_write(store: Store, entries: Entries) -> bool:
    """True when ``git checkout-index`` writes every blob of ``entries`` byte for byte.

    False when an attributes file git would read is in the tree (a ``.gitattributes``
    anywhere, compared without case: a file system that folds case would let it act) or
    in the store (``info/attributes``); the export is then written by Python.

    Args:
        store: the git store; entries: the tree's listing, path -> ``(mode, blob)``.
    """
    if os.path.exists(os.path.join(store.git_dir, "info", "attributes")):
        return False
    return not any(
        path.rpartition("/")[2].casefold() == ".gitattributes" for path in entries
    )


@contextlib.contextmanager
def scratch_checkout(
    store: Store, tree: str, entries: Entries | None
) -> Iterator[dict[str, str] | None]:
    """A scratch index holding ``tree``, for :func:`check_out`, during a ``with`` block.

    Args:
        store: the git store; tree: the tree to export.
        entries: its listing when git is to write it (``None``: it is not).
    Yields:
        The environment naming the index, or ``None`` when git is not to write the tree
        (no ``entries``, :func:`git_may_write` says no, or ``git read-tree`` refused a
        path): the caller writes the files itself.
    """
    if entries is None or not git_may_write(store, entries):
        yield None
        return
    with store.scratch_index() as env:
        proc = store.git("read-tree", tree, env=env, check=False)
        yield env if proc.returncode == 0 else None


def check_objects(store: Store, oids: list[str]) -> dict[str, int]:
    """Every object is in the store (:meth:`~overlay.git.store.Store.object_sizes`: the
    run's reader, else one ``git cat-file --batch-check``), one checkpoint each.

    Returns:
        object -> size.
    Raises:
        GitError: one is missing (before anything is written; exit 2).
    """
    sizes: dict[str, int] = {}
    for oid, size in zip(oids, store.object_sizes(oids), strict=True):
        if size is None:
            raise GitError(f"object {oid} is missing from the git store")
        sizes[oid] = size
        checkpoint()
    return sizes


@contextlib.contextmanager
def _umask(mask: int) -> Iterator[None]:
    """The process's umask set to ``mask`` for a ``with`` block (a child started in it
    inherits it), then put back."""
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def _checkout_env(index: dict[str, str], dest: str) -> dict[str, str]:
    """The environment of ``checkout-index``: the scratch index, DEST as work tree, no
    system attributes file, and :data:`_CHECKOUT_CONFIG` (``GIT_CONFIG_COUNT``)."""
    env = {**index, "GIT_WORK_TREE": dest, "GIT_ATTR_NOSYSTEM": "1"}
    env["GIT_CONFIG_COUNT"] = str(len(_CHECKOUT_CONFIG))
    for i, (key, value) in enumerate(_CHECKOUT_CONFIG.items()):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return env


def check_out(
    store: Store,
    dest: str,
    index: dict[str, str],
    blobs: Entries,
    sizes: dict[str, int],
    *,
    lock_fd: int,
    mask: int,
) -> dict[str, list]:
    """Write every file of the scratch index into the empty DEST with ``git checkout-index
    -a``; check each and take its stat data.

    Args:
        store: the git store; dest: the export directory (empty but for overlay's files).
        index: the environment of :func:`scratch_checkout`.
        blobs: path -> ``(mode, blob)``, the index's entries.
        sizes: blob -> size (from ``git cat-file --batch-check``).
        lock_fd: DEST's lock, held by the child too.
        mask: the process's umask (the directories git makes are given its modes).
    Returns:
        path -> ``[size, mtime_ns, blob]``, what the stamp records.
    Raises:
        GitError: git was killed (a signal); DEST then holds a partial direct export
            that a plain re-export completes.
    """
    # Without -f git never replaces what is there; umask 022 makes git's modes exactly
    # 0644 and 0755, as the Python writer's, already when each file is created (a kill
    # before a chmod pass must not leave other modes for the next run to adopt).
    with _umask(0o022):
        proc = run_git(
            ["checkout-index", "-a"],
            git_dir=store.git_dir,
            cwd=dest,
            env=_checkout_env(index, dest),
            check=False,
            pass_fds=(lock_fd,),
        )
    if proc.returncode < 0:
        raise GitError(f"git checkout-index was killed (signal {-proc.returncode})")
    checkpoint()
    if mask != 0o022:
        _directory_modes(dest, blobs, 0o777 & ~mask)
    final, redo = _stat_files(dest, blobs, sizes)
    if redo:
        # git exited with an error or wrote something else (nothing known does): these
        # files are written the usual way, which stays inside DEST or refuses.
        dest_real, checked = os.path.realpath(dest), set[str]()
        contents = store.read_objects([blobs[p][1] for p in redo])
        for path, (_kind, data) in zip(redo, contents, strict=True):
            mode, oid = blobs[path]
            safe_parent(dest_real, dest, path, checked)
            final[path] = [
                *replace_file(os.path.join(dest, path), path, data, mode),
                oid,
            ]
    return final


def _stat_files(
    dest: str, blobs: Entries, sizes: dict[str, int]
) -> tuple[dict[str, list], list[str]]:
    """One ``lstat`` per file git wrote: ``[size, mtime_ns, blob]`` of those that are what
    the blob says (type, size and mode), and the paths that are not (to write again)."""
    final: dict[str, list] = {}
    redo = []
    for path, (mode, oid) in blobs.items():
        full = os.path.join(dest, path)
        try:
            st = os.lstat(full)
        except OSError:
            redo.append(path)
            continue
        link = mode == "120000"
        if (
            (stat.S_ISLNK(st.st_mode) if link else stat.S_ISREG(st.st_mode))
            and st.st_size == sizes.get(oid)
            and (link or stat.S_IMODE(st.st_mode) == _perm(mode))
        ):
            final[path] = [st.st_size, st.st_mtime_ns, oid]
        else:
            redo.append(path)
    return final, redo


def _perm(mode: str) -> int:
    """The permissions an exported file of git ``mode`` has."""
    return 0o755 if mode == "100755" else 0o644


def _directory_modes(dest: str, blobs: Entries, perm: int) -> None:
    """Give the directories git made the modes the umask gives a directory that Python
    makes (git made them under umask 022)."""
    done = set()
    for path in blobs:
        parent = path.rpartition("/")[0]
        while parent and parent not in done:
            done.add(parent)
            with contextlib.suppress(OSError):
                os.chmod(os.path.join(dest, parent), perm)
            parent = parent.rpartition("/")[0]
