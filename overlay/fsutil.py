"""Small file-system helpers shared by every module that reads records or writes files.

DESIGN 11: every write is temp + rename, so a reader (or a crash) never sees a
half-written file.

Every read of a *record* (``patches-rocm/overlay.toml``, ``patches-rocm/series``,
each patch, ``LOCAL_FIXES.md``, ``suites.toml``, the files under
``patches-rocm/resolved/``) goes through :func:`read_record` (or
:func:`read_record_dir` for the resolutions): regular files inside the
repository only, size-capped, and every failure is one :class:`RecordError`
line naming the file (exit 2, or a finding inside ``overlay verify``).
``docs/records.md`` states the rules.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Container, Iterator, Sequence

from overlay.errors import OverlayError

DEFAULT_MODE = 0o644

#: Temp names written by this module: ``.NAME.XXXXXXXX.tmp`` next to ``NAME``
#: (``tempfile.mkstemp``'s eight characters), so a later run can find the ones a
#: killed process left behind.
TEMP_RE = re.compile(r"^\.(?P<name>.+)\.[a-z0-9_]{8}\.tmp$")
_TEMP_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"


def temp_owner(name: str) -> str | None:
    """The file name a temp name belongs to (``.a.txt.k3j9x_2q.tmp`` -> ``a.txt``), else ``None``."""
    match = TEMP_RE.match(name)
    return match.group("name") if match else None


def remove_stale_temps(
    directory: str, owners: Container[str] | None = None
) -> list[str]:
    """Delete temp files a killed writer left in ``directory``.

    Args:
        directory: the directory to look in (a missing one holds nothing).
        owners: remove only temps of these file names; ``None`` removes every temp name.
    Returns:
        The names removed (sorted).
    """
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed = []
    for name in names:
        owner = temp_owner(name)
        if owner is not None and (owners is None or owner in owners):
            try:
                os.unlink(os.path.join(directory, name))
                removed.append(name)
            except (FileNotFoundError, IsADirectoryError):
                pass
    return sorted(removed)


def kill_point(name: str) -> None:
    """Test hook: ``OVERLAY_TEST_KILL_AT=<name>`` SIGKILLs the process here.

    The kill tests (``tests/test_rebase.py``, ``tests/test_safety.py``) set the
    variable in a child process to stop it at a named point, e.g. ``commit`` or
    ``refresh`` (just before a rewritten patch is renamed into place).

    Args:
        name: the point's name.
    """
    if os.environ.get("OVERLAY_TEST_KILL_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


class LockBusy(Exception):
    """:func:`flocked` with ``wait=False`` found the lock held by another open file.

    Attributes:
        path: the lock file.
        holder: what the holder wrote into the lock file (``""`` when nothing:
            a shared holder, or a holder that writes nothing).
    """

    def __init__(self, path: str, holder: str):
        super().__init__(f"{path} is locked")
        self.path = path
        self.holder = holder


@contextlib.contextmanager
def flocked(
    path: str | os.PathLike,
    *,
    shared: bool = False,
    wait: bool = True,
    holder: str | None = None,
) -> Iterator[int]:
    """Hold an ``flock`` on ``path`` for the duration of a ``with`` block.

    The one lock helper of overlay: the git store, each export destination and
    the rebase state (``.overlay/rebase.lock``) are locked through it. The file is
    created when missing and never deleted (deleting a lock file while another
    process waits on it would let a third process lock a new file beside it).
    The lock goes with the process: a killed holder releases it.

    Args:
        path: the lock file.
        shared: a shared (reader) lock instead of an exclusive one; it needs only
            read access, so it also works on a file it cannot write.
        wait: block until the lock is free; ``False`` raises :class:`LockBusy` at once.
        holder: an exclusive holder writes this line into the file (who holds it,
            for the message of a refused command); the file is emptied on release.
    Yields:
        The open file descriptor.
    Raises:
        LockBusy: ``wait`` is false and another open file holds a conflicting lock.
        OSError: the file cannot be opened or created.
    """
    path = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as exc:
        if not shared or exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        try:
            fcntl.flock(
                fd,
                (fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
                | (0 if wait else fcntl.LOCK_NB),
            )
        except BlockingIOError:
            try:
                text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
            except OSError:
                text = ""
            raise LockBusy(path, text.strip()) from None
        written = False
        if holder is not None and not shared:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
                os.pwrite(fd, holder.encode("utf-8", "replace") + b"\n", 0)
                written = True
        try:
            yield fd
        finally:
            if written:
                # Empty it before the unlock: a later refused command must not name a finished holder.
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (on this machine's process table).

    Args:
        pid: a process id; 0 and negative ids count as alive (they name groups, not processes).
    Returns:
        ``False`` only when no such process exists; a process of another user counts as alive.
    """
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


