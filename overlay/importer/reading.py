"""Reading a whole-file overlay directory: its ``UPSTREAM`` record, ``LOCAL_FIXES.md``
and the overlay files, each as a record (``docs/records.md``).
"""

import dataclasses
import os

from overlay import layout
from overlay.errors import OverlayError
from overlay.fs.paths import check_path
from overlay.fs.reading import (
    RecordMissing,
    read_record,
    read_record_text,
    scan_record_dir,
)
from overlay.git.run import git_ignored
from overlay.lazy import lazy_pattern
from overlay.records import fixes

UPSTREAM_FILE = "UPSTREAM"
#: The keys an ``UPSTREAM`` record must hold.
UPSTREAM_KEYS = (
    "source",
    "branch",
    "commit",
    "fork_upstream_merge_base",
    "retargeted_to_mlx_pin",
)
#: The tree part of a whole-file overlay directory; everything else in it is records or notes.
TREE_NAMES = ("mlx", "CMakeLists.txt")

_UPSTREAM_LINE = lazy_pattern(
    r"^(?P<key>[A-Za-z_][A-Za-z0-9_.-]*)\s*[:=]\s*(?P<value>.*?)\s*$"
)
_HEX_REF = lazy_pattern(r"^[0-9a-fA-F]{7,40}$")


@dataclasses.dataclass(frozen=True)
class Upstream:
    """An ``UPSTREAM`` record.

    Attributes:
        source: the fork's repository (URL, path or ``owner/name``).
        branch: the fork's branch.
        commit, merge_base, pin: the fork commit, its merge base with MLX and the MLX
            pin, as written (hex, full or abbreviated) or, after :func:`plan_import`,
            full 40-hex SHAs.
        other: keys the import does not use, with their values (named in the report).
    """

    source: str
    branch: str
    commit: str
    merge_base: str
    pin: str
    other: dict = dataclasses.field(default_factory=dict)


def parse_upstream(text: str, rel: str = UPSTREAM_FILE) -> Upstream:
    """Parse an ``UPSTREAM`` record: ``key: value`` lines (``key = value`` too).

    Blank lines and ``#`` comments are skipped; a value may be quoted. The five keys
    of :data:`UPSTREAM_KEYS` are required; the three commits must be hex (7 to 40
    digits); other keys are kept in ``other``.

    Args:
        text: the record.
        rel: its name in messages.
    Returns:
        :class:`Upstream`.
    Raises:
        OverlayError: a line that is no ``key: value``, a key given twice, a missing
            key, a commit that is not hex; every problem in one line (exit 2).
    """
    values: dict[str, str] = {}
    other: dict[str, str] = {}
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = _UPSTREAM_LINE.match(s)
        if not m:
            problems.append(f"line {number} is not 'key: value'")
            continue
        key, value = m.group("key"), m.group("value")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        if key in UPSTREAM_KEYS:
            if key in values:
                problems.append(f"line {number}: {key} is given twice")
            values[key] = value
        else:
            other[key] = value
    missing = [k for k in UPSTREAM_KEYS if not values.get(k)]
    if missing:
        problems.append("missing " + ", ".join(missing))
    for key in ("commit", "fork_upstream_merge_base", "retargeted_to_mlx_pin"):
        if values.get(key) and not _HEX_REF.match(values[key]):
            problems.append(
                f"{key} must be a commit SHA (7 to 40 hex digits), got {values[key][:60]!r}"
            )
    if problems:
        raise OverlayError(
            f"{rel}: " + "; ".join(problems),
            hint="UPSTREAM holds 'key: value' lines: " + ", ".join(UPSTREAM_KEYS),
        )
    return Upstream(
        values["source"],
        values["branch"],
        values["commit"].lower(),
        values["fork_upstream_merge_base"].lower(),
        values["retargeted_to_mlx_pin"].lower(),
        other,
    )


@dataclasses.dataclass
class WholeFile:
    """A whole-file overlay directory, read.

    Attributes:
        directory: the directory (absolute).
        upstream: its ``UPSTREAM`` record.
        fixes_data: the bytes of its ``LOCAL_FIXES.md``.
        files: tree path -> ``(mode, bytes)`` of every overlay file (``100755``
            when the file is executable by its owner, else ``100644``).
        ignored: tree paths git ignores in the directory (a ``.DS_Store``): not part of it.
        outside: other entries of the directory, not part of the tree (notes, scripts).
    """

    directory: str
    upstream: Upstream
    fixes_data: bytes
    files: dict[str, tuple[str, bytes]]
    ignored: list[str]
    outside: list[str]


