"""The objects overlay writes and reads without a git process: a few as loose files in
git's own format (gitformat-loose(5)), many as one pack handed to ``git index-pack``.

:func:`write_typed` writes computed objects (the trees and commits of a layer, a
record's blobs); :func:`read_loose` reads a loose object back and :func:`loose_header`
its type and size, whoever wrote it (git as well), so a run that meets one asks git
nothing. The loose format is known here only; everything else git is asked
(:mod:`overlay.git.objects`).
"""

import contextlib
import os
import struct
import zlib

from overlay.digests import sha1
from overlay.git.packs import tidy_packs
from overlay.git.run import is_sha, run_git

#: The pack format's object type codes.
_TYPE_CODES = {"commit": 1, "tree": 2, "blob": 3, "tag": 4}
#: Fewer objects than this are written as loose files here, more as one pack by
#: ``git index-pack``. A git process is 3 to 5 ms of CPU whatever it writes; a loose
#: object written here about 0.1 ms, most of it the kernel's (the fan-out directory
#: made, the file created and renamed; a fresh store has no fan-out directories yet).
#: Measured in fresh stores here (2026-12-03, medians of 15, CPU of this process and
#: git's): 8 objects 1.5 ms loose against 3.2 ms as a pack, 16 1.8 against 3.8, 32 3.1
#: against 3.9, 48 the same either way, 64 5.7 against 4.7; a whole sync (the carried
#: delta's 14 trees and the fork layer's 8 objects loose, 2 processes fewer) 14 ms less
#: at 32 than at 8 (docs/engine.md, "Costs behind some choices").
LOOSE_LIMIT = 32


def write_typed(git_dir: str, objects: dict[str, tuple[str, bytes]]) -> None:
    """Write ``objects`` into the store at ``git_dir``: loose (:func:`write_loose`) when
    they are fewer than :data:`LOOSE_LIMIT`, else as one pack of whole (undeltified)
    objects given to ``git index-pack --stdin``, which checks every object and
    indexes it. A pack that takes the store past :data:`overlay.git.packs.PACK_LIMIT`
    packs has them rolled up (:func:`overlay.git.packs.tidy_packs`).

    Args:
        git_dir: the store (a bare repository; SHA-1 object names).
        objects: name -> ``(type, content)``; each name must be the SHA-1 of the
            object (:func:`overlay.git.treemodel.blob_name` and the like compute them).
    Raises:
        GitError: git refused the pack.
        OSError: a loose object could not be written (a full disk, a read-only store).
    """
    if not objects:
        return
    if len(objects) < LOOSE_LIMIT:
        write_loose(git_dir, objects)
        return
    parts = [b"PACK", struct.pack(">II", 2, len(objects))]
    for kind, body in objects.values():
        code = _TYPE_CODES[kind]
        size = len(body)
        head = bytearray([(code << 4) | (size & 0x0F)])
        size >>= 4
        while size:
            head[-1] |= 0x80
            head.append(size & 0x7F)
            size >>= 7
        parts.append(bytes(head))
        # Stored, not deflated: the trees of a long series are megabytes (a new copy of a
        # large directory per patch), and deflating them is a large part of a long
        # series' apply (docs/engine.md); git's next repack compresses them.
        parts.append(zlib.compress(body, 0))
    pack = b"".join(parts)
    pack += sha1(pack).digest()
    run_git(["index-pack", "--stdin"], git_dir=git_dir, input=pack)
    tidy_packs(git_dir)  # one pack more: past git's limit, the packs are rolled up


