"""``git apply`` for the engine, and what its output means.

The engine hands patches to ``git apply --cached`` on a private index
(:func:`git_apply`). git's exit status alone is not trusted: a hunk placed at an
offset, a file git skipped, or a result other than the recorded post-image is a
failure too (:func:`check_result`). Every failure becomes one
:class:`PatchApplyError` naming the patch, the file, the hunk and the reason
(:func:`explain_git_failure`, :func:`mismatch_error`).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Sequence

from overlay.engine.records import postimage_mismatches
from overlay.errors import LayerError
from overlay.git.store import Store, TreeEntry, first_error_line, is_sha
from overlay.lazy import lazy_pattern
from overlay.records.series import Patch

#: git's note for a hunk it placed away from its stated line (refused by the engine).
OFFSET_RE = lazy_pattern(
    r"^Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)\.", re.M
)
_FAILED_AT_RE = lazy_pattern(r"^error: patch failed: (.+):(\d+)$", re.M)


class PatchApplyError(LayerError):
    """A patch of the series does not apply at the current layer (exit 1).

    Attributes:
        patch: the patch's name; file, hunk: where it failed (may be ``None``);
        reason: why, in words.
    """

    def __init__(
        self,
        patch: str,
        file: str | None,
        hunk: int | None,
        reason: str,
        hint: str | None = None,
    ):
        where = f"{file}" + (f" hunk #{hunk}" if hunk else "") if file else "(no file)"
        super().__init__(
            f"patch {patch} does not apply: {where}: {reason}",
            hint=hint
            or "`overlay refresh` carries it onto the layer below from its recorded "
            "blobs (re-rendered from them where its text disagrees, else a 3-way "
            "merge by merge-ort), or `overlay rebase` does",
        )
        self.patch, self.file, self.hunk, self.reason = patch, file, hunk, reason


def refuse_binary_without_data(patches: Iterable[Patch]) -> None:
    """Refuse a binary change that carries no data (git could not apply it).

    Raises:
        PatchApplyError: the first such change, with the hint to re-export it.
    """
    for patch in patches:
        for change in patch.changes:
            if change.binary and not change.binary_data:
                raise PatchApplyError(
                    patch.name,
                    change.path,
                    None,
                    "binary change without data ('Binary files differ'); "
                    "re-export it with --binary",
                    hint="make the patch with `git diff --binary`",
                )


def git_apply(
    store: Store, env: dict[str, str], patches: Sequence[Patch | str]
) -> subprocess.CompletedProcess:
    """``git apply --cached -v`` of ``patches`` (their files, or paths of patch files,
    in order) on the index of ``env``; never raises on git's exit status (the caller
    reads it and stderr, with :func:`applied_exactly`)."""
    return store.git(
        "apply",
        "--cached",
        "-v",
        "--whitespace=nowarn",
        *[p if isinstance(p, str) else p.path for p in patches],
        env=env,
        check=False,
    )


def applied_exactly(proc: subprocess.CompletedProcess) -> bool:
    """Whether a :func:`git_apply` applied every hunk where its header says: git
    succeeded, skipped no file and placed no hunk at an offset."""
    err = proc.stderr.decode("utf-8", "replace")
    return (
        proc.returncode == 0
        and "Skipped patch" not in err
        and not OFFSET_RE.search(err)
    )


def explain_git_failure(store: Store, patch: Patch, stderr: str) -> PatchApplyError:
    """The error for a patch git refused, from git's stderr: the file and hunk whose
    context failed (and whether a 3-way merge could run), a file missing from or
    already in the index, or else git's first error line."""
    m = _FAILED_AT_RE.search(stderr)
    if m:
        reason = "its context does not match the layer below"
        for change in patch.changes:
            if (
                change.source == m.group(1)
                and change.old_oid
                and is_sha(change.old_oid)
                and not store.has_object(change.old_oid, "blob")
            ):
                reason += (
                    ", and a 3-way merge cannot run: its pre-image blob "
                    f"{change.old_oid[:12]} is not in the git store (the patch was "
                    "made elsewhere)"
                )
        return PatchApplyError(
            patch.name,
            m.group(1),
            _hunk_number(patch, m.group(1), int(m.group(2))),
            reason,
        )
    fm = re.search(
        r"error: (.+?): (does not exist in index|already exists in index)", stderr
    )
    if fm:
        return PatchApplyError(patch.name, fm.group(1), None, fm.group(2))
    return PatchApplyError(
        patch.name,
        patch.changes[0].path if patch.changes else None,
        None,
        "git cannot read it: " + first_error_line(stderr.encode()),
    )