def git_quoted(path: str) -> str:
    """``path`` as git prints a name it must quote: in double quotes, each byte that is
    not printable ASCII (and ``"``, ``\\``) as a C escape or three octal digits
    (``mlx/caf\\351.cpp`` for the Latin-1 byte 0xE9); a plain name stays as it is.

    Args:
        path: a name read from the file system (``surrogateescape`` for bad bytes).
    Returns:
        The name as ``git ls-files`` (``core.quotePath``) shows it.
    """
    raw = path.encode("utf-8", "surrogateescape")
    named = {0x22: '\\"', 0x5C: "\\\\", 0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
    out = []
    for byte in raw:
        if byte in named:
            out.append(named[byte])
        elif 0x20 <= byte < 0x7F:
            out.append(chr(byte))
        else:
            out.append(f"\\{byte:03o}")
    quoted = "".join(out)
    return quoted if quoted == path else f'"{quoted}"'


def _check_utf8_name(directory: str, path: str) -> None:
    """Refuse an overlay file whose name is not UTF-8: a patch's headers, the
    report and ``LOCAL_FIXES.md`` name files as UTF-8 text (docs/import.md).

    Raises:
        OverlayError: naming the file as git quotes it (exit 2).
    """
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise OverlayError(
            f"{directory}: the overlay file {git_quoted(path)} has a name that is not "
            "UTF-8; nothing was imported",
            hint="rename it to its UTF-8 spelling (e.g. `convmv -f latin1 -t utf8`), "
            "then import again",
        ) from None


def read_whole_file(directory: str) -> WholeFile:
    """Read a whole-file overlay directory, every file as a record (``docs/records.md``).

    Args:
        directory: the directory holding ``UPSTREAM``, ``LOCAL_FIXES.md``, ``mlx/`` and
            ``CMakeLists.txt``.
    Returns:
        :class:`WholeFile`.
    Raises:
        OverlayError: no such directory, no ``UPSTREAM`` or ``LOCAL_FIXES.md``, an
            invalid ``UPSTREAM``, ``LOCAL_FIXES.md`` not UTF-8, no overlay file at all;
            RecordError (an OverlayError): an overlay file that is a symlink, a FIFO,
            over 16 MiB or unreadable; UnsafePath: a hostile name; a name that is
            not UTF-8 (exit 2 each).
    """
    d = os.path.abspath(directory)
    if not os.path.isdir(d):
        raise OverlayError(f"{directory}: no such directory")
    try:
        upstream = parse_upstream(
            read_record_text(d, UPSTREAM_FILE, what="UPSTREAM record")
        )
    except RecordMissing:
        raise OverlayError(
            f"{directory} holds no {UPSTREAM_FILE} record",
            hint="a whole-file overlay names its fork, fork commit, merge base and MLX pin in "
            "UPSTREAM (docs/import.md)",
        ) from None
    try:
        fixes_data = fixes.fixes_record(d)
    except RecordMissing:
        raise OverlayError(
            f"{directory} holds no {layout.LOCAL_FIXES}",
            hint="the import carries LOCAL_FIXES.md over and groups the patches by its entries",
        ) from None
    ignored: list[str] = []
    found, errors = scan_record_dir(d, "mlx", what="overlay file", ignored=ignored)
    if errors:
        raise errors[0]
    raw = {f"mlx/{p}": data for p, data in found.items()}
    ignored = [f"mlx/{p}" for p in ignored]
    if os.path.lexists(os.path.join(d, "CMakeLists.txt")):
        if git_ignored(d, ["CMakeLists.txt"]):
            ignored.append("CMakeLists.txt")
        else:
            raw["CMakeLists.txt"] = read_record(
                d, "CMakeLists.txt", what="overlay file", allow_symlink=False
            )
    files = {}
    for path, data in sorted(raw.items()):
        check_path(path, what="overlay file")
        _check_utf8_name(directory, path)
        executable = os.stat(os.path.join(d, *path.split("/"))).st_mode & 0o100
        files[path] = ("100755" if executable else "100644", data)
    if not files:
        raise OverlayError(
            f"{directory} holds no overlay file under mlx/ or CMakeLists.txt"
        )
    outside = sorted(
        n
        for n in os.listdir(d)
        if n not in (*TREE_NAMES, UPSTREAM_FILE, layout.LOCAL_FIXES)
    )
    return WholeFile(d, upstream, fixes_data, files, sorted(ignored), outside)
