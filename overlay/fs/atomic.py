"""Every file write overlay makes: atomic, findable again after a kill.

docs/design.md §11: every write is temp + rename (:func:`atomic_write`), so a reader (or a
crash) never sees a half-written file; the temp names a killed writer leaves are
found again (:func:`remove_stale_temps`), and so are the scratch directories of
dead processes (:func:`sweep_scratch_dirs`).

Reading a record is :mod:`overlay.fs.reading`; locks are :mod:`overlay.fs.locks`.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Callable, Container, Iterator, Sequence

from overlay.fs.locks import pid_alive
from overlay.lazy import lazy_pattern

DEFAULT_MODE = 0o644

#: Temp names written by this module: ``.NAME.XXXXXXXX.tmp`` next to ``NAME``
#: (``tempfile.mkstemp``'s eight characters), so a later run can find the ones a
#: killed process left behind.
TEMP_RE = lazy_pattern(r"^\.(?P<name>.+)\.[a-z0-9_]{8}\.tmp$")
_TEMP_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"


def temp_owner(name: str) -> str | None:
    """The file name a temp name belongs to (``.a.txt.k3j9x_2q.tmp`` -> ``a.txt``),
    else ``None``."""
    if name[:1] != "." or ".tmp" not in name[-5:]:
        return None  # most names (every file of an export's DEST): no pattern
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

    The kill tests (``tests/test_rebase.py``, ``tests/test_rebase_ondisk.py``) set the
    variable in a child process to stop it at a named point, e.g. ``commit`` or
    ``refresh`` (just before a rewritten patch is renamed into place).

    Args:
        name: the point's name.
    """
    if os.environ.get("OVERLAY_TEST_KILL_AT") == name:
        _killed()


#: Checkpoints of each family passed in this process (see :func:`counted_kill_point`).
_passed: dict[str, int] = {}


def counted_kill_point(family: str) -> None:
    """Test hook: ``OVERLAY_TEST_KILL_AT=<family>:N`` SIGKILLs the process at the Nth
    checkpoint of ``family`` it passes (``record:3``, ``import:2``).

    A kill-point sweep (``tools/fuzz_kills.py``) runs a command with N = 1, 2, ...
    until it is no longer killed: every write point is reached without naming them.

    Args:
        family: the command's family of checkpoints.
    """
    spec = os.environ.get("OVERLAY_TEST_KILL_AT", "")
    head, _, count = spec.partition(":")
    if head != family or not count.isdigit():
        return
    _passed[family] = _passed.get(family, 0) + 1
    if _passed[family] == int(count):
        _killed()


def _killed() -> None:
    """SIGKILL this process (a test hook's kill)."""
    import signal  # only when a test hook fires

    os.kill(os.getpid(), signal.SIGKILL)


#: Kinds of scratch directory overlay makes under the temp directory
#: (``overlay-<kind>-<pid>-XXXXXXXX``). ``commits`` is no longer made (the synthetic
#: commits are written from memory) but still swept: an older overlay killed while
#: writing them left one.
SCRATCH_KINDS = ("idx", "commits", "merge")
_SCRATCH_RE = lazy_pattern(
    r"^overlay-(?:idx|commits|merge)-(?:(?P<pid>\d{1,9})-)?[a-z0-9_]{8}$"
)
#: A scratch directory without a pid in its name (made before names carried one)
#: is removed once it is this old: a scratch directory lives for seconds.
LEGACY_SCRATCH_AGE_S = 24 * 3600


#: Where :func:`temp_dir` looks after the environment's choice (``tempfile``'s list
#: on POSIX).
_TEMP_DIRS = ("/tmp", "/var/tmp", "/usr/tmp")


def temp_dir() -> str:
    """The directory of scratch directories: ``TMPDIR`` (else ``TEMP``, ``TMP``) when
    it names a directory this user may write, else the first such of ``/tmp``,
    ``/var/tmp``, ``/usr/tmp``, else the current directory.

    ``tempfile.gettempdir()`` chooses from the same list on POSIX (it tries a file
    where this checks permissions). Every command that sweeps asks where; importing
    :mod:`tempfile` for it (shutil, random, bz2 and lzma with it) would cost each of
    them more than the sweep.

    Returns:
        An absolute path.
    """
    env = [os.environ.get(k) for k in ("TMPDIR", "TEMP", "TMP")]
    for d in (*env, *_TEMP_DIRS):
        if d and os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK):
            return os.path.abspath(d)
    return os.getcwd()


