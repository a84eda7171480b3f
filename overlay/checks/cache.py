"""The verdict cache of ``overlay verify``.

A verify whose inputs are exactly those of an earlier one prints that run's report
again without computing it: the interpreter's start, a read of every input and one
``git ls-files`` are all it costs (``benchmarks/verify_bench.py``).

**The key is the inputs themselves**, byte for byte, not a hash of them: every input
is read and the whole byte string is compared with the one stored next to the
report, so a changed input can only miss, never hit by a collision. It holds:

* every record: ``overlay.toml``, ``series``, each patch ``series`` names (or that it
  is absent), the names in ``patches-rocm/`` (SER002), ``LOCAL_FIXES.md``,
  ``suites.toml``, every file under ``patches-rocm/resolved/`` (names and bytes);
* the repository's paths as verify lists them (:func:`repo_paths`, FIX015 and FIX021);
* the git store: its path and identity, ``HEAD``, ``config``, ``packed-refs``, every
  ref (name, size, mtime, inode), ``objects/info/alternates``, and ``--offline``;
* whether a rebase or sync is in progress (``.overlay/rebase/state.json``);
* the tool: overlay's version and every file of the package (size and mtime), the
  Python version, the ``git`` found on PATH (path, size, mtime, inode), and the
  environment git and overlay read (``GIT_*``, ``OVERLAY_*``, ``PATH``, ``HOME``,
  ``XDG_CONFIG_HOME``, ``XDG_CACHE_HOME``);
* the options that change the report (``--format``, ``--only``, ``--skip``).

Objects of the store are not listed: they never change once written, and what
verify needs of them is reachable from refs in the key (``refs/overlay/keep/*``
keep the pinned commits, so ``git gc`` cannot remove them); layer trees that gc may
prune are recomputed to the same verdict. A verdict that depends on a missing
object (MAN001, MAN002) is not stored at all.

Inputs are read the simple way here: a record that is a symlink, not a regular
file, over 16 MiB, or in a directory that is a link is not cached (the full verify
runs and reports it, as it always did). The key is read before the verify runs and
again after it; the report is stored only when both agree, so an input changed
during the run is not paired with a verdict made from the other version.

The cache is one file, ``.overlay/verify-cache`` (crash-safe write through
:func:`overlay.fs.atomic.atomic_write`), holding the key of the last inputs and the
reports made for them, one per set of options (at most :data:`MAX_ENTRIES`).

Only the standard library's always-loaded modules are imported here (no
``subprocess``, ``json`` or ``hashlib``): this module runs on every ``overlay
verify`` before anything else.
"""

from __future__ import annotations

import os
import stat
import sys

from overlay import __version__, layout
from overlay.checks.locate import default_store_dir
from overlay.git.env import ls_files_z

_MAGIC = b"overlay verify cache 1\n"
#: Reports kept for one set of inputs (one per combination of --format/--only/--skip).
MAX_ENTRIES = 16
#: Largest record read for the key; a bigger one is refused by verify (fs.records.RECORD_MAX_BYTES).
_MAX_RECORD = 16 * 1024 * 1024
_ENV_NAMES = ("PATH", "HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")
_SAFE_NAME = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-"
)


class _Uncached(Exception):
    """An input that is not read the simple way: verify itself must look at it."""


def _field(out: list[bytes], tag: bytes, data: bytes) -> None:
    """Append one length-prefixed field (``tag`` and ``data``) to the key being built."""
    out.append(b"%s %d\n" % (tag, len(data)))
    out.append(data)


