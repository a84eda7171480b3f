"""The series file and the patch files it names.

``patches-rocm/series`` is quilt's format: one patch file name a line, ``#``
starts a comment, blank lines are ignored. Patch files are ``git format-patch``
mail (docs/design.md §6): a ``Subject:`` header, a description, trailers
(``Local-Fix: N``, ``Forwarded: ...``), a ``---`` line, then git diffs.

A patch is read as bytes end to end: :mod:`overlay.records.mailhead` reads its head (subject,
description, trailers, author), :mod:`overlay.records.filediff` each file's diff (names, modes,
recorded blobs, hunks); this module ties them into a :class:`Patch`. ``FileChange``,
``Hunk``, ``diff_pieces``, ``split_patch`` and ``is_patch_break`` are re-exported here
for the modules that import them from :mod:`overlay.records.series`.
"""

import contextlib
import json
import os
from collections.abc import Callable, Collection, Sequence
from typing import Any, NamedTuple

from overlay import layout
from overlay.digests import sha256
from overlay.errors import OverlayError, PatchFormatError
from overlay.fs.atomic import atomic_write, write_if_changed
from overlay.fs.paths import check_path
from overlay.fs.reading import RecordMissing, read_record, read_record_text
from overlay.records.filediff import FileChange as FileChange  # re-exported
from overlay.records.filediff import Hunk as Hunk  # re-exported
from overlay.records.filediff import diff_pieces, parse_file_diff
from overlay.records.mailhead import is_patch_break as is_patch_break  # re-exported
from overlay.records.mailhead import parse_head, split_patch


class Patch(NamedTuple):
    """A parsed patch file.

    Attributes:
        name: file name as listed in ``series`` (relative to ``patches-rocm/``).
        path: absolute path of the file.
        data: the file's bytes, exactly.
        subject: subject without the ``[PATCH ...]`` tag (other tags kept).
        description: body text between the headers and the trailers.
        trailers: trailer key -> values, in order (``{"Local-Fix": ["12"]}``).
        trailer_lines: trailer key -> 1-based line numbers of those values.
        changes: the file changes in order.
        author: the ``From:`` header (``Name <email>``), or ``None``.
    """

    name: str
    path: str
    data: bytes
    subject: str
    description: str
    trailers: dict[str, list[str]]
    trailer_lines: dict[str, list[int]]
    changes: tuple[FileChange, ...]
    author: str | None = None

    @property
    def touched(self) -> frozenset[str]:
        """Every path the patch names, both names of a rename included."""
        return frozenset(p for c in self.changes for p in (c.source, c.target) if p)

    @property
    def link_changes(self) -> tuple[FileChange, ...]:
        """The changes that make, change or remove a symlink (mode 120000 on either
        side), in order."""
        return tuple(c for c in self.changes if "120000" in (c.new_mode, c.old_mode))

    @property
    def file_rows(self) -> list[tuple[str, int, int, str]]:
        """``(path, added, removed, mode change or "")`` per file change, in order
        (:attr:`FileChange.mode_change <overlay.records.filediff.FileChange.mode_change>`):
        what ``overlay record`` says it wrote."""
        return [(c.path, c.added, c.removed, c.mode_change) for c in self.changes]

    @property
    def deleted(self) -> frozenset[str]:
        """Paths the patch deletes (a rename's old name included)."""
        return frozenset(
            c.source
            for c in self.changes
            if c.source and (c.target is None or c.rename)
        )

    @property
    def local_fix(self) -> int | None:
        """The ``Local-Fix:`` number, or ``None`` when absent or not an integer."""
        values = self.trailers.get("Local-Fix")
        if not values:
            return None
        try:
            return int(values[0])
        except ValueError:
            return None

    @property
    def forwarded(self) -> str | None:
        """The ``Forwarded:`` value, or ``None``."""
        values = self.trailers.get("Forwarded")
        return values[0] if values else None


#: Most patches a series may list (a bound on the work a hostile ``series`` can
#: cause; the real series has a dozen, the long-series benchmark 300).
MAX_SERIES_ENTRIES = 10_000


