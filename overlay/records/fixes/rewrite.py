"""The rewrites of ``LOCAL_FIXES.md`` that a completed rebase or sync owns.

Two things a run changes in the file, and nothing else: the two commits its headings
name (the title's fork commit, the retarget heading's pin), and the paths an entry names
after the run followed an upstream rename of a file the entry's patch edits (the patch
now changes the new path: the entry must name it, or FIX020/FIX021 would fail ``verify``
right after a run that succeeded). The file is handled as bytes, so a byte-order mark
and CRLF line ends survive.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from overlay.lazy import lazy_pattern

_TITLE_RE = lazy_pattern(
    rb"^((?:\xef\xbb\xbf)?# Local changes relative to \S+@)[0-9a-fA-F]{8}", re.M
)
_RETARGET_RE = lazy_pattern(
    rb"^(## Retarget onto the MLX pin \()[0-9a-fA-F]{8}\)", re.M
)


def set_heading_pins(text: bytes, fork: str, pin: str) -> bytes:
    """``text`` with the title naming ``fork[:8]`` and the retarget heading ``pin[:8]``.

    Args:
        text: the file's bytes; fork, pin: full commit names.
    Returns:
        The new bytes (``text`` itself when nothing changes).
    """
    text = _TITLE_RE.sub(lambda m: m.group(1) + fork[:8].encode(), text, count=1)
    return _RETARGET_RE.sub(
        lambda m: m.group(1) + pin[:8].encode() + b")", text, count=1
    )


def _forms(path: str) -> list[tuple[str, str]]:
    """The ways an entry may name ``path`` (full, relative to ``mlx/backend/rocm/`` or
    ``mlx/``, the bare file name; FIX020's rule), each with its prefix."""
    # the file's model, only where a run followed a rename (every run sets the pins)
    from overlay.records.fixes.model import BACKEND_PREFIX, MLX_PREFIX

    out = [(path, "")]
    for prefix in (BACKEND_PREFIX, MLX_PREFIX):
        if path.startswith(prefix):
            out.append((path[len(prefix) :], prefix))
    out.append((path.rsplit("/", 1)[-1], "*"))
    return out


def _renamed_form(new: str, prefix: str) -> str:
    """``new`` written the way the old path was (the same prefix dropped, or the bare
    file name); in full where that form does not fit it."""
    if prefix == "*":
        return new.rsplit("/", 1)[-1]
    if prefix and new.startswith(prefix):
        return new[len(prefix) :]
    return new


def rename_entry_paths(
    text: bytes, numbers: Iterable[int], renames: Mapping[str, str]
) -> tuple[bytes, list[int]]:
    """``text`` with each backticked name of an old path in the entries ``numbers``
    replaced by the same form of its new path.

    Args:
        text: the file's bytes.
        numbers: the entries to rewrite (the ``Local-Fix:`` numbers of the patch).
        renames: old repository path -> new one (the renames the run followed).
    Returns:
        ``(new bytes, the entry numbers that changed)``.
    """
    # the parser, only where a run followed a rename (every run sets the pins)
    from overlay.records.fixes.parser import parse

    doc = parse(text.decode("utf-8", "replace"))
    lines = text.split(b"\n")
    changed = []
    for number in sorted(set(numbers)):
        entry = doc.entry(number)
        if entry is None:
            continue
        before = lines[entry.line - 1 : entry.end_line]
        after = list(before)
        for old, new in renames.items():
            for form, prefix in _forms(old):
                named = b"`" + form.encode() + b"`"
                repl = b"`" + _renamed_form(new, prefix).encode() + b"`"
                after = [ln.replace(named, repl) for ln in after]
        if after != before:
            lines[entry.line - 1 : entry.end_line] = after
            changed.append(number)
    return b"\n".join(lines), changed