def _read(path: str) -> bytes | None:
    """A regular file's bytes (``None`` when it does not exist); anything else is uncached."""
    try:
        fd = os.open(
            path,
            os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0),
        )
    except FileNotFoundError:
        return None
    except OSError:
        raise _Uncached(path) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_RECORD:
            raise _Uncached(path)
        chunks: list[bytes] = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def _stat(path: str) -> bytes:
    """``path``'s mode, size, mtime, inode (as bytes; ``b"-"`` when absent); a file
    that cannot be stat'ed is uncached."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return b"-"
    except OSError:
        raise _Uncached(path) from None
    return b"%o %d %d %d %d" % (
        st.st_mode,
        st.st_size,
        st.st_mtime_ns,
        st.st_ino,
        st.st_dev,
    )


def _real_dir(path: str) -> bool:
    """True for a directory that is not a symlink; False when absent; uncached otherwise."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        raise _Uncached(path)
    return True


def _walk_stat(out: list[bytes], tag: bytes, top: str) -> None:
    """Every entry under ``top`` (name and :func:`_stat`), sorted, directories entered."""
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            with os.scandir(os.path.join(top, rel) if rel else top) as it:
                names = sorted(e.name for e in it)
        except FileNotFoundError:
            _field(out, tag, rel.encode("utf-8", "surrogateescape") + b" -")
            continue
        for name in names:
            sub = f"{rel}/{name}" if rel else name
            info = _stat(os.path.join(top, sub))
            _field(out, tag, sub.encode("utf-8", "surrogateescape") + b" " + info)
            if info[:2] == b"40":  # S_IFDIR's octal mode starts 40
                stack.append(sub)