#: Kinds of scratch directory overlay makes under the temp directory (``overlay-<kind>-<pid>-XXXXXXXX``).
SCRATCH_KINDS = ("idx", "commits", "merge")
_SCRATCH_RE = re.compile(
    r"^overlay-(?:idx|commits|merge)-(?:(?P<pid>\d{1,9})-)?[a-z0-9_]{8}$"
)
#: A scratch directory without a pid in its name (made before names carried one)
#: is removed once it is this old: a scratch directory lives for seconds.
LEGACY_SCRATCH_AGE_S = 24 * 3600


@contextlib.contextmanager
def scratch_dir(kind: str) -> Iterator[str]:
    """A private temp directory ``overlay-<kind>-<pid>-XXXXXXXX`` for a ``with`` block.

    Removed when the block ends, however it ends. A process killed inside the
    block leaves it behind; the pid in its name lets :func:`sweep_scratch_dirs`
    of a later run remove it once that process is gone, and never a live one's.

    Args:
        kind: one of :data:`SCRATCH_KINDS` (``idx`` for a scratch index, ``commits``
            for synthetic commits, ``merge`` for ``git merge-file`` inputs).
    Yields:
        The directory's path.
    """
    if kind not in SCRATCH_KINDS:
        raise ValueError(f"unknown scratch kind {kind!r}")
    with tempfile.TemporaryDirectory(prefix=f"overlay-{kind}-{os.getpid()}-") as tmp:
        kill_point(f"scratch-{kind}")
        yield tmp


def sweep_scratch_dirs(tmpdir: str | None = None) -> list[str]:
    """Remove the scratch directories (:func:`scratch_dir`) of processes that are gone.

    A directory is removed when the pid in its name names no process, or, for a
    name without a pid (older overlay), when it is older than
    :data:`LEGACY_SCRATCH_AGE_S`. Only directories of the current user are
    touched; a symlink is never followed.

    Args:
        tmpdir: where to look; default ``tempfile.gettempdir()``.
    Returns:
        The names removed (sorted).
    """
    tmpdir = tmpdir or tempfile.gettempdir()
    try:
        names = os.listdir(tmpdir)
    except OSError:
        return []
    removed = []
    now = time.time()
    for name in names:
        match = _SCRATCH_RE.match(name)
        if not match:
            continue
        full = os.path.join(tmpdir, name)
        try:
            st = os.lstat(full)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            continue
        pid = match.group("pid")
        stale = (
            (not pid_alive(int(pid)))
            if pid
            else now - st.st_mtime > LEGACY_SCRATCH_AGE_S
        )
        if stale:
            shutil.rmtree(full, ignore_errors=True)
            removed.append(name)
    return sorted(removed)


def atomic_symlink(target: str, path: str | os.PathLike) -> None:
    """Make ``path`` a symlink to ``target`` atomically (a temp link, then rename).

    Raises:
        OSError: the directory is missing or not writable; the temp link is removed.
    """
    path = os.fspath(path)
    directory, base = os.path.split(path)
    while True:
        rand = "".join(random.choice(_TEMP_CHARS) for _ in range(8))
        tmp = os.path.join(directory, f".{base}.{rand}.tmp")
        try:
            os.symlink(target, tmp)
            break
        except FileExistsError:
            continue
    with _removed_on_failure(tmp):
        os.replace(tmp, path)