def read_series(root: str) -> list[tuple[str, int]]:
    """The patch names listed in ``<root>/patches-rocm/series``.

    The file is read with :func:`overlay.fs.atomic.read_record` (a regular file
    inside the repository, a symlink to one followed, at most 16 MiB, UTF-8).

    Returns:
        ``[(name, line_number), ...]`` in order; an absent file is an empty series.
    Raises:
        RecordError: the file is refused (symlink out of the repository, FIFO,
            directory, too big) or not UTF-8 (the byte offset is named) (exit 2).
        PatchFormatError: a line has options or an unsafe name, or the series
            lists more than :data:`MAX_SERIES_ENTRIES` patches (exit 2).
    """
    try:
        text = read_record_text(root, layout.SERIES, what="series")
    except RecordMissing:
        return []
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if len(line.split()) != 1:
            raise PatchFormatError(
                f"{layout.SERIES}:{number}: expected one patch file name, got {raw[:80]!r}"
            )
        check_path(line, what=f"series entry at {layout.SERIES}:{number}")
        out.append((line, number))
        if len(out) > MAX_SERIES_ENTRIES:
            raise PatchFormatError(
                f"{layout.SERIES}:{number}: more than {MAX_SERIES_ENTRIES} patches listed"
            )
    return out


def parse_patch(
    data: bytes, name: str, path: str = "", *, header_only: bool = False
) -> Patch:
    """Parse one format-patch file, as bytes end to end.

    Context lines in any encoding survive (Latin-1 after a pin bump, shared case 12);
    only the subject, description and trailers are decoded (UTF-8, bad bytes
    replaced) for display. Quoted paths are unquoted as git does (case 10); the
    message ends where ``git mailinfo`` ends it (case 16).

    Args:
        data: the file's bytes.
        name: its name in ``series`` (for messages).
        path: its absolute path.
        header_only: skip the diff (``changes`` stays empty): enough for the subject,
            description, trailers and author, at a fraction of the cost.
    Returns:
        A :class:`Patch`.
    Raises:
        PatchFormatError: no diff, a header or hunk that does not hold together
            (the message names the patch's line), an empty diff or a combined
            ``diff --cc`` section.
        UnsafePath: a header path is absolute, has ``..`` or ``.git``.
    """
    try:
        head, diff = split_patch(data)
    except PatchFormatError as exc:
        raise PatchFormatError(f"{name}: {exc.message}", kind=exc.kind) from None
    subject, description, trailers, trailer_lines, author = parse_head(head)
    changes = [] if header_only else _file_changes(name, diff, head.count(b"\n") + 1)
    return Patch(
        name=name,
        path=path,
        data=data,
        subject=subject,
        description=description,
        trailers=trailers,
        trailer_lines=trailer_lines,
        changes=tuple(changes),
        author=author,
    )


def _file_changes(name: str, diff: bytes, first_line: int) -> list[FileChange]:
    """Each file's diff of a patch's diff part, which starts at line ``first_line``.

    Raises:
        PatchFormatError: a combined diff, a piece that is not a ``diff --git``, or no
            file at all.
    """
    changes = []
    line = first_line
    for piece in diff_pieces(diff):
        if piece.startswith(b"diff --cc ") or piece.startswith(b"diff --combined "):
            raise PatchFormatError(
                f"{name}:{line}: a combined diff ('diff --cc', a merge commit's diff) "
                "cannot be applied as a patch",
                line=line,
                kind="combined",
            )
        if not piece.startswith(b"diff --git "):
            raise PatchFormatError(f"{name}:{line}: expected 'diff --git'", line=line)
        changes.append(parse_file_diff(piece, line, name))
        line += piece.count(b"\n") + 1
    if not changes:
        raise PatchFormatError(f"{name}: the diff names no file")
    return changes