@contextlib.contextmanager
def scratch_dir(kind: str) -> Iterator[str]:
    """A private temp directory ``overlay-<kind>-<pid>-XXXXXXXX`` for a ``with`` block.

    Removed when the block ends, however it ends. A process killed inside the
    block leaves it behind; the pid in its name lets :func:`sweep_scratch_dirs`
    of a later run remove it once that process is gone, and never a live one's.

    Args:
        kind: one of :data:`SCRATCH_KINDS` (``idx`` for a scratch index, ``merge``
            for ``git merge-file`` inputs).
    Yields:
        The directory's path.
    """
    if kind not in SCRATCH_KINDS:
        raise ValueError(f"unknown scratch kind {kind!r}")
    # As tempfile.mkdtemp makes it (mode 0700, a new name until one is free), without
    # importing tempfile (random, shutil, bz2 and lzma with it) for the one directory.
    parent = temp_dir()
    while True:
        tmp = os.path.join(parent, f"overlay-{kind}-{os.getpid()}-{_random_chars()}")
        try:
            os.mkdir(tmp, 0o700)
            break
        except FileExistsError:
            continue
    try:
        kill_point(f"scratch-{kind}")
        yield tmp
    finally:
        remove_dir(tmp)


def remove_dir(path: str) -> None:
    """Remove the directory ``path`` and what it holds, ignoring errors (as
    ``shutil.rmtree(path, ignore_errors=True)``; a symlink is never followed).

    A scratch directory holds a few plain files (an index and its lock, merge
    inputs): those are unlinked here, and :mod:`shutil` is imported only for a
    directory that holds a directory. Importing it (bz2 and lzma with it) cost a
    short command such as ``export`` or ``tree`` about 1 ms (docs/engine.md, "Costs
    behind some choices").

    Args:
        path: the directory; gone already is fine. A symbolic link is left as it is,
            with what it points to (``shutil.rmtree`` refuses one too): the entries are
            listed and unlinked through a descriptor opened without following it.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return  # gone, not a directory, or a link
    try:
        with os.scandir(fd) as it:
            entries = list(it)
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    break
                os.unlink(entry.name, dir_fd=fd)
            except OSError:
                break
        else:
            with contextlib.suppress(OSError):
                os.rmdir(path)
                return
    except OSError:
        pass
    finally:
        os.close(fd)
    import shutil  # only for a nested tree (it imports bz2 and lzma)

    shutil.rmtree(path, ignore_errors=True)


#: A process's own descriptors as paths (Linux's proc file system): in a child that
#: inherited descriptor N, ``/proc/self/fd/N`` opens the parent's file again.
_OWN_FDS = "/proc/self/fd"


@contextlib.contextmanager
def input_files(
    contents: Sequence[bytes], kind: str = "merge"
) -> Iterator[tuple[list[str], tuple[int, ...]]]:
    """Files holding ``contents`` for a child that reads its inputs by path (``git
    merge-file``), for a ``with`` block.

    On Linux each is an anonymous memory file (``memfd_create``) named by
    ``/proc/self/fd/N``: the child inherits the descriptors under the same numbers
    (pass them as ``pass_fds``), so in the child that path is the same file,
    and nothing is made on disk, removed or left behind by a kill. git stats such a
    path for the size, opens it and reads it as a file. Elsewhere, or when the
    kernel refuses memory files, they are files in a :func:`scratch_dir` of ``kind``.
    Three inputs of a ``merge-file`` cost 1.5 ms of a pin bump's CPU in a scratch
    directory (made, written, removed) and 0.6 ms as memory files (docs/engine.md,
    "Costs behind some choices").

    Args:
        contents: the files' bytes, in the order the paths are yielded.
        kind: the :data:`SCRATCH_KINDS` directory used where memory files are not.
    Yields:
        ``(paths, fds)``: one path per input; the descriptors the child must inherit
        (empty for files on disk).
    """
    fds: list[int] = []
    try:
        if hasattr(os, "memfd_create") and os.path.isdir(_OWN_FDS):
            try:
                for data in contents:
                    fds.append(os.memfd_create("overlay-input", os.MFD_CLOEXEC))
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fds[-1], view) :]
            except OSError:  # no memory files here: on disk after all
                for fd in fds:
                    os.close(fd)
                fds = []
        if fds or not contents:
            yield [f"{_OWN_FDS}/{fd}" for fd in fds], tuple(fds)
            return
        with scratch_dir(kind) as tmp:
            paths = []
            for n, data in enumerate(contents):
                path = os.path.join(tmp, f"input{n}")
                with open(path, "wb") as fh:
                    fh.write(data)
                paths.append(path)
            yield paths, ()
    finally:
        for fd in fds:
            os.close(fd)


def sweep_scratch_dirs(tmpdir: str | None = None) -> list[str]:
    """Remove the scratch directories (:func:`scratch_dir`) of processes that are gone.

    A directory is removed when the pid in its name names no process, or, for a
    name without a pid (older overlay), when it is older than
    :data:`LEGACY_SCRATCH_AGE_S`. Only directories of the current user are
    touched; a symlink is never followed.

    Args:
        tmpdir: where to look; default :func:`temp_dir`.
    Returns:
        The names removed (sorted).
    """
    tmpdir = tmpdir or temp_dir()
    try:
        names = os.listdir(tmpdir)
    except OSError:
        return []
    removed = []
    now = time.time()
    for name in names:
        # The prefix first: the pattern is compiled only where a scratch name is.
        match = _SCRATCH_RE.match(name) if name.startswith("overlay-") else None
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
            remove_dir(full)
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
        tmp = _temp_name(directory, base)
        try:
            os.symlink(target, tmp)
            break
        except FileExistsError:
            continue
    with _removed_on_failure(tmp):
        os.replace(tmp, path)


def _temp_name(directory: str, base: str) -> str:
    """A new temp name ``DIRECTORY/.BASE.XXXXXXXX.tmp`` (:data:`TEMP_RE`): eight
    characters of :data:`_TEMP_CHARS`, as ``tempfile.mkstemp`` draws them."""
    return os.path.join(directory, f".{base}.{_random_chars()}.tmp")


def _random_chars() -> str:
    """Eight characters of :data:`_TEMP_CHARS`, as ``tempfile`` draws a name's."""
    return "".join(_TEMP_CHARS[b % len(_TEMP_CHARS)] for b in os.urandom(8))