def mismatch_error(
    store: Store,
    base_tree: str,
    before: Sequence[Patch],
    patch: Patch,
    first: tuple[str, str],
) -> PatchApplyError:
    """The error for a patch whose recorded pre-image is not in the layer below.

    git is asked, without effect, whether the context would still match (then
    a 3-way merge can carry it), or which hunk differs; a patch
    with LF lines against a CRLF target (or the reverse) is named as such.
    """
    path, why = first
    with store.scratch_index(base_tree) as env:
        if before:
            git_apply(store, env, before)
        proc = store.git(
            "apply",
            "--cached",
            "--check",
            "-v",
            "--whitespace=nowarn",
            patch.path,
            env=env,
            check=False,
        )
        err = proc.stderr.decode("utf-8", "replace")
        hunk = None
        if proc.returncode == 0 and "other content" in why:
            why += (
                "; its context still matches there, but its recorded pre-image is "
                "missing, so no 3-way merge can carry it"
                if "not in the git store" in why
                else "; its context still matches there, so a 3-way merge from its "
                "recorded pre-image can carry it"
            )
        else:
            m = _FAILED_AT_RE.search(err)
            if m:
                path, hunk = (
                    m.group(1),
                    _hunk_number(patch, m.group(1), int(m.group(2))),
                )
                why += "; its context differs there too"
            if b"\r\n" not in patch.data:
                target = store.git(
                    "cat-file",
                    "blob",
                    f"{store.out('write-tree', env=env)}:{path}",
                    check=False,
                ).stdout
                if b"\r\n" in target:
                    why += " (the target has CRLF line endings, the patch LF)"
    hint = (
        "the patch was made elsewhere: restore it from version control, or take its "
        f"text with `overlay refresh --accept-text {patch.name}`"
        if "not in the git store" in why
        else None
    )
    return PatchApplyError(patch.name, path, hunk, why, hint)


def _hunk_number(patch: Patch, file: str, line: int) -> int | None:
    """The number (from 1) of ``patch``'s hunk in ``file`` that starts at ``line``."""
    for change in patch.changes:
        if file in (change.source, change.target):
            for number, hunk in enumerate(change.hunks, 1):
                if hunk.source_start == line or (
                    hunk.source_length == 0 and hunk.source_start + 1 == line
                ):
                    return number
            return 1 if change.hunks else None
    return None


def _offset_error(patch: Patch, stderr: str) -> PatchApplyError | None:
    """git placed a hunk away from its stated line: refused (no offset placement)."""
    current = None
    for line in stderr.splitlines():
        if line.startswith("Checking patch "):
            current = line[len("Checking patch ") :].rstrip(".")
        om = OFFSET_RE.match(line)
        if om:
            return PatchApplyError(
                patch.name,
                current,
                int(om.group(1)),
                f"its context matches only {om.group(3)} line(s) away from the stated line; "
                "the engine places no hunk anywhere but where the patch says",
            )
    return None


def check_result(
    patch: Patch,
    stderr: str,
    expected: dict[str, TreeEntry | None],
    actual: dict[str, TreeEntry | None],
) -> None:
    """Refuse what git did although it exited 0 for ``patch``.

    Args:
        patch: the patch git applied; stderr: git's ``-v`` output for it.
        expected: the recorded state after it; actual: git's entries there.
    Raises:
        PatchApplyError: git skipped a file, produced another blob or mode than
            recorded, or placed a hunk at an offset.
    """
    if "Skipped patch" in stderr:
        skipped = re.findall(r"Skipped patch '(.+)'", stderr)
        raise PatchApplyError(
            patch.name,
            skipped[0] if skipped else None,
            None,
            "git skipped this file although it exited 0",
        )
    bad = postimage_mismatches(patch, expected, actual)
    if bad:
        raise PatchApplyError(patch.name, bad[0][0], None, bad[0][1])
    offset = _offset_error(patch, stderr)
    if offset is not None:
        raise offset
