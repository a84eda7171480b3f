"""The SER family's checks of the series and its patches: as text, and as applied.

* the series file and each patch read as text (:func:`check_series_text`): listed
  files exist, each listed once, each parses, has a subject and a description,
  touches only carried paths, full ``index`` lines, no conflict markers or NUL bytes
  in its added lines; a patch file not listed;
* each text diff a refresh would turn binary (:func:`binary_turn_findings`);
* each symlink a patch adds that points outside the tree (:func:`link_findings`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any

from overlay import layout
from overlay.checks.codes import finding as _f
from overlay.checks.findings import Finding
from overlay.engine.refresh import BinaryTurn, nul_turns
from overlay.errors import PatchFormatError, UnsafePath
from overlay.fs.reading import RecordError
from overlay.git.run import git_ignored
from overlay.git.store import Store, first_error_line, run_git
from overlay.lazy import lazy_pattern
from overlay.records.manifest import Manifest
from overlay.records.markers import marker_lines
from overlay.records.patchfmt import ZERO_FROM
from overlay.records.series import (
    Patch,
    load_patch,
    parse_patch,
    patch_bytes,
    read_series,
)

_INDEX_RE = lazy_pattern(rb"^index ([0-9a-f]+)\.\.([0-9a-f]+)", re.M)


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def _added_markers(data: bytes) -> list[tuple[int, str]]:
    """Conflict markers among a patch's added lines (file line numbers), by the one
    definition of :mod:`overlay.records.markers` applied to the added lines in order."""
    numbers, added = [], []
    for number, line in enumerate(data.split(b"\n"), 1):
        if line.startswith(b"+") and not line.startswith(b"+++ "):
            numbers.append(number)
            added.append(line[1:])
    return [(numbers[i - 1], "+" + text) for i, text in marker_lines(b"\n".join(added))]


def git_apply_reason(data: bytes) -> str | None:
    """What git's own patch reader says of ``data`` (``git apply --numstat``, which
    only parses), e.g. ``corrupt patch at line 23``; ``None`` when git reads it.

    git counts lines of the whole file (it skips the mail headers), so its line
    numbers are the patch file's.
    """
    proc = run_git(["apply", "--numstat", "-"], input=data, check=False)
    return None if proc.returncode == 0 else first_error_line(proc.stderr)


#: The hint of a SER004 for a diff that does not parse: ``overlay refresh`` cannot
#: help (it reads the patch first), so it is not named as the fix.
SER004_HINT = (
    "fix the file at that line by hand (a hunk's header counts must match its lines), or restore "
    "it from git (`git checkout -- {path}`); `overlay refresh` cannot, it needs a patch that parses"
)


#: The SER004 hints of the patches that parse as what they are, just not as a patch.
_SER004_KIND_HINTS = {
    "empty": "an empty patch changes nothing: remove its line from the series and the "
    "file ({path}), or put back the change it was meant to hold",
    "combined": "a merge's combined diff has no single pre-image: make the change an "
    "ordinary diff on the layer below (`overlay edit --new NAME`, then `overlay "
    "record`), or restore the file from git (`git checkout -- {path}`)",
}


def _unparsable(
    root: str, name: str, exc: PatchFormatError | UnsafePath
) -> tuple[Finding, int | None]:
    """The SER004 finding for a patch that does not parse, and its ``Local-Fix`` number
    (read from its header alone, so its entry is not reported as patchless, FIX024)."""
    rel = f"{layout.PATCH_DIR}/{name}"
    try:
        data = patch_bytes(root, name)
    except RecordError:
        data = None
    if isinstance(exc, UnsafePath):
        return _f(
            "SER004",
            rel,
            None,
            exc.message,
            "fix its header paths (relative, no '..' or '.git')",
        ), None
    message = exc.message
    reason = git_apply_reason(data) if data is not None else None
    if reason:
        message += f" (git apply: {reason})"
    fix = None
    if data is not None:
        try:
            fix = parse_patch(data, name, header_only=True).local_fix
        except (PatchFormatError, UnsafePath, ValueError):
            fix = None
    kind = getattr(exc, "kind", None)
    hint = _SER004_KIND_HINTS.get(kind, SER004_HINT) if kind else SER004_HINT
    return _f(
        "SER004", rel, getattr(exc, "line", None), message, hint.format(path=rel)
    ), fix


def binary_turn_findings(turns: Iterable[BinaryTurn]) -> list[Finding]:
    """SER015 for each file whose text diff holds a NUL byte or would be refreshed into
    a binary patch.

    Args:
        turns: from :func:`overlay.engine.refresh.binary_turns` /
            :func:`overlay.engine.refresh.nul_turns`.
    Returns:
        One finding per turn, located at the patch's line.
    """
    return [
        _f(
            "SER015",
            f"{layout.PATCH_DIR}/{t.patch}",
            t.line,
            t.message(),
            "remove the NUL byte from the patch's lines (a source file holds none), then "
            "`overlay refresh`"
            if t.nul_here
            else "remove the NUL byte the earlier patch adds to this file, then "
            "`overlay refresh`",
        )
        for t in turns
    ]


def link_findings(store: Store, forked: str, results: Iterable[Any]) -> list[Finding]:
    """SER016: symlinks a patch adds or changes that point outside the tree.

    Checked by export's own check (:func:`overlay.export.unsafe_tree_links`, one
    definition: absolute targets, ``..`` above the root, ``.git``, chains through
    other links of the tree). A link that already failed below the patch is not
    blamed on it.

    Args:
        store: git store.
        forked: the layer below the series.
        results: the layers' per-patch results (``patch`` and ``tree`` after it).
    Returns:
        Findings located at the patch's ``diff --git`` line of the link.
    """
    findings: list[Finding] = []
    before: set[str] | None = None
    for result in results:
        patch = result.patch
        links = {c.path: c for c in patch.link_changes if c.target}
        if not links or result.tree is None:
            continue
        # export's link check loads only for a patch that touches a symlink
        from overlay.export import unsafe_tree_links

        if before is None:
            before = set(unsafe_tree_links(store, forked))
        bad = unsafe_tree_links(store, result.tree)
        for path, exc in bad.items():
            if path in before:
                continue
            change = links.get(path)
            findings.append(
                _f(
                    "SER016",
                    f"{layout.PATCH_DIR}/{patch.name}",
                    change.line if change else None,
                    exc.message.replace("refusing symlink", "symlink", 1)
                    + (
                        ""
                        if change
                        else f" (after this patch changed {', '.join(sorted(links))})"
                    ),
                    "make the link relative and inside the tree, or drop it; `overlay export` "
                    "refuses a tree with it",
                )
            )
        before = set(bad)
    return findings


def check_series_text(
    root: str, manifest: Manifest
) -> tuple[list[Finding], list[Patch]]:
    """SER001-008, SER013 and SER015 (a NUL byte in a hunk): the series file and each
    patch as text.

    Returns:
        ``(findings, patches that parsed, in series order)``.
    """
    findings, patches, _unparsed = _check_series_text(root, manifest)
    return findings, patches


def _check_series_text(
    root: str, manifest: Manifest
) -> tuple[list[Finding], list[Patch], set[int]]:
    """:func:`check_series_text`, plus the ``Local-Fix`` numbers of the patches that
    did not parse."""
    findings: list[Finding] = []
    unparsed: set[int] = set()
    try:
        listed = read_series(root)
    except RecordError as exc:
        return [_f("SER014", layout.SERIES, None, exc.message, exc.hint)], [], unparsed
    except (PatchFormatError, UnsafePath) as exc:
        return (
            [_f("SER004", layout.SERIES, getattr(exc, "line", None), exc.message)],
            [],
            unparsed,
        )
    seen: dict[str, int] = {}
    patches: list[Patch] = []
    resolved: dict[str, str] = {}  # patches-rocm/ resolved once for the whole series
    for name, line in listed:
        if name in seen:
            findings.append(
                _f(
                    "SER003",
                    layout.SERIES,
                    line,
                    f"{name} is listed twice (first at line {seen[name]})",
                    "remove the repeated line",
                )
            )
            continue
        seen[name] = line
        read = _read_listed(root, name, line, resolved)
        if isinstance(read, Patch):
            patches.append(read)
            findings += _patch_text_findings(read, manifest)
            continue
        refusal, fix = read
        findings.append(refusal)
        if fix is not None:
            unparsed.add(fix)
    findings += _unlisted_findings(root, set(seen))
    return findings, patches, unparsed


def _read_listed(
    root: str, name: str, line: int, resolved: dict[str, str]
) -> Patch | tuple[Finding, int | None]:
    """The listed patch ``name``, or the finding that refuses it (SER001 missing,
    SER014 refused as a record, SER004 unparsable, with its ``Local-Fix`` number).
    ``resolved`` as :func:`overlay.records.series.load_patch` takes it.

    Returns:
        The patch, or ``(finding, Local-Fix number or None)``.
    """
    rel = f"{layout.PATCH_DIR}/{name}"
    if not os.path.lexists(os.path.join(root, layout.PATCH_DIR, name)):
        missing = _f(
            "SER001",
            layout.SERIES,
            line,
            f"{name} does not exist",
            "restore the file or remove it from series",
        )
        return missing, None
    try:
        return load_patch(root, name, resolved)
    except RecordError as exc:
        return _f("SER014", rel, None, exc.message, exc.hint), None
    except (PatchFormatError, UnsafePath) as exc:
        return _unparsable(root, name, exc)


def _patch_text_findings(patch: Patch, manifest: Manifest) -> list[Finding]:
    """SER005-008, SER013 and SER015 of one parsed patch, from its text alone."""
    rel = f"{layout.PATCH_DIR}/{patch.name}"
    findings = []
    if not patch.subject:
        findings.append(
            _f(
                "SER005",
                rel,
                1,
                "no Subject: header",
                "add `Subject: [PATCH] <what it does>`",
            )
        )
    if not patch.description:
        findings.append(
            _f(
                "SER006",
                rel,
                None,
                "no description between the headers and the trailers",
                "say why the change is needed, what was shared and how it is owned now",
            )
        )
    findings += _mail_head_findings(patch, rel)
    findings += [
        _f(
            "SER007",
            rel,
            None,
            f"touches {path}, which the manifest does not carry",
            "carry the path in [carry] or drop it from the patch",
        )
        for path in sorted(patch.touched)
        if not manifest.carry(path)
    ]
    findings += [
        _f(
            "SER008",
            rel,
            _line_of(patch.data, m.start()),
            f"abbreviated index line {m.group(0).decode()!r}",
            "run `overlay refresh`",
        )
        # On the bytes: an offset into decoded text would miss the line after a
        # multi-byte character.
        for m in _INDEX_RE.finditer(patch.data)
        if len(m.group(1)) != 40 or len(m.group(2)) != 40
    ]
    findings += [
        _f(
            "SER013",
            rel,
            number,
            f"conflict marker in an added line: {text[:30]!r}",
            "finish the merge and refresh the patch",
        )
        for number, text in _added_markers(patch.data)
    ]
    return findings + binary_turn_findings(nul_turns(patch))


def _mail_head_findings(patch: Patch, rel: str) -> list[Finding]:
    """SER018: the mbox ``From <sha> <date>`` line and the ``From:`` header that
    ``git format-patch`` writes and ``git am`` needs (docs/patch-format.md)."""
    findings = []
    head = patch.data.split(b"\n", 1)[0]
    if not head.startswith(b"From ") or head.startswith(b"From:"):
        findings.append(
            _f(
                "SER018",
                rel,
                1,
                "no mbox `From <sha> <date>` line before the mail headers",
                f"put back `{ZERO_FROM.strip()}` as the first line (`overlay "
                "refresh` does not invent it)",
            )
        )
    if not patch.author:
        findings.append(
            _f(
                "SER018",
                rel,
                None,
                "no `From:` author header",
                "add `From: Name <email>` to the mail headers (git am needs an author)",
            )
        )
    return findings


def _unlisted_findings(root: str, listed: set[str]) -> list[Finding]:
    """SER002: a patch file in ``patches-rocm/`` that the series does not list (one git
    ignores is no record: not an unlisted patch either)."""
    patch_dir = os.path.join(root, layout.PATCH_DIR)
    if not os.path.isdir(patch_dir):
        return []
    unlisted = [
        fn
        for fn in sorted(os.listdir(patch_dir))
        if fn.endswith(".patch") and fn not in listed
    ]
    ignored = git_ignored(root, [f"{layout.PATCH_DIR}/{fn}" for fn in unlisted])
    return [
        _f(
            "SER002",
            f"{layout.PATCH_DIR}/{fn}",
            None,
            f"{fn} is not listed in series",
            "add it to series in its place, or delete it",
        )
        for fn in unlisted
        if f"{layout.PATCH_DIR}/{fn}" not in ignored
    ]