def _series_names(data: bytes) -> list[str]:
    """The patch names ``series`` lists, read as verify reads them; uncached for anything
    unusual (not UTF-8, a line with options, a name with a directory or odd characters)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise _Uncached("series") from None
    names = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if (
            len(line.split()) != 1
            or line.startswith(".")
            or not set(line) <= _SAFE_NAME
        ):
            raise _Uncached("series")
        names.append(line)
    return names


def _git_on_path() -> bytes:
    """The ``git`` PATH finds, with its stat (``b"-"`` when none): another git may give
    another verdict."""
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(directory or ".", "git")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return (
                candidate.encode("utf-8", "surrogateescape")
                + b" "
                + _stat(os.path.realpath(candidate))
            )
    return b"-"


def repo_paths(root: str) -> list[str]:
    """Every path of the overlay repository that exists: ``git ls-files --cached --others
    --exclude-standard`` run in ``root`` with the caller's environment (a tracked file
    deleted from the work tree is left out, and so is overlay's own ``.overlay/``), or,
    outside a git repository, a walk of ``root`` without ``.git``, ``.venv``, ``build``
    and ``.overlay``.

    verify's FIX015 and FIX021 read this list (:func:`overlay.checks._repo_paths`), and
    the verdict key holds it, so the two are the same list by construction. git is
    started by :func:`overlay.git.env.ls_files_z` (``os.posix_spawnp``: the ``subprocess``
    module is not loaded for it).

    Returns:
        Repository-relative paths, ``/``-separated, in git's order (or the walk's).
    """
    out = ls_files_z(root)
    if out:
        # --cached still lists a tracked file deleted from the work tree: keep what exists.
        # overlay's own state (.overlay/, where this cache lives) is never a repository path,
        # in git's list as in the walk below, ignored or not.
        return [
            p
            for p in out.decode("utf-8", "replace").split("\0")
            if p
            and not p.startswith(f"{layout.STATE_DIR}/")
            and os.path.lexists(os.path.join(root, p))
        ]
    paths = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [
            d
            for d in dirnames
            if d not in (".git", ".venv", layout.BUILD_DIR, layout.STATE_DIR)
        ]
        paths += [
            os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/")
            for f in filenames
        ]
    return paths


def inputs(root: str, git_dir: str | None, offline: bool) -> bytes | None:
    """Everything the verdict of ``overlay verify`` at ``root`` depends on (see the module).

    Args:
        root: the overlay repository (found by :func:`overlay.checks.locate.find_root`).
        git_dir: ``--git-dir`` as given, or ``None`` for the default store.
        offline: ``--offline``.
    Returns:
        The key: the inputs as one byte string; ``None`` when an input is not read
        the simple way (a symlink, a special file, an odd series line), so that no
        verdict is cached for it.
    """
    out: list[bytes] = []
    try:
        root = os.path.realpath(root)
        pkg = os.path.dirname(os.path.abspath(__file__))
        _field(
            out,
            b"tool",
            f"{__version__} {sys.version} {root}".encode("utf-8", "surrogateescape"),
        )
        _package(out, pkg)
        _field(out, b"git", _git_on_path())
        for name in sorted(os.environ):
            if name.startswith(("GIT_", "OVERLAY_")) or name in _ENV_NAMES:
                _field(
                    out,
                    b"env",
                    f"{name}={os.environ[name]}".encode("utf-8", "surrogateescape"),
                )
        pdir = layout.under(root, layout.PATCH_DIR)
        if not _real_dir(pdir):
            return None
        manifest = _read(layout.under(root, layout.MANIFEST))
        if manifest is None:
            return None
        _field(out, b"manifest", manifest)
        series = _read(layout.under(root, layout.SERIES))
        _field(out, b"series", b"-" if series is None else b"+" + series)
        for name in dict.fromkeys(_series_names(series or b"")):
            data = _read(os.path.join(pdir, name))
            _field(
                out, b"patch", name.encode() + (b" -" if data is None else b" +" + data)
            )
        _field(
            out,
            b"listing",
            "\0".join(sorted(os.listdir(pdir))).encode("utf-8", "surrogateescape"),
        )
        for rel in (
            layout.LOCAL_FIXES,
            layout.SUITES_TOML,
        ):
            if os.path.dirname(rel):
                _real_dir(os.path.join(root, os.path.dirname(rel)))
            data = _read(os.path.join(root, rel))
            _field(out, rel.encode(), b"-" if data is None else b"+" + data)
        _resolutions(out, layout.under(root, layout.RESOLVED_DIR))
        _field(
            out,
            b"rebase",
            _stat(layout.under(root, layout.REBASE_STATE)),
        )
        _field(
            out, b"repo", "\0".join(repo_paths(root)).encode("utf-8", "surrogateescape")
        )
        store = os.path.abspath(git_dir or default_store_dir())
        _field(
            out,
            b"store",
            f"{store} {bool(offline)}".encode("utf-8", "surrogateescape")
            + b" "
            + _stat(store),
        )
        for name in ("HEAD", "config", "packed-refs"):
            _field(out, name.encode(), _stat(os.path.join(store, name)))
        alternates = _read(os.path.join(store, "objects", "info", "alternates"))
        _field(out, b"alternates", b"-" if alternates is None else b"+" + alternates)
        _walk_stat(out, b"ref", os.path.join(store, "refs"))
    except _Uncached:
        return None
    return b"".join(out)


def _package(out: list[bytes], pkg: str) -> None:
    """overlay's own files (name, size, mtime), so that a changed tool never reuses a verdict."""
    stack = [""]
    while stack:
        rel = stack.pop()
        with os.scandir(os.path.join(pkg, rel) if rel else pkg) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            if entry.name == "__pycache__":
                continue
            sub = f"{rel}/{entry.name}" if rel else entry.name
            if entry.is_dir(follow_symlinks=False):
                stack.append(sub)
            else:
                st = entry.stat(follow_symlinks=False)
                _field(
                    out,
                    b"pkg",
                    b"%s %d %d"
                    % (
                        sub.encode("utf-8", "surrogateescape"),
                        st.st_size,
                        st.st_mtime_ns,
                    ),
                )