def load_patch(
    root: str,
    name: str,
    resolved: dict[str, str] | None = None,
    kept: "ParsedSeries | None" = None,
) -> Patch:
    """Read and parse ``<root>/patches-rocm/<name>``.

    The file is read with :func:`overlay.fs.atomic.read_record`: a regular file
    inside the repository, not a symlink (``refresh`` rewrites patches in place,
    which would replace a link by a file), at most 16 MiB.

    Args:
        root: the overlay repository; name: the patch's file name.
        resolved: the directories resolved so far in this batch of reads (see
            :func:`overlay.fs.reading.read_record`).
        kept: parses kept by earlier commands (:class:`ParsedSeries`), asked first.
    Raises:
        PatchFormatError: the file is missing or unparsable; a diff whose numbers
            overflow the parser (``ValueError``) or that nests too deep
            (``RecursionError``) is unparsable too (exit 2).
        RecordError: the file is refused (symlink, FIFO, directory, too big,
            a name too long) (exit 2).
        UnsafePath: a header path is absolute, has ``..`` or ``.git`` (exit 2).
    """
    try:
        data = patch_bytes(root, name, resolved=resolved)
    except RecordMissing:
        raise PatchFormatError(
            f"{layout.PATCH_DIR}/{name} is listed in series but does not exist"
        ) from None
    path = os.path.join(root, layout.PATCH_DIR, name)
    try:
        if kept is not None:
            return kept.parsed(data, name, path)
        return parse_patch(data, name, path)
    except (ValueError, RecursionError) as exc:
        # unidiff converts hunk-header numbers with int(): more than 4,300 digits raise ValueError.
        raise PatchFormatError(
            f"{name}: cannot parse diff: {type(exc).__name__}: "
            f"{str(exc).split(';')[0][:120]}"
        ) from None


def patch_bytes(root: str, name: str, resolved: dict[str, str] | None = None) -> bytes:
    """The bytes of ``<root>/patches-rocm/<name>``, read as a record: a regular file
    inside the repository, not a symlink, at most 16 MiB (as :func:`load_patch` reads
    it).

    Args:
        root: the overlay repository; name: the patch's file name.
        resolved: as :func:`load_patch`.
    Raises:
        RecordMissing: there is no such file; RecordError: it is refused (exit 2).
    """
    return read_record(
        root,
        f"{layout.PATCH_DIR}/{name}",
        what="patch",
        allow_symlink=False,
        resolved=resolved,
    )


def write_patch(root: str, name: str, data: bytes, *, if_changed: bool = False) -> None:
    """Write ``<root>/patches-rocm/<name>`` (temp + rename).

    Args:
        root: the overlay repository (or a directory staged as one).
        name: the patch's file name; data: its bytes.
        if_changed: leave the file alone when it already holds ``data``.
    Raises:
        OSError: it cannot be written.
    """
    path = os.path.join(root, layout.PATCH_DIR, name)
    if if_changed:
        write_if_changed(path, data)
    else:
        atomic_write(path, data)


def rewrite_patch(
    patch: Patch, data: bytes, *, before_replace: Callable[[], None] | None = None
) -> None:
    """Write ``data`` over the file ``patch`` was read from (:attr:`Patch.path`, temp +
    rename; ``before_replace`` as :func:`overlay.fs.atomic.atomic_write` takes it).

    Raises:
        OSError: it cannot be written.
    """
    atomic_write(patch.path, data, before_replace=before_replace)


def remove_patch(root: str, name: str) -> None:
    """Delete ``<root>/patches-rocm/<name>`` when it exists (its series line is the
    series writers' business)."""
    path = os.path.join(root, layout.PATCH_DIR, name)
    if os.path.exists(path):
        os.unlink(path)


def load_series(root: str) -> list[Patch]:
    """Every patch of the series, parsed, in order (see :func:`read_series`).

    Each file is read and checked as :func:`load_patch` reads it; one that a command
    parsed before, the very same bytes, is taken from :class:`ParsedSeries` instead of
    parsed again.

    Raises:
        PatchFormatError, RecordError, UnsafePath: as :func:`load_patch`, for the
            first patch of the series that fails (exit 2).
    """
    resolved: dict[str, str] = {}  # the repository and patches-rocm/, resolved once
    kept = ParsedSeries(root)
    out = [load_patch(root, name, resolved, kept) for name, _ in read_series(root)]
    kept.save()
    return out


#: Bump when the parser would give another :class:`Patch` for the same bytes.
PARSED_CACHE_VERSION = 2

#: :func:`patch_digest` of the patch files this process read: a bytes object keeps its
#: own hash, so a lookup costs no pass over the bytes after the first.
_DIGESTS: dict[bytes, bytes] = {}
_DIGESTS_MAX = 4096


