"""Reading records safely: :func:`read_record` and the functions built on it.

Every read of a *record* (``patches-rocm/overlay.toml``, ``patches-rocm/series``,
each patch, ``LOCAL_FIXES.md``, ``suites.toml``, the files under
``patches-rocm/resolved/``) goes through :func:`read_record` (or
:func:`read_record_dir` for the resolutions): regular files inside the
repository only, size-capped, and every failure is one :class:`RecordError`
line naming the file (exit 2, or a finding inside ``overlay verify``).
``docs/records.md`` states the rules.

Re-exported by :mod:`overlay.fs.atomic`, where callers have always found them.
"""

import errno
import os
import stat
from typing import NamedTuple

from overlay.errors import OverlayError
from overlay.git.run import git_ignored

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
    """What a non-regular file is, in words (``"a FIFO"``)."""
    for test, name in _KIND_NAMES:
        if test(mode):
            return name
    return "not a regular file"


def _inside(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or below it (both resolved)."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def read_record(
    root: str | os.PathLike,
    rel: str,
    *,
    max_bytes: int = RECORD_MAX_BYTES,
    what: str = "record",
    allow_symlink: bool = True,
    resolved: dict[str, str] | None = None,
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
        resolved: directories already resolved in this batch of reads (path -> real
            path), kept by a caller that reads many records of one directory (the
            series: a thousand patches resolve ``patches-rocm/`` once).
    Returns:
        The file's bytes.
    Raises:
        RecordMissing: the file does not exist (or a parent is not a directory).
        RecordError: a symlink that leaves the repository (or is not allowed),
            a loop, not a regular file, bigger than ``max_bytes``, a name too
            long, or any other read error; one line naming ``rel`` (exit 2).
    """
    if resolved is None:
        resolved = {}
    root_real = _real_dir(os.fspath(root), resolved)
    real = _resolve_record(root_real, rel, what, allow_symlink, resolved)
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
        return _read_capped(fd, rel, what, max_bytes)
    except OSError as exc:
        raise _os_error(rel, what, exc) from None
    finally:
        os.close(fd)


def _real_dir(path: str, resolved: dict[str, str]) -> str:
    """``os.path.realpath(path)``, kept in ``resolved`` for the rest of the batch."""
    real = resolved.get(path)
    if real is None:
        real = resolved[path] = os.path.realpath(path)
    return real


def _resolve_record(
    root_real: str, rel: str, what: str, allow_symlink: bool, resolved: dict[str, str]
) -> str:
    """The real path of record ``rel``: it exists, is a symlink only where allowed,
    and resolves inside ``root_real``. Raises :class:`RecordError` (or
    :class:`RecordMissing`) otherwise. A last component that is no symlink resolves to
    its directory's real path joined with its name: the directory is resolved once
    per batch (``resolved``)."""
    full = os.path.join(root_real, *rel.split("/"))
    try:
        lst = os.lstat(full)
    except FileNotFoundError:
        raise RecordMissing(rel, f"{what} not found") from None
    except OSError as exc:
        raise _os_error(rel, what, exc) from None
    except ValueError:  # a NUL byte in the name
        raise RecordError(rel, f"{what} name holds a NUL byte") from None
    if stat.S_ISLNK(lst.st_mode) and not allow_symlink:
        raise RecordError(
            rel,
            f"{what} is a symlink (-> {_readlink(full)}); it must be a regular file",
            hint="replace the link by the file it points at",
        )
    try:
        if stat.S_ISLNK(lst.st_mode):
            real = os.path.realpath(full, strict=True)
        else:
            real = os.path.join(
                _real_dir(os.path.dirname(full), resolved), os.path.basename(full)
            )
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
    return real


def _read_capped(fd: int, rel: str, what: str, max_bytes: int) -> bytes:
    """The bytes of the open regular file ``fd``, at most ``max_bytes`` of them.

    Raises:
        RecordError: not a regular file, or bigger than ``max_bytes``.
        OSError: the read fails (the caller names it).
    """
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
            raise RecordError(rel, f"{what} is more than the {max_bytes}-byte limit")
    return b"".join(chunks)


def _os_error(rel: str, what: str, exc: OSError) -> RecordError:
    """One :class:`RecordError` line for an ``OSError`` reading ``rel`` (a parent that
    is not a directory counts as missing: :class:`RecordMissing`)."""
    reasons = {
        errno.ELOOP: "a symlink loop (or a symlink where none is allowed)",
        errno.ENAMETOOLONG: "its name is too long",
        errno.EISDIR: "a directory, not a regular file",
        errno.ENOTDIR: "a parent is not a directory",
        errno.EACCES: "permission denied",
    }
    reason = (reasons.get(exc.errno) if exc.errno is not None else None) or (
        exc.strerror or str(exc)
    )
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
    Entries git ignores (:func:`overlay.git.run.git_ignored`: a ``.DS_Store`` beside the
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
    try:
        st = os.lstat(base)
    except FileNotFoundError:
        return {}, []
    except OSError as exc:
        return {}, [_os_error(rel_dir, "directory", exc)]
    if not stat.S_ISDIR(st.st_mode):
        return {}, [RecordError(rel_dir, f"is {_kind(st.st_mode)}, not a directory")]
    errors: list[RecordError] = []
    # First the walk (names and kinds only), then one question to git about all of them.
    found = _walk_record_dir(base, rel_dir, what, max_files, errors)
    skip: set[str] = set()
    if skip_ignored and found:
        skip = git_ignored(root_real, [rel_dir, *(e.rel for e in found)])
        if rel_dir in skip:
            # The directory itself is ignored (a copy staged under .overlay/, an overlay
            # kept under build/): the rules then say nothing about single records in it.
            skip = set()
    out: dict[str, bytes] = {}
    resolved: dict[str, str] = {}  # each directory of the scan resolved once
    for entry in sorted(found):
        if entry.rel in skip:
            if ignored is not None:
                ignored.append(entry.name)
        elif len(out) >= max_files and stat.S_ISREG(entry.mode):
            errors.append(
                RecordError(
                    rel_dir, f"more than {max_files} files; the rest were not read"
                )
            )
            break
        else:
            _read_entry(root_real, entry, what, max_bytes, out, errors, resolved)
    if len(found) > 2 * max_files and len(out) < max_files:
        errors.append(
            RecordError(
                rel_dir, f"more than {2 * max_files} entries; the rest were not read"
            )
        )
    return dict(sorted(out.items())), errors


class _Found(NamedTuple):
    """An entry of a record directory that is not a directory."""

    name: str  #: path below the scanned directory
    rel: str  #: repository path
    path: str  #: file-system path
    mode: int  #: ``lstat`` mode


def _walk_record_dir(
    base: str, rel_dir: str, what: str, max_files: int, errors: list[RecordError]
) -> list[_Found]:
    """Every entry under ``base`` that is not a directory (symlinked directories are not
    entered), appending an error for each unreadable one; the walk stops past
    ``2 * max_files`` entries."""
    found: list[_Found] = []
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
                found.append(_Found(name, rel, entry.path, mode))
        if len(found) > 2 * max_files:  # bound the walk too, ignored entries included
            break
        pending.extend(reversed(dirs))
    return found


def _read_entry(
    root_real: str,
    entry: _Found,
    what: str,
    max_bytes: int,
    out: dict[str, bytes],
    errors: list[RecordError],
    resolved: dict[str, str],
) -> None:
    """Read one entry into ``out``, or append why it is refused (a symlink, not a
    regular file, or what :func:`read_record` refuses) to ``errors``; ``resolved`` is
    the scan's batch of resolved directories (see :func:`read_record`)."""
    if stat.S_ISLNK(entry.mode):
        errors.append(
            RecordError(
                entry.rel,
                f"{what} is a symlink (-> {_readlink(entry.path)}); "
                "it must be a regular file",
                hint="replace the link by the file it points at",
            )
        )
    elif not stat.S_ISREG(entry.mode):
        errors.append(
            RecordError(entry.rel, f"{what} is {_kind(entry.mode)}, not a regular file")
        )
    else:
        try:
            out[entry.name] = read_record(
                root_real,
                entry.rel,
                max_bytes=max_bytes,
                what=what,
                allow_symlink=False,
                resolved=resolved,
            )
        except RecordError as exc:
            errors.append(exc)


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
    """A symlink's target, ``"?"`` when it cannot be read."""
    try:
        return os.readlink(path)
    except OSError:
        return "?"