@contextlib.contextmanager
def _removed_on_failure(tmp: str) -> Iterator[None]:
    """Remove the temp file ``tmp`` when the block fails, however it fails, and re-raise."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


#: Largest record overlay reads, in bytes (16 MiB). The largest real record, a
#: patch of the v0.32.1 series, is well under 1 MiB; the cap only has to stop
#: ``/dev/zero``-like inputs long before memory runs out.
RECORD_MAX_BYTES = 16 * 1024 * 1024

#: Most files :func:`read_record_dir` reads from one directory tree (a bound on
#: the work a hostile ``resolved/`` tree can cause; the real overlay has a few).
RECORD_DIR_MAX_FILES = 10_000

_KIND_NAMES = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symlink"),
)


class RecordError(OverlayError):
    """A record cannot be read safely: outside the repository, not a regular file,
    too big, unreadable, or not UTF-8 (exit 2). ``rel`` is the repository path."""

    def __init__(self, rel: str, message: str, **kwargs):
        super().__init__(f"{rel}: {message}", **kwargs)
        self.rel = rel


class RecordMissing(RecordError):
    """The record does not exist (callers decide whether that is an error)."""


def _kind(mode: int) -> str:
    for test, name in _KIND_NAMES:
        if test(mode):
            return name
    return "not a regular file"


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def read_record(
    root: str | os.PathLike,
    rel: str,
    *,
    max_bytes: int = RECORD_MAX_BYTES,
    what: str = "record",
    allow_symlink: bool = True,
) -> bytes:
    """Read one record of the overlay repository, refusing anything but a regular file inside it.

    Rules (``docs/records.md``): the path, resolved with every symlink on the
    way, must stay inside ``root`` (resolved too); the last component may be a
    symlink only when ``allow_symlink`` (patches and resolutions pass ``False``:
    ``refresh`` and the rebase rewrite them, and a link there would be replaced
    by a file); the file it names must be a regular file (no FIFO, device,
    directory or socket) of at most ``max_bytes`` bytes. The file is opened
    non-blocking (a FIFO cannot stall the open) and checked with ``fstat`` on
    the opened descriptor, so what is read is what was checked.

    Args:
        root: the overlay repository.
        rel: slash-separated path relative to ``root`` (named in every message).
        max_bytes: size cap (default :data:`RECORD_MAX_BYTES`).
        what: how to name the record in messages (``"patch"``, ``"series"``...).
        allow_symlink: whether the last component may be a symlink to a file inside ``root``.
    Returns:
        The file's bytes.
    Raises:
        RecordMissing: the file does not exist (or a parent is not a directory).
        RecordError: a symlink that leaves the repository (or is not allowed),
            a loop, not a regular file, bigger than ``max_bytes``, a name too
            long, or any other read error; one line naming ``rel`` (exit 2).
    """
    root_real = os.path.realpath(os.fspath(root))
    full = os.path.join(root_real, *rel.split("/"))
    try:
        lst = os.lstat(full)
    except FileNotFoundError:
        raise RecordMissing(rel, f"{what} not found") from None
    except OSError as exc:
        raise _os_error(rel, what, exc) from None
    except ValueError:  # a NUL byte in the name
        raise RecordError(rel, f"{what} name holds a NUL byte") from None
    if stat.S_ISLNK(lst.st_mode):
        try:
            target = os.readlink(full)
        except OSError:
            target = "?"
        if not allow_symlink:
            raise RecordError(
                rel,
                f"{what} is a symlink (-> {target}); it must be a regular file",
                hint="replace the link by the file it points at",
            )
    try:
        real = os.path.realpath(full, strict=True)
    except FileNotFoundError:
        raise RecordError(rel, f"{what} is a dangling symlink") from None
    except OSError as exc:
        raise _os_error(rel, what, exc) from None
    if not _inside(real, root_real):
        raise RecordError(
            rel,
            f"{what} resolves to {real}, outside the repository",
            hint="records must be regular files inside the overlay repository",
        )
    flags = (
        os.O_RDONLY
        | os.O_NONBLOCK
        | getattr(os, "O_CLOEXEC", 0)
        | getattr(os, "O_NOCTTY", 0)
    )
    try:
        # Open the resolved path without following a link there: a link swapped
        # in after the check above fails with ELOOP instead of being followed.
        fd = os.open(real, flags | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise _os_error(rel, what, exc) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RecordError(rel, f"{what} is {_kind(st.st_mode)}, not a regular file")
        if st.st_size > max_bytes:
            raise RecordError(
                rel,
                f"{what} is {st.st_size} bytes, more than the {max_bytes}-byte limit",
            )
        chunks = []
        size = 0
        while True:
            # Read one byte past the cap so a file that grows while read is still refused.
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                raise RecordError(
                    rel, f"{what} is more than the {max_bytes}-byte limit"
                )
        return b"".join(chunks)
    except OSError as exc:
        raise _os_error(rel, what, exc) from None
    finally:
        os.close(fd)


def _os_error(rel: str, what: str, exc: OSError) -> RecordError:
    reasons = {
        errno.ELOOP: "a symlink loop (or a symlink where none is allowed)",
        errno.ENAMETOOLONG: "its name is too long",
        errno.EISDIR: "a directory, not a regular file",
        errno.ENOTDIR: "a parent is not a directory",
        errno.EACCES: "permission denied",
    }
    reason = reasons.get(exc.errno) or exc.strerror or str(exc)
    if exc.errno == errno.ENOTDIR:
        return RecordMissing(rel, f"{what} not found ({reason})")
    return RecordError(rel, f"cannot read {what}: {reason}")


def decode_record(data: bytes, rel: str, *, what: str = "record") -> str:
    """``data`` decoded as UTF-8, or one error naming the file and the byte offset.

    Args:
        data: the record's bytes (from :func:`read_record`).
        rel: the repository path to name.
        what: how to name the record.
    Returns:
        The text.
    Raises:
        RecordError: not UTF-8; the message gives the first bad byte's offset
            (0-based, as ``cmp`` and ``xxd`` count) and its line.
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise RecordError(
            rel, f"{what} is not UTF-8: {exc.reason} at byte {exc.start} (line {line})"
        ) from None


