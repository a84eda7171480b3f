"""Remembered resolutions of patch conflicts: git rerere for the series.

When a patch's carry stops on a content conflict and the user resolves it, the run
records the resolved file (the *postimage*) under a key made from the conflict (the
*preimage*) normalized as ``git rerere`` normalizes it: the markers' labels dropped,
the base section of a diff3 conflict dropped, and the two sides of each conflict in
a fixed order, so the same conflict met from either side, in another clone or under
other commit names, has the same key. A later run that meets the very same conflict
replays the recorded file and says so; when every conflicted path of the patch is
replayed, the run goes on without stopping.

The records live in the clone's rr-cache (``.overlay/rr-cache``, beside the fork
delta's) and, when the team has created it, in :data:`overlay.layout.SHARED_RR_CACHE` inside the
repository: nothing is written there unless that directory exists. Each entry is
``<key>`` (the postimage), ``<key>.path`` and ``<key>.patch`` (the patch's name).
``--forget PATH`` forgets them as it forgets the fork delta's; ``--abort`` forgets
what its run recorded (shared case 17).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from overlay import layout
from overlay.digests import sha256
from overlay.fs.atomic import atomic_write
from overlay.rebase.base import RunBase, Stages
from overlay.records.markers import marker_lines

#: The marker size of the key's conflict text: longer than any marker a file holds,
#: so a ``=======`` heading inside a conflict is never taken for git's separator.
KEY_MARKER_SIZE = 32


def normalize_conflict(text: bytes, size: int = KEY_MARKER_SIZE) -> bytes | None:
    """The conflict text as ``git rerere`` hashes it: labels and base sections
    dropped, the two sides of each conflict sorted.

    Args:
        text: ``git merge-file`` output with markers of ``size`` characters.
        size: the marker size.
    Returns:
        The normalized text; ``None`` when a conflict is not closed.
    """
    opening, base, sep, closing = (c * size for c in (b"<", b"|", b"=", b">"))
    out: list[bytes] = []
    sides: list[list[bytes]] = []
    where = ""  # "", "a" (first side), "base", "b" (second side)
    for line in text.splitlines(keepends=True):
        body = line.rstrip(b"\r\n")
        head = body.split(b" ", 1)[0]
        if not where:
            if head == opening:
                where, sides = "a", [[], []]
            else:
                out.append(line)
        elif where in ("a", "base") and head == base:
            where = "base"
        elif where in ("a", "base") and body == sep:
            where = "b"
        elif where == "b" and head == closing:
            first, second = sorted(b"".join(s) for s in sides)
            out += [opening + b"\n", first, sep + b"\n", second, closing + b"\n"]
            where = ""
        elif where != "base":
            sides[0 if where == "a" else 1].append(line)
    return None if where else b"".join(out)


def conflict_key(normalized: bytes) -> str:
    """The sha256 key of a normalized patch conflict (apart from the fork delta's keys,
    which hash other text)."""
    return sha256(b"overlay patch conflict\0" + normalized).hexdigest()


def cache_dirs(root: str) -> list[tuple[str, str]]:
    """``(label, directory)`` of every rr-cache a lookup reads: the clone's, then the
    team's shared one when it exists."""
    out = [(layout.RR_CACHE, os.path.join(root, layout.RR_CACHE))]
    shared = os.path.join(root, layout.SHARED_RR_CACHE)
    if os.path.isdir(shared) and not os.path.islink(shared):
        out.append((layout.SHARED_RR_CACHE, shared))
    return out


class RerereSteps(RunBase):
    """Key, replay and record the resolutions of patch conflicts."""

    def _patch_conflict_keys(self, stages: Mapping[str, Stages]) -> dict[str, str]:
        """The key of each content conflict (both sides have the file) of a carry.

        Args:
            stages: merge-ort's conflict stages by path.
        Returns:
            path -> key, for the paths that can be remembered.
        """
        keys: dict[str, str] = {}
        for path, st in stages.items():
            if 2 not in st or 3 not in st:
                continue  # modify/delete: a decision, not a text to remember
            if any(mode == "160000" for mode, _oid in st.values()):
                continue
            text, _clean = self._merge_file(
                self._stage_text(st, 2),
                self._stage_text(st, 1),
                self._stage_text(st, 3),
                ("", "", ""),
                marker_size=KEY_MARKER_SIZE,
            )
            normalized = normalize_conflict(text)
            if normalized is not None:
                keys[path] = conflict_key(normalized)
        return keys

    def _recorded_patch_resolution(self, key: str) -> tuple[bytes, str] | None:
        """The postimage recorded for ``key`` and the rr-cache it came from."""
        for label, directory in cache_dirs(self.root):
            try:
                with open(os.path.join(directory, key), "rb") as fh:
                    data = fh.read()
            except (FileNotFoundError, IsADirectoryError):
                continue
            if not marker_lines(data):
                return data, label
        return None

    def _replay_line(self, path: str, name: str, key: str, where: str) -> str:
        """What the run says of one replayed resolution."""
        return (
            f"replayed the recorded resolution of {path} for patch {name} "
            f"({where} {key[:12]}): review it in the patch's diff; "
            f"`overlay {self.state.kind} --forget {path}` forgets it"
        )

    def _record_patch_resolutions(
        self, name: str, keys: Mapping[str, str], work: Mapping[str, bytes | None]
    ) -> None:
        """Record the user's resolution of each keyed path (a deleted file is a decision
        that is not remembered), unless one is recorded for that conflict already.

        Args:
            name: the patch.
            keys: path -> conflict key (the stop's).
            work: path -> the user's file (``None``: deleted).
        """
        for path, key in sorted(keys.items()):
            data = work.get(path)
            if data is None or self._recorded_patch_resolution(key) is not None:
                continue
            for label, directory in cache_dirs(self.root):
                os.makedirs(directory, exist_ok=True)
                atomic_write(os.path.join(directory, key), data)
                for suffix, text in ((".path", path), (".patch", name)):
                    atomic_write(
                        os.path.join(directory, key + suffix),
                        text.encode("utf-8", "surrogateescape"),
                    )
                if label == layout.SHARED_RR_CACHE:
                    self.say(
                        f"recorded the resolution of {path} for patch {name} in "
                        f"{layout.SHARED_RR_CACHE}/ (the team's shared rr-cache: commit it)"
                    )
            self.state.rr_recorded.append(key)