def patch_digest(data: bytes) -> bytes:
    """The SHA-256 digest of a patch file's bytes ``data``, computed once per process
    and bytes: the key of its kept parse (:class:`ParsedSeries`) and its part of the
    layer cache's key (:mod:`overlay.engine.layers`), which would each hash the same
    100 KB of the real series with CPython's own SHA-256 (:mod:`overlay.digests`):
    11 million instructions of an ``export`` for the two, 5 million once.

    Returns:
        32 bytes.
    """
    digest = _DIGESTS.get(data)
    if digest is None:
        if len(_DIGESTS) >= _DIGESTS_MAX:
            _DIGESTS.clear()  # a bound on what a long-lived process keeps
        digest = _DIGESTS[data] = sha256(data).digest()
    return digest


def _parsed_key(data: bytes) -> str:
    """The key of the parse of a patch holding ``data`` in :class:`ParsedSeries`."""
    return sha256(
        b"overlay-patch %d\0%s" % (PARSED_CACHE_VERSION, patch_digest(data))
    ).hexdigest()


class ParsedSeries:
    """The series' patches as the parser read them, kept in ``.overlay/``
    (:data:`~overlay.layout.SERIES_CACHE`) for the next command that reads the same
    files.

    Most commands read the whole series (``status``, ``tree``, ``export``, ``refresh
    --check``, a pin bump, a sync), and reading and parsing the dozen patches of the
    real series (each head and each file's hunks, with the first use of the parser's
    regular expressions) was 3.6 to 4.7 ms of a command's CPU here, against 1.3 to
    1.4 ms to read the files and their parses back. What the parser gives depends on
    a file's bytes alone (and on the parser: :data:`PARSED_CACHE_VERSION`), so each
    entry is keyed on them. Only patches that parsed are kept; an entry of the wrong
    shape, or a file that is not JSON, is parsed again. Kept, as the manifest's table
    is (:mod:`overlay.records.manifest`), only where the clone's state directory is
    already there, best effort and replaced atomically, with the entries of the
    series last read only.

    Args:
        root: the overlay repository.
        read: read what is kept (``False`` for a writer that replaces it whole with
            :meth:`add`: ``record``).
    """

    def __init__(self, root: str, *, read: bool = True) -> None:
        self._path = layout.under(root, layout.SERIES_CACHE)
        self._kept: dict[str, Any] = {}
        self._now: dict[str, Any] = {}
        self._missed = False
        if not read:
            return
        try:
            with open(self._path, "rb") as fh:
                kept = json.loads(fh.read())
            if kept.get("version") == PARSED_CACHE_VERSION:
                self._kept = dict(kept["patches"])
        except (OSError, ValueError, AttributeError, KeyError, TypeError):
            pass  # none kept, another parser's, or damaged: parse again

    def parsed(self, data: bytes, name: str, path: str) -> Patch:
        """The :class:`Patch` of the file ``name`` (at ``path``) holding ``data``: kept,
        else :func:`parse_patch`'s (then kept by :meth:`save`).

        Raises:
            PatchFormatError, UnsafePath, ValueError, RecursionError: as
                :func:`parse_patch` (nothing is kept for such a file).
        """
        key = _parsed_key(data)
        entry = self._kept.get(key)
        patch = _from_entry(entry, data, name, path) if entry is not None else None
        if patch is None:
            patch = parse_patch(data, name, path)
            entry = list(patch[3:])  # what parsing gave; JSON writes tuples as lists
            self._missed = True
        self._now[key] = entry
        return patch

    def add(self, patch: Patch) -> None:
        """Keep ``patch`` (parsed from :attr:`Patch.data`) with the patches read, for
        :meth:`save`: a writer of a patch file whose parse it holds (``record``)."""
        key = _parsed_key(patch.data)
        self._now[key] = list(patch[3:])
        self._missed = True

    def save(self) -> None:
        """Keep the entries of the patches read since :meth:`__init__`, when one of them
        was parsed and ``.overlay/`` is there; a failure only costs the next command
        the parse."""
        if not self._missed or not os.path.isdir(os.path.dirname(self._path)):
            return
        data = {"version": PARSED_CACHE_VERSION, "patches": self._now}
        with contextlib.suppress(OSError, ValueError, TypeError):
            atomic_write(self._path, json.dumps(data).encode(), durable=False)


