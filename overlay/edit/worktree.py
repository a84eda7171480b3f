"""The work tree of an edit: a git checkout of the layer, with its objects borrowed
from the git store, and its content read back as a tree of the store."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time

from overlay.edit.session import BRANCH
from overlay.edit.writes import discard, spare_of
from overlay.errors import GitError, OverlayError
from overlay.fs.atomic import atomic_write, remove_dir
from overlay.fs.locks import pid_alive
from overlay.git.loose import write_typed
from overlay.git.store import CatFile, Store, run_git
from overlay.git.treemodel import blob_name
from overlay.lazy import lazy_pattern

#: The private index a snapshot adds the work tree to, and its git lock:
#: ``overlay-record-<pid>.index[.lock]`` (``overlay-record.index`` before names had a pid).
_PRIVATE_INDEX_RE = lazy_pattern(
    r"^overlay-record(?:-(?P<pid>\d{1,9}))?\.index(?:\.lock)?$"
)

#: One entry of ``git ls-files --stage --debug -z``: ``<mode> <oid> <stage>\t<path>\0``
#: and the stat data git keeps for it (git's ``show_ce`` and ``print_debug``; the
#: flags in hex).
_DEBUG_ENTRY_RE = lazy_pattern(
    rb"(\d+) ([0-9a-f]+) \d\t([^\0]*)\0"
    rb"  ctime: (\d+):(\d+)\n  mtime: (\d+):(\d+)\n"
    rb"  dev: \d+\tino: (\d+)\n  uid: \d+\tgid: \d+\n  size: (\d+)\tflags: [0-9a-f]+\n"
)


def sweep_worktree_locks(workdir: str) -> list[str]:
    """Remove the private indexes and their ``.lock`` files that dead processes left in
    the work tree's ``.git`` (a record killed as a process group during ``git add``
    leaves the lock, and git then refuses every later add).

    Only files of :data:`_PRIVATE_INDEX_RE` are touched, and only when the pid in the
    name names no process (a name without a pid is an older overlay's, always stale
    under the records' lock); the user's own ``index`` and ``index.lock`` never.

    Args:
        workdir: the work tree.
    Returns:
        The names removed, sorted.
    """
    gitdir = os.path.join(workdir, ".git")
    removed = []
    with contextlib.suppress(OSError):
        for name in os.listdir(gitdir):
            match = _PRIVATE_INDEX_RE.match(name)
            if not match:
                continue
            pid = match.group("pid")
            if pid is None or (int(pid) != os.getpid() and not pid_alive(int(pid))):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(gitdir, name))
                    removed.append(name)
    return sorted(removed)


def wt_git(
    workdir: str,
    *args: str,
    input: bytes | None = None,
    index: str | None = None,
    check: bool = True,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """git in the work tree's own repository (never the overlay repository's);
    ``index``: another index file; ``env``: more variables for git."""
    env = {**(env or {}), "GIT_WORK_TREE": workdir}
    if index is not None:
        env["GIT_INDEX_FILE"] = index
    return run_git(
        list(args),
        git_dir=os.path.join(workdir, ".git"),
        cwd=workdir,
        env=env,
        input=input,
        check=check,
    )


def make_worktree(
    store: Store, workdir: str, base: str, start: str, subject: str
) -> bool:
    """A git checkout of ``start`` at ``workdir`` whose history is base -> start;
    whether it was made from the spare work tree (else it is a new checkout).

    The spare work tree the last edit ended with (:data:`overlay.edit.writes.SPARE`),
    when there is one, is taken and brought to ``start``: it gets a new ``.git`` of
    its own, with only the spare's index kept (the configuration, hooks, refs, stash
    and excludes of the last edit are gone), ``git reset --hard`` writes the files
    that differ from what the index says it holds, and ``git clean -ffdx`` removes
    every file git does not track. Its files and their executable bits are then
    those of a new checkout (permission bits git does not track stay as they were).
    Where git refuses (a file it cannot remove), it is removed and a new checkout
    made.

    Raises:
        GitError: git could not make the checkout.
        OSError: the directory cannot be written.
    """
    os.makedirs(os.path.dirname(workdir), exist_ok=True)
    # .overlay/ is ignored by this repository's .gitignore; a repository without that
    # line must not pick the checkout up either.
    ignore = os.path.join(os.path.dirname(workdir), ".gitignore")
    if not os.path.exists(ignore):
        atomic_write(ignore, b"*\n")
    reused = _take_spare(workdir)
    if not reused:
        _init(workdir)
    alternates = os.path.join(workdir, ".git", "objects", "info", "alternates")
    os.makedirs(os.path.dirname(alternates), exist_ok=True)
    # Borrow the store's objects instead of copying a few thousand files' blobs.
    with open(alternates, "w", encoding="utf-8") as fh:
        fh.write(os.path.join(store.git_dir, "objects") + "\n")
    specs: list[tuple[str, list[str | int], str]] = [
        (base, [], "overlay: the layer below the patch")
    ]
    if start != base:
        specs.append((start, [0], subject or "overlay: the patch"))
    commits = store.commit_chain(specs)  # written in Python: no git process
    try:
        if reused:
            # The spare's index was written with its files, in the same second: git
            # would read every file again to tell whether it changed.
            trust_stat_data(workdir, os.path.join(workdir, ".git", "index"))
        # HEAD names the unborn BRANCH (_init): the reset makes it, at the commit.
        wt_git(workdir, "reset", "-q", "--hard", commits[-1])
        if reused:
            wt_git(workdir, "clean", "-ffdxq")
    except GitError:
        if not reused:
            raise
        remove_dir(workdir)
        return make_worktree(store, workdir, base, start, subject)
    return reused


def _init(workdir: str) -> None:
    """``git init`` of the edit's checkout at ``workdir``, its HEAD on the unborn
    :data:`~overlay.edit.session.BRANCH`, with no template: git's sample hooks, its
    ``description`` and its commented ``info/exclude`` are files the checkout never
    uses (and a template's hooks would run in it); 5 against 9 ms of git's CPU here.
    The empty ``.git/info/`` is made, so that ``echo PATTERN >> .git/info/exclude``
    works there as in any checkout.

    Raises:
        GitError: git could not make it.
        OSError: ``.git/info`` cannot be made.
    """
    branch = BRANCH.removeprefix("refs/heads/")
    run_git(["init", "-q", "--template=", f"--initial-branch={branch}", workdir])
    os.makedirs(os.path.join(workdir, ".git", "info"), exist_ok=True)


def _take_spare(workdir: str) -> bool:
    """Rename the spare work tree (a git checkout) to ``workdir`` and give it a new
    ``.git`` that keeps only its index; whether it was taken. A spare that is no git
    checkout is removed (:func:`overlay.edit.writes.discard`)."""
    spare = spare_of(workdir)
    if workdir == spare or not os.path.lexists(spare):
        return False
    if not os.path.isdir(os.path.join(spare, ".git")):
        with contextlib.suppress(OSError):  # then a new checkout, as without one
            discard(spare)
        return False
    try:
        os.rename(spare, workdir)
    except OSError:
        return False
    old = os.path.join(workdir, ".git")
    aside = os.path.join(workdir, ".git-of-the-last-edit")
    try:
        remove_dir(aside)
        os.rename(old, aside)
        _init(workdir)
        with contextlib.suppress(FileNotFoundError):
            os.rename(os.path.join(aside, "index"), os.path.join(old, "index"))
        remove_dir(aside)
    except (OSError, GitError):
        remove_dir(workdir)
        return False
    return True


#: At most this many bytes of racy files are compared by content before git is left
#: to compare every file (:func:`trust_stat_data`).
RACY_BYTES_MAX = 1 << 20


def trust_stat_data(workdir: str, index: str) -> bool:
    """Date the private copy ``index`` of the work tree's index now, when no file git
    would take as unchanged has changed since git recorded it.

    git (built without ``USE_NSEC``, as Debian's is) compares whole seconds: an entry
    whose file's mtime is not older than the index file is "racily clean", and ``git
    add`` reads and hashes the file again. ``overlay edit``'s ``git reset --hard``
    writes every file and the index within the same second or two, so every entry
    of a fresh edit is racy and a record hashed the whole tree (most of its time).
    This applies git's own rule (``Documentation/technical/racy-git.txt``) at the
    nanoseconds the file system keeps: an entry whose file git could take as unchanged
    (the same mtime second and size) is proven unchanged when its mtime and ctime to
    the nanosecond and its inode are the ones git recorded and its mtime is older than
    the index file's; otherwise, as git does for a racy entry, when the file's
    content is the entry's blob (regular files, :data:`RACY_BYTES_MAX` bytes in all).
    When every such entry is proven, a copy of the index dated now lets git trust the
    stat data; otherwise (or when git's listing does not read as expected) nothing
    changes and git compares content as before. Nothing is asked of git while it is
    still the index's second: dated now, every entry would still be racy to git.

    Args:
        workdir: the work tree.
        index: a copy of its index (mtime kept, :func:`_copy_dated`), which git reads next.
    Returns:
        Whether the copy was dated now.
    """
    index_mtime = os.stat(index).st_mtime_ns
    now = time.time_ns()
    if now // 1_000_000_000 <= index_mtime // 1_000_000_000:
        return False  # still the index's second: git would find every entry racy anyway
    out = wt_git(
        workdir, "ls-files", "--stage", "--debug", "-z", index=index, check=False
    )
    if out.returncode != 0:
        return False
    try:
        # Each path stat'ed relative to the work tree: the kernel does not walk the
        # work tree's own path again for each of its thousand files.
        top = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        racy = _racy_entries(out.stdout, top, index_mtime)
    finally:
        os.close(top)
    if racy is None or not _same_content(workdir, racy):
        return False
    os.utime(index, ns=(now, now))
    return True


def _racy_entries(
    listing: bytes, top: int, index_mtime: int
) -> list[tuple[str, bytes, str]] | None:
    """The entries of ``git ls-files --stage --debug -z`` output ``listing`` whose
    stat data does not prove them unchanged (see :func:`trust_stat_data`), as
    ``(path, mode, blob)``; ``None`` when the listing does not read as expected.
    ``top``: a descriptor of the work tree, which the paths are relative to."""
    expected = 0
    racy: list[tuple[str, bytes, str]] = []  # (path, mode, blob) compared by content
    for m in _DEBUG_ENTRY_RE.finditer(listing):
        if m.start() != expected:
            return None  # a line this parser does not know: leave it to git
        expected = m.end()
        mode, blob, path = m.group(1), m.group(2).decode(), os.fsdecode(m.group(3))
        if mode == b"160000":
            continue  # a submodule: git asks its HEAD, not the stat data
        try:
            st = os.lstat(path, dir_fd=top)
        except OSError:
            continue  # gone: git sees that itself
        mtime = int(m.group(6)) * 1_000_000_000 + int(m.group(7))
        if st.st_mtime_ns // 1_000_000_000 != mtime // 1_000_000_000 or (
            st.st_size & 0xFFFFFFFF != int(m.group(9))
        ):
            continue  # git sees the change itself
        ctime = int(m.group(4)) * 1_000_000_000 + int(m.group(5))
        if (
            st.st_mtime_ns != mtime
            or st.st_ctime_ns != ctime
            or st.st_ino & 0xFFFFFFFF != int(m.group(8))
            or mtime >= index_mtime
        ):
            racy.append((path, mode, blob))
    return racy if expected == len(listing) else None


def _same_content(workdir: str, entries: list[tuple[str, bytes, str]]) -> bool:
    """Whether each ``(path, mode, blob)`` of ``entries`` is a regular file of the work
    tree holding exactly the blob (no filter between them), within
    :data:`RACY_BYTES_MAX` bytes in all."""
    left = RACY_BYTES_MAX
    for path, mode, blob in entries:
        if mode not in (b"100644", b"100755"):
            return False
        try:
            with open(os.path.join(workdir, path), "rb") as fh:
                data = fh.read(left + 1)
        except OSError:
            return False
        left -= len(data)
        if left < 0 or blob_name(data) != blob:
            return False
    return True


def snapshot(store: Store, workdir: str, base: str) -> str:
    """The work tree as a tree in the git store (every file, as ``git add -A`` sees it).

    The user's own index in the work tree is left alone: a copy takes the adds. git
    writes the new objects straight into the store (``GIT_OBJECT_DIRECTORY``, the
    work tree's own objects an alternate), where the tree is then named: copying
    them there after the add took three more git processes. Its paths are not
    checked here; a caller that writes records from the tree checks the paths it
    changes (:func:`overlay.fs.paths.check_path`).

    Args:
        store: the git store the work tree borrows its objects from.
        workdir: the work tree (:func:`make_worktree`).
        base: the tree of the layer below the patch (in the store).
    Returns:
        The tree's name, in the store.
    Raises:
        OverlayError: the work tree is gone (exit 2).
        GitError: git refused to read the work tree.
    """
    if not os.path.isdir(os.path.join(workdir, ".git")):
        raise OverlayError(
            f"{os.path.basename(workdir)}: the work tree is gone or not a git checkout",
            hint="throw the edit away with `overlay edit --abort` and start again",
        )
    # A name of this process's own: a lock a killed record left on another name never
    # blocks this one (sweep_worktree_locks removes it).
    index = os.path.join(workdir, ".git", f"overlay-record-{os.getpid()}.index")
    try:
        # copy2: the copy keeps the index's mtime. git (which compares whole seconds)
        # reads an entry whose mtime is not older than its index as "racily clean"
        # and compares content; a copy stamped "now" made a same-size edit in the
        # same second as the index look unchanged ("nothing to record"). It is dated
        # now only where trust_stat_data proves that safe.
        _copy_dated(os.path.join(workdir, ".git", "index"), index)
    except FileNotFoundError:
        pass
    else:
        trust_stat_data(workdir, index)
    into_store = {
        "GIT_OBJECT_DIRECTORY": os.path.join(store.git_dir, "objects"),
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": os.path.join(workdir, ".git", "objects"),
    }
    try:
        wt_git(workdir, "add", "-A", "--", ".", index=index, env=into_store)
        tree = (
            wt_git(workdir, "write-tree", index=index, env=into_store)
            .stdout.decode()
            .strip()
        )
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(index)
    if tree != base and _holds_objects(into_store["GIT_ALTERNATE_OBJECT_DIRECTORIES"]):
        _copy_objects(store, workdir, base, tree)
    return tree


def _copy_dated(src: str, dst: str) -> None:
    """Copy the file ``src`` to ``dst`` with its times, as ``shutil.copy2`` does for an
    index (importing :mod:`shutil` brings bz2 and lzma, about 1 ms of a record).

    Raises:
        FileNotFoundError: ``src`` is gone.
    """
    st = os.stat(src)
    with open(src, "rb") as fh:
        data = fh.read()
    with open(dst, "wb") as fh:
        fh.write(data)
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))


def _holds_objects(objects: str) -> bool:
    """Whether the object directory ``objects`` holds any object (loose or packed).

    A work tree's own object directory is empty as :func:`make_worktree` leaves it
    (its commits are in the store); only the user's own git (an ``add``, a
    ``commit`` in the work tree) or an older overlay's snapshot writes there.
    """
    try:
        with os.scandir(objects) as it:
            for entry in it:
                if entry.name == "pack":
                    if os.listdir(entry.path):
                        return True
                elif entry.name != "info":
                    return True
        return False
    except OSError:
        return True  # unreadable: copy, as when in doubt


def _copy_objects(store: Store, workdir: str, base: str, tree: str) -> None:
    """Copy into the store the objects ``tree`` has and ``base`` has not (``-t``: the
    trees on the way too), byte for byte, read through the work tree's repository
    (its own objects, then the store's): a blob the user's own ``git add`` wrote into
    the work tree's objects reaches the store. One the store has already is written
    again harmlessly."""
    rows = wt_git(
        workdir, "diff-tree", "-r", "-t", "-z", "--no-renames", base, tree
    ).stdout.split(b"\0")
    new = {tree: "tree"}
    for i in range(0, len(rows) - 1, 2):
        meta = rows[i].decode().lstrip(":").split()
        if meta[4] != "D" and meta[1] != "160000":  # a gitlink names no object here
            new[meta[3]] = "tree" if meta[1] == "040000" else "blob"
    with CatFile(os.path.join(workdir, ".git")) as cat:
        objects = {oid: cat.read(oid) for oid in new}
    write_typed(store.git_dir, objects)