def write_loose(git_dir: str, objects: dict[str, tuple[str, bytes]]) -> None:
    """Write ``objects`` (name -> ``(type, content)``) as loose objects of the store at
    ``git_dir``, in git's own format (gitformat-loose(5)): ``objects/XX/YYYY...``
    holding the zlib stream of ``"<type> <size>\\0"`` and the content, read-only.

    As git writes one: a temporary file ``tmp_obj_*`` beside it (what ``git prune``
    removes when a killed process leaves one), then a rename, so a reader sees the
    whole object or none. An object already there is left as it is: its name is its
    content. Not flushed to disk: ``git unpack-objects``, which wrote these before,
    does not flush loose objects either with overlay's git configuration (git's
    defaults, ``git/env.py``).

    Args:
        git_dir: the store.
        objects: as for :func:`write_typed`.
    Raises:
        OSError: a file or directory could not be written.
    """
    for name, (kind, body) in objects.items():
        path = _loose_path(git_dir, name)
        fan = os.path.dirname(path)
        if os.path.exists(path):
            continue
        # Level 1, git's core.loosecompression: these objects are small and short-lived.
        data = zlib.compress(b"%s %d\0" % (kind.encode(), len(body)) + body, 1)
        try:
            os.mkdir(fan)
        except FileExistsError:
            pass
        tmp = os.path.join(fan, f"tmp_obj_{os.getpid()}_{name[2:10]}")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)  # a killed process of the same pid left it (read-only)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


def _loose_path(git_dir: str, oid: str) -> str:
    """Where the store at ``git_dir`` keeps ``oid`` as a loose object
    (``objects/XX/YYYY...``, gitformat-loose(5))."""
    return os.path.join(git_dir, "objects", oid[:2], oid[2:])


def read_loose(git_dir: str, oid: str) -> tuple[str, bytes] | None:
    """``(type, content)`` of ``oid`` when the store at ``git_dir`` holds it as a loose
    object (gitformat-loose(5): zlib of ``<type> <size>\\0<content>``, as git and
    :func:`write_loose` write it), else ``None`` (packed, borrowed from an alternate,
    absent, unreadable, a header whose size is not the content's, or not a full
    name: ask git then, which says what is wrong). As ``git cat-file``, the content
    is not hashed again.

    Args:
        git_dir: the store; oid: a full object name.
    """
    if not is_sha(oid):
        return None
    try:
        with open(_loose_path(git_dir, oid), "rb") as fh:
            raw = zlib.decompress(fh.read())
    except (OSError, zlib.error):
        return None
    head, sep, body = raw.partition(b"\0")
    kind, _, size = head.partition(b" ")
    if not sep or not size.isdigit() or int(size) != len(body):
        return None
    return kind.decode("ascii", "replace"), body


def loose_kind(git_dir: str, oid: str) -> str | None:
    """The type of ``oid`` when the store at ``git_dir`` holds it as a loose object
    (the header its compressed file begins with, ``<type> <size>\\0``, as
    :func:`write_loose` writes it), else ``None`` (packed, borrowed from an alternate,
    absent, unreadable, or not a full name: ask git then).

    A layer cache hit asks whether its patched tree is still there: a ``git
    cat-file -e`` was one of the three git processes of an export after a record,
    about 2 ms (docs/engine.md, "Costs behind some choices").
    """
    head = loose_header(git_dir, oid)
    return head[0] if head else None


def loose_header(git_dir: str, oid: str) -> tuple[str, int] | None:
    """``(type, size in bytes)`` of ``oid`` from its loose object's header, read
    without the rest of the file; ``None`` as :func:`loose_kind` says."""
    if not is_sha(oid):
        return None
    head = b""
    try:
        with open(_loose_path(git_dir, oid), "rb") as fh:
            inflate = zlib.decompressobj()
            # The header is the first bytes out, but git's own deflate can put a
            # few hundred bytes of code tables before them: fed in steps until the
            # NUL that ends it comes out.
            for _ in range(16):
                data = fh.read(256)
                head += inflate.decompress(data, 64 - len(head))
                if b"\0" in head or not data or len(head) >= 64:
                    break
    except (OSError, zlib.error):
        return None
    head, sep, _rest = head.partition(b"\0")
    kind, space, size = head.partition(b" ")
    if not (sep and space and size.isdigit()):
        return None
    return kind.decode("ascii", "replace"), int(size)