def _from_entry(entry: Any, data: bytes, name: str, path: str) -> Patch | None:
    """The :class:`Patch` a kept entry (``[subject, description, trailers,
    trailer_lines, changes, author]``, the changes' fields and hunks as lists) stands
    for, or ``None`` when it is not of that shape."""
    try:
        subject, description, trailers, trailer_lines, changes, author = entry
        if not (
            isinstance(subject, str)
            and isinstance(description, str)
            and isinstance(trailers, dict)
            and isinstance(trailer_lines, dict)
            and (author is None or isinstance(author, str))
            and all(len(c) == len(FileChange._fields) for c in changes)
        ):
            return None
        files = tuple(
            FileChange(*c[:7], tuple(Hunk(*h) for h in c[7]), *c[8:])  # type: ignore[call-arg]
            for c in changes
        )
    except (TypeError, ValueError):
        return None
    return Patch(
        name, path, data, subject, description, trailers, trailer_lines, files, author
    )


# -- every writer of the series (quilt's patchfns: insert, remove, rename in one file) --
def series_text(root: str) -> str:
    """The series file's text as it is (``""`` when there is none), for the writers
    below; read as a record (:func:`overlay.fs.atomic.read_record_text`).

    Raises:
        RecordError: the file is refused or not UTF-8 (exit 2).
    """
    try:
        return read_record_text(root, layout.SERIES, what="series")
    except RecordMissing:
        return ""


def write_series(root: str, text: str) -> None:
    """Write ``text`` (from the writers below) as ``<root>/patches-rocm/series``
    (temp + rename).

    Raises:
        OSError: it cannot be written.
    """
    atomic_write(layout.under(root, layout.SERIES), text.encode())


def _line_end(text: str) -> str:
    """The series' own line ending (CRLF when it has one, else LF): every writer keeps
    it, so no command turns a CRLF series into LF or the reverse."""
    return "\r\n" if "\r\n" in text else "\n"


def _entry(line: str) -> str:
    """The patch name a series line lists (``""`` for a comment or a blank line)."""
    return line.split("#", 1)[0].strip()


def series_listing(names: Sequence[str]) -> str:
    """A new series listing ``names`` in order, one a line (LF)."""
    return "".join(f"{name}\n" for name in names)


def series_with(text: str, name: str, after: str | None) -> str:
    """``text`` (a series) with ``name`` on a new line after the entry ``after`` (the
    end when ``None``: after the last entry or comment, before trailing blank lines).

    Raises:
        OverlayError: ``after`` is not an entry of the series (exit 2).
    """
    nl = _line_end(text)
    lines = text.splitlines()
    if after is None:
        at = len(lines)
        while at and not lines[at - 1].strip():
            at -= 1
    else:
        at = next((i + 1 for i, ln in enumerate(lines) if _entry(ln) == after), -1)
        if at < 0:
            raise OverlayError(f"{after} is not in {layout.SERIES}")
    lines.insert(at, name)
    return nl.join(lines) + nl


def series_renamed(text: str, old: str, new: str) -> str:
    """``text`` (a series) with the entry ``old`` named ``new``, its comment and line
    ending kept.

    Raises:
        OverlayError: ``old`` is not an entry of the series (exit 2).
    """
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if _entry(line) == old:
            lines[i] = line.replace(old, new, 1)
            return "".join(lines)
    raise OverlayError(f"{old} is not in {layout.SERIES}")


def series_keeping(text: str, kept: Collection[str]) -> str:
    """``text`` (a series) without the entries not in ``kept`` (comments, blank lines
    and the line ending kept)."""
    return "".join(
        line
        for line in text.splitlines(keepends=True)
        if not _entry(line) or _entry(line) in kept
    )


def resolve_patch_name(listed: list[str], given: str) -> str:
    """The series patch ``given`` names: its file name (``.patch`` optional), or a
    unique prefix of one (``0002``), as quilt and git accept unique prefixes.

    Args:
        listed: the series' patch names, in order.
        given: what the user typed.
    Returns:
        The patch's file name; ``given`` with ``.patch`` when it names none (the
        caller then says it is not in the series).
    Raises:
        OverlayError: ``given`` is the prefix of several patches (exit 2); the
            message names them.
    """
    name = given if given.endswith(".patch") else given + ".patch"
    if name in listed:
        return name
    hits = [n for n in listed if n.startswith(given)] if given else []
    if len(hits) == 1:
        return hits[0]
    if hits:
        raise OverlayError(
            f"{given!r} is the start of {len(hits)} patches of the series: "
            f"{', '.join(sorted(hits))}",
            hint="give more of the name",
        )
    return name