def _resolutions(out: list[bytes], top: str) -> None:
    """Every file under ``patches-rocm/resolved/`` (name and bytes); a link or special
    file is uncached."""
    if not _real_dir(top):
        _field(out, b"resolved", b"-")
        return
    stack = [""]
    while stack:
        rel = stack.pop()
        with os.scandir(os.path.join(top, rel) if rel else top) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            sub = f"{rel}/{entry.name}" if rel else entry.name
            if entry.is_dir(follow_symlinks=False):
                _field(out, b"resolved-dir", sub.encode("utf-8", "surrogateescape"))
                stack.append(sub)
                continue
            data = _read(entry.path)
            if data is None:
                raise _Uncached(entry.path)  # vanished while read
            _field(
                out, b"resolved", sub.encode("utf-8", "surrogateescape") + b"\0" + data
            )


def options_key(fmt: str, only: tuple[str, ...], skip: tuple[str, ...]) -> bytes:
    """The options that change the report, as one line (``--strict`` and ``-o`` do not)."""
    return f"{fmt}\0{','.join(only)}\0{','.join(skip)}".encode(
        "utf-8", "surrogateescape"
    )


def _parse(data: bytes) -> tuple[bytes, list[tuple[bytes, bytes, bytes]]]:
    """``(key, [(options, report, flags), ...])`` of a cache file; ``ValueError`` when malformed."""
    if not data.startswith(_MAGIC):
        raise ValueError("not a verdict cache")
    pos = len(_MAGIC)

    def take() -> bytes:
        nonlocal pos
        end = data.index(b"\n", pos)
        size = int(data[pos:end])
        start = end + 1
        if size < 0 or start + size > len(data):
            raise ValueError("truncated")
        pos = start + size
        return data[start:pos]

    key = take()
    entries = []
    while pos < len(data):
        entries.append((take(), take(), take()))
    return key, entries


def _load(root: str) -> tuple[bytes, list[tuple[bytes, bytes, bytes]]] | None:
    """The cache file parsed (:func:`_parse`), or ``None`` when absent or unreadable."""
    try:
        with open(os.path.join(root, layout.VERIFY_CACHE), "rb") as fh:
            return _parse(fh.read())
    except (OSError, ValueError):
        return None


def lookup(root: str, key: bytes, options: bytes) -> tuple[str, bool, bool] | None:
    """The report stored for exactly these inputs and options.

    Args:
        root: the overlay repository.
        key: :func:`inputs` now.
        options: :func:`options_key`.
    Returns:
        ``(report text, has errors, has warnings)``, or ``None`` (no cache, other
        inputs, other options, or an unreadable cache file).
    """
    cached = _load(root)
    if cached is None or cached[0] != key:
        return None
    for opts, text, flags in cached[1]:
        if opts == options:
            return text.decode("utf-8", "surrogateescape"), b"E" in flags, b"W" in flags
    return None


def remember(
    root: str, key: bytes, options: bytes, text: str, errors: bool, warnings: bool
) -> None:
    """Store a report for ``key`` and ``options`` (the other reports of the same inputs are kept).

    Written with :func:`overlay.fs.atomic.atomic_write` (temp file and rename: a killed
    process leaves the old cache or the new one). A cache that cannot be written only
    costs time: the error is swallowed.
    """
    # fs.atomic (tempfile, random): only a miss writes; a hit loads nothing more
    from overlay.fs.atomic import atomic_write

    cached = _load(root)
    entries = cached[1] if cached is not None and cached[0] == key else []
    entries = [e for e in entries if e[0] != options][-(MAX_ENTRIES - 1) :]
    entries.append(
        (
            options,
            text.encode("utf-8", "surrogateescape"),
            (b"E" if errors else b"") + (b"W" if warnings else b""),
        )
    )
    parts = [_MAGIC, b"%d\n" % len(key), key]
    for item in entries:
        for piece in item:
            parts += [b"%d\n" % len(piece), piece]
    path = os.path.join(root, layout.VERIFY_CACHE)
    try:
        layout.make_state_dir(root)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        atomic_write(path, b"".join(parts), durable=False)
    except OSError:
        pass