def _temp_file(directory: str, base: str) -> tuple[int, str]:
    """Create a new temp file for ``base`` in ``directory`` as ``tempfile.mkstemp``
    does (``O_EXCL``, mode 0600, not inherited by children, a symlink not followed),
    without importing :mod:`tempfile`, which every command that writes would pay at
    start-up (it imports :mod:`shutil`, :mod:`random`, bz2 and lzma).

    Returns:
        ``(fd, path)``, the file open for writing.
    Raises:
        OSError: the directory is missing or not writable.
    """
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
    while True:
        tmp = _temp_name(directory, base)
        try:
            return os.open(tmp, flags, 0o600), tmp
        except FileExistsError:
            continue


@contextlib.contextmanager
def _removed_on_failure(tmp: str) -> Iterator[None]:
    """Remove the temp file ``tmp`` when the block fails, however it fails, and re-raise."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


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
    fd, tmp = _temp_file(directory, os.path.basename(path))
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


def write_if_changed(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` (temp + rename) unless it already holds exactly that."""
    try:
        with open(path, "rb") as fh:
            if fh.read() == data:
                return
    except FileNotFoundError:
        pass
    atomic_write(path, data)


def prune_empty(top: str) -> None:
    """Remove the empty directories under ``top`` (``top`` too, when it ends empty)."""
    if not os.path.isdir(top):
        return
    for dirpath, _dirnames, _filenames in sorted(
        os.walk(top, topdown=False), key=lambda t: -len(t[0])
    ):
        if not os.listdir(dirpath):
            os.rmdir(dirpath)