def read_record_text(
    root: str | os.PathLike,
    rel: str,
    *,
    max_bytes: int = RECORD_MAX_BYTES,
    what: str = "record",
    allow_symlink: bool = True,
) -> str:
    """:func:`read_record` then :func:`decode_record` (same arguments and errors)."""
    return decode_record(
        read_record(
            root, rel, max_bytes=max_bytes, what=what, allow_symlink=allow_symlink
        ),
        rel,
        what=what,
    )


def git_ignored(root: str | os.PathLike, rels: Sequence[str]) -> set[str]:
    """The paths among ``rels`` that git's ignore rules exclude in the work tree at ``root``.

    One ``git -C ROOT check-ignore --stdin -z`` for all of them, so ``.gitignore``
    files, ``.git/info/exclude`` and the user's ``core.excludesFile`` all count (a
    ``.DS_Store`` is usually ignored by the last). A tracked file is never ignored
    (git applies ignore rules to untracked files only).

    Args:
        root: a directory inside a git work tree; the paths are relative to it.
        rels: slash-separated paths.
    Returns:
        The ignored subset; empty when ``root`` is in no work tree, git is missing
        or fails (then nothing is ignored, as without git).
    """
    if not rels:
        return set()
    from overlay.errors import GitError
    from overlay.gitstore import git_env, git_executable, zsplit

    try:
        exe = git_executable()
    except GitError:
        return set()
    # The user's configuration stays visible (user_config): core.excludesFile lives there.
    proc = subprocess.run(
        [exe, "-C", os.fspath(root), "check-ignore", "--stdin", "-z"],
        input=("\0".join(rels) + "\0").encode("utf-8", "surrogateescape"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=tempfile.gettempdir(),
        env=git_env(user_config=True),
        check=False,
    )
    if proc.returncode not in (0, 1):
        return set()
    return set(zsplit(proc.stdout)) & set(rels)


def scan_record_dir(
    root: str | os.PathLike,
    rel_dir: str,
    *,
    max_bytes: int = RECORD_MAX_BYTES,
    max_files: int = RECORD_DIR_MAX_FILES,
    what: str = "record",
    skip_ignored: bool = True,
    ignored: list[str] | None = None,
) -> tuple[dict[str, bytes], list[RecordError]]:
    """Every regular file under ``root/rel_dir``, and one error per entry that is refused.

    Nothing under the directory may be a symlink (file or directory) or a
    special file; symlinked directories are not entered. Each file is read with
    :func:`read_record` (``allow_symlink=False``), so the same cap applies.
    Entries git ignores (:func:`git_ignored`: a ``.DS_Store`` beside the
    resolutions) are no records: they are neither read nor refused; where the
    directory itself is ignored, its entries are all read.

    Args:
        root: the overlay repository.
        rel_dir: the directory, relative to ``root`` (``patches-rocm/resolved``).
        max_bytes: per-file cap.
        max_files: at most this many files are read; one error says the rest were not.
        what: how to name an entry in messages.
        skip_ignored: leave out what git ignores (default).
        ignored: when given, the left-out paths (below ``rel_dir``) are appended to it.
    Returns:
        ``({path below rel_dir: bytes}, [RecordError, ...])``, paths sorted; an
        absent directory gives ``({}, [])``.
    """
    root_real = os.path.realpath(os.fspath(root))
    base = os.path.join(root_real, *rel_dir.split("/"))
    out: dict[str, bytes] = {}
    errors: list[RecordError] = []
    try:
        st = os.lstat(base)
    except FileNotFoundError:
        return out, errors
    except OSError as exc:
        return out, [_os_error(rel_dir, "directory", exc)]
    if not stat.S_ISDIR(st.st_mode):
        return out, [RecordError(rel_dir, f"is {_kind(st.st_mode)}, not a directory")]
    # First the walk (names and kinds only), then one question to git about all of them.
    found: list[tuple[str, str, str, int]] = []
    pending = [""]
    while pending:
        sub = pending.pop()
        try:
            with os.scandir(os.path.join(base, *sub.split("/")) if sub else base) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            errors.append(_os_error(f"{rel_dir}/{sub}".rstrip("/"), "directory", exc))
            continue
        dirs = []
        for entry in entries:
            name = f"{sub}/{entry.name}" if sub else entry.name
            rel = f"{rel_dir}/{name}"
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError as exc:
                errors.append(_os_error(rel, what, exc))
                continue
            if stat.S_ISDIR(mode):
                dirs.append(name)
            else:
                found.append((name, rel, entry.path, mode))
        if len(found) > 2 * max_files:  # bound the walk too, ignored entries included
            pending = []
            break
        pending.extend(reversed(dirs))
    skip: set[str] = set()
    if skip_ignored and found:
        skip = git_ignored(root_real, [rel_dir, *(rel for _n, rel, _p, _m in found)])
        if rel_dir in skip:
            # The directory itself is ignored (a copy staged under .overlay/, an overlay
            # kept under build/): the rules then say nothing about single records in it.
            skip = set()
    for name, rel, path, mode in sorted(found):
        if rel in skip:
            if ignored is not None:
                ignored.append(name)
        elif stat.S_ISLNK(mode):
            errors.append(
                RecordError(
                    rel,
                    f"{what} is a symlink (-> {_readlink(path)}); "
                    "it must be a regular file",
                    hint="replace the link by the file it points at",
                )
            )
        elif not stat.S_ISREG(mode):
            errors.append(
                RecordError(rel, f"{what} is {_kind(mode)}, not a regular file")
            )
        elif len(out) >= max_files:
            errors.append(
                RecordError(
                    rel_dir, f"more than {max_files} files; the rest were not read"
                )
            )
            return dict(sorted(out.items())), errors
        else:
            try:
                out[name] = read_record(
                    root_real, rel, max_bytes=max_bytes, what=what, allow_symlink=False
                )
            except RecordError as exc:
                errors.append(exc)
    if len(found) > 2 * max_files and len(out) < max_files:
        errors.append(
            RecordError(
                rel_dir, f"more than {2 * max_files} entries; the rest were not read"
            )
        )
    return dict(sorted(out.items())), errors


def read_record_dir(
    root: str | os.PathLike, rel_dir: str, **kwargs
) -> dict[str, bytes]:
    """:func:`scan_record_dir`, raising its first error.

    Raises:
        RecordError: the first refused entry (exit 2).
    """
    out, errors = scan_record_dir(root, rel_dir, **kwargs)
    if errors:
        raise errors[0]
    return out


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def atomic_write(
    path: str | os.PathLike,
    data: bytes,
    *,
    mode: int | None = None,
    durable: bool = True,
    before_replace: Callable[[], None] | None = None,
) -> None:
    """Write ``data`` to ``path`` atomically: a temp file in the same directory, then rename.

    The temp file is flushed (and, when ``durable``, fsynced) before
    :func:`os.replace`, so ``path`` holds either its old content or ``data``,
    never a mix. The parent directory must exist.

    Args:
        path: destination file path (str or path-like).
        data: the complete new content, as bytes.
        mode: permission bits for the new file; default: the mode of the file
            being replaced, or ``0o644`` for a new file.
        durable: fsync before the rename (default). An export of a re-creatable
            tree passes ``False``: a thousand fsyncs would dominate it.
        before_replace: called once the temp file is complete, just before the
            rename (a test hook for kills at that point).

    Raises:
        TypeError: ``data`` is not bytes-like.
        OSError: the directory is missing or not writable, or the rename fails;
            the temp file is removed in every failure case.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"atomic_write needs bytes, got {type(data).__name__}")
    path = os.fspath(path)
    directory = os.path.dirname(path) or "."
    if mode is None:
        try:
            mode = os.stat(path).st_mode & 0o7777
        except FileNotFoundError:
            mode = DEFAULT_MODE
    fd, tmp = tempfile.mkstemp(
        dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp"
    )
    with _removed_on_failure(tmp):
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        if before_replace is not None:
            before_replace()
        os.replace(tmp, path)


@contextlib.contextmanager
def dir_lock(
    directory: str | os.PathLike,
    name: str = ".overlay.lock",
    *,
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """Hold an exclusive lock on ``directory/name`` for the block, waiting for it (DESIGN 11).

    Every process that wants the directory for itself (a build directory: one
    ninja at a time) takes this lock; a second one waits until the first is
    done. It is :func:`flocked` with the holder's pid written into the file, only
    to name it in the waiting message.

    Args:
        directory: the directory to lock (created when absent).
        name: the lock file's name inside it.
        on_wait: called once, with the holder's pid as text (``"?"`` when unknown),
            when the lock is busy and this process is about to wait for it.
    Raises:
        OSError: the directory cannot be created or the lock file opened.
    """
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name)
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(flocked(path, wait=False, holder=str(os.getpid())))
        except LockBusy as busy:
            if on_wait is not None:
                on_wait(busy.holder or "?")
            stack.enter_context(flocked(path, holder=str(os.getpid())))
        yield
