"""A scratch index file written and read here, for the chained apply (issue 14).

The chained apply (:func:`overlay.engine_chain.apply_chained`) runs one ``git apply
--cached`` on a scratch index that holds the touched paths of the layer below, and
then reads every entry git's apply left. Writing that index took a ``git
update-index --index-info`` and reading it a ``git ls-files -s``: two processes of
the dozen a pin bump starts. Both are git's documented index format
(``gitformat-index``, version 2: the version ``update-index`` writes for such entries),
so they are done here: the file written is the one ``update-index`` writes
(``tests/test_rebase_processes.py`` compares the bytes), and a file this module does
not read exactly as ``ls-files`` would (another version, a bad checksum, an entry it
does not know) gives ``None``, and the caller asks git.

git still does all the applying: it reads this index and writes the next one.
"""

from __future__ import annotations

import hashlib
import re
import struct

_HEADER = struct.Struct(">4sII")
#: ctime, mtime (seconds, nanoseconds), dev, ino, mode, uid, gid, size.
_STAT = struct.Struct(">10I")
_FLAG_EXTENDED = 0x4000
_NAME_MASK = 0x0FFF
#: A path component written here: plain names only. Anything else (a leading dot,
#: ``~``, a trailing dot or space, which git's NTFS and ``.git`` guards look at) is
#: left to ``update-index``, which refuses or accepts it as it always did.
_PLAIN = re.compile(r"[A-Za-z0-9_+@=,-][A-Za-z0-9_.+@=,-]*(?<!\.)")


def write_index(path: str, lines: list[str]) -> bool:
    """Write the index ``git update-index -z --index-info`` makes of ``lines`` into an
    empty index at ``path``.

    Args:
        path: the index file (``GIT_INDEX_FILE``), created or replaced.
        lines: ``"<mode> <40-hex oid>\\t<path>"``, stage 0, one path once.
    Returns:
        False, writing nothing, for a line this does not write as git would (an
        object name that is not SHA-1, a path git would refuse or normalize): the
        caller then runs ``update-index``.
    """
    entries: list[tuple[bytes, int, bytes]] = []
    for line in lines:
        meta, _, name = line.partition("\t")
        mode, _, oid = meta.partition(" ")
        raw = name.encode("utf-8", "surrogateescape")
        if (
            len(oid) != 40
            or mode not in ("100644", "100755", "120000")
            or not all(_PLAIN.fullmatch(part) for part in name.split("/"))
        ):
            return False
        entries.append((raw, int(mode, 8), bytes.fromhex(oid)))
    entries.sort()  # git's index order: the name's bytes
    if len({raw for raw, _m, _o in entries}) != len(entries):
        return False
    parts = [_HEADER.pack(b"DIRC", 2, len(entries))]
    for name_bytes, mode_bits, oid_bytes in entries:
        # Zero stat data, as update-index --index-info leaves it; stage 0.
        flags = min(len(name_bytes), _NAME_MASK)
        entry = _STAT.pack(0, 0, 0, 0, 0, 0, mode_bits, 0, 0, 0) + oid_bytes
        entry += struct.pack(">H", flags) + name_bytes
        parts.append(entry + b"\0" * (8 - len(entry) % 8))
    body = b"".join(parts)
    with open(path, "wb") as fh:
        fh.write(body + hashlib.sha1(body).digest())
    return True


def read_index(path: str) -> dict[str, tuple[str, str]] | None:
    """Every entry of the index at ``path``, as ``git ls-files -s -z`` gives them:
    path -> ``(mode, oid)`` (a later stage of a path wins, as reading that output does).

    Returns:
        ``None`` for an index this does not read (not version 2 or 3, a checksum that
        does not match, an entry past the end): the caller then runs ``ls-files``.
    """
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    if len(data) < _HEADER.size + 20:
        return None
    if hashlib.sha1(data[:-20]).digest() != data[-20:]:
        return None
    sig, version, count = _HEADER.unpack_from(data)
    if sig != b"DIRC" or version not in (2, 3):
        return None
    out: dict[str, tuple[str, str]] = {}
    pos, end = _HEADER.size, len(data) - 20
    for _ in range(count):
        if pos + 62 > end:
            return None
        mode = _STAT.unpack_from(data, pos)[6]
        oid = data[pos + 40 : pos + 60].hex()
        (flags,) = struct.unpack_from(">H", data, pos + 60)
        start = pos + 62 + (2 if flags & _FLAG_EXTENDED else 0)
        length = flags & _NAME_MASK
        if length == _NAME_MASK:
            length = data.find(b"\0", start) - start
            if length < 0:
                return None
        name = data[start : start + length]
        # 1 to 8 NULs pad the entry to a multiple of 8 bytes (versions 2 and 3).
        size = start + length - pos
        pos += size + 8 - size % 8
        if pos > end:
            return None
        out[name.decode("utf-8", "surrogateescape")] = (f"{mode:06o}", oid)
    return out
