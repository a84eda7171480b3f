"""``overlay verify``: every record check, as located findings (DESIGN 8).

Families and their codes (documented in ``docs/findings.md``):

* ``MAN`` -- the manifest's commits exist in the git store (online), or are at
  least well formed (offline, where layer checks are then skipped);
* ``SER`` -- ``series`` and the patch files agree; each patch parses, has a
  subject, a description, full ``index`` lines, touches only carried paths, no
  conflict markers in ``+`` lines, applies with no offset, and refreshes to the
  same bytes;
* ``LAY`` -- the fork delta merges (every conflict resolved), no stale or
  marker-bearing resolution;
* ``FIX`` -- ``LOCAL_FIXES.md`` (see :mod:`overlay.fixes`).

Textual checks need no git store at all; the rest need the pinned objects
(fetched on demand unless ``offline``).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable
from typing import Any

from overlay import fixes
from overlay.errors import (
    GitError,
    LayerError,
    OfflineMiss,
    PatchFormatError,
    UnsafePath,
)
from overlay.findings import Finding
from overlay.fsutil import RecordError, git_ignored, read_record, scan_record_dir
from overlay.gitstore import Store, first_error_line, run_git
from overlay.layers import PatchApplyError, compute_layers
from overlay.manifest import Manifest, load_manifest
from overlay.markers import marker_lines
from overlay.paths import check_path
from overlay.refresh import BinaryTurn, nul_turns, refresh_series
from overlay.series import (
    PATCH_DIR,
    SERIES_PATH,
    Patch,
    load_patch,
    parse_patch,
    read_series,
)

#: code -> (severity, meaning); the FIX family lives in :data:`overlay.fixes.CODES`.
CODES: dict[str, tuple[str, str]] = {
    "MAN001": (
        "error",
        "a manifest commit is not in the git store and cannot be fetched",
    ),
    "MAN002": (
        "warning",
        "offline and the pinned objects are not in the git store: layer checks skipped",
    ),
    "MAN003": ("error", "the fork's merge base is not an ancestor of the fork commit"),
    "MAN004": (
        "error",
        "the fork commit holds upstream commits that the pin lacks: they are carried as "
        "fork delta",
    ),
    "SER001": ("error", "series lists a patch file that does not exist"),
    "SER002": ("error", "a patch file in patches-rocm/ is not listed in series"),
    "SER003": ("error", "series lists the same patch twice"),
    "SER004": ("error", "a patch cannot be parsed, or names an unsafe path"),
    "SER005": ("error", "a patch has no subject"),
    "SER006": ("error", "a patch has no description"),
    "SER007": ("error", "a patch touches a path the manifest does not carry"),
    "SER008": (
        "error",
        "an index line is not full 40-hex (the 3-way fallback needs the pre-image blob name)",
    ),
    "SER010": (
        "error",
        "a patch does not apply on its recorded pre-image, or git's result is not its "
        "recorded post-image",
    ),
    "SER011": ("error", "refreshing the patch would change its bytes"),
    "SER013": ("error", "a conflict marker in a patch's added lines"),
    "SER014": (
        "error",
        "the series or a patch is refused as a record (symlink, not a regular file, "
        "over 16 MiB, unreadable, or a series that is not UTF-8)",
    ),
    "SER015": (
        "error",
        "a text diff holds a NUL byte, or refreshing would turn it into a `GIT binary patch`",
    ),
    "SER016": (
        "error",
        "a patch adds or changes a symlink that points outside the tree (export refuses it)",
    ),
    "LAY001": (
        "error",
        "the fork delta conflicts with the pin and no resolution exists",
    ),
    "LAY002": ("error", "a resolution whose path no longer conflicts (stale)"),
    "LAY003": ("error", "a conflict marker in a resolution file"),
    "LAY004": ("error", "a resolution for a path the manifest does not carry"),
    "LAY005": (
        "error",
        "a resolution changes lines outside the conflict regions of git's automatic merge",
    ),
    "LAY006": (
        "error",
        "a resolution is refused as a record (symlink, not a regular file, over 16 MiB, "
        "unreadable): layer checks skipped",
    ),
}

FAMILIES = ("MAN", "SER", "LAY", "FIX")
RESOLVED_DIR = "patches-rocm/resolved"
_INDEX_RE = re.compile(r"^index ([0-9a-f]+)\.\.([0-9a-f]+)", re.M)


def _f(
    code: str, path: str | None, line: int | None, message: str, hint: str | None = None
) -> Finding:
    return Finding(code, CODES[code][0], path, line, message, hint)


@dataclasses.dataclass
class VerifyResult:
    """Findings plus what was checked.

    Attributes:
        findings: every finding, in family order.
        checks: ``{family: [codes that ran]}`` (for JUnit's passing testcases).
        patched: the patched tree SHA, or ``None`` when it could not be computed.
        notes: lines for the user beside the findings (a rebase in progress, a wedged state).
        cacheable: false when the verdict depends on what the git store lacks (a commit
            missing or not fetchable: MAN001, MAN002), which the verdict cache
            (:mod:`overlay.verdict`) does not key on.
    """

    findings: list[Finding]
    checks: dict[str, list[str]]
    patched: str | None
    notes: list[str] = dataclasses.field(default_factory=list)
    cacheable: bool = True


class _SkipLayers(Exception):
    """Internal: a refused record means the layers must not be computed (see LAY006)."""


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def _added_markers(data: bytes) -> list[tuple[int, str]]:
    """Conflict markers among a patch's added lines (file line numbers), by the one
    definition of :mod:`overlay.markers` applied to the added lines in order."""
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
#: help (it reads the patch first), so it is not named as the fix (issue 17, stumble 10).
SER004_HINT = (
    "fix the file at that line by hand (a hunk's header counts must match its lines), or restore "
    "it from git (`git checkout -- {path}`); `overlay refresh` cannot, it needs a patch that parses"
)


def _unparsable(
    root: str, name: str, exc: PatchFormatError | UnsafePath
) -> tuple[Finding, int | None]:
    """The SER004 finding for a patch that does not parse, and its ``Local-Fix`` number
    (read from its header alone, so its entry is not reported as patchless, FIX024)."""
    rel = f"{PATCH_DIR}/{name}"
    try:
        data = read_record(root, rel, what="patch", allow_symlink=False)
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
    return _f(
        "SER004", rel, getattr(exc, "line", None), message, SER004_HINT.format(path=rel)
    ), fix


def binary_turn_findings(turns: Iterable[BinaryTurn]) -> list[Finding]:
    """SER015 for each file whose text diff holds a NUL byte or would be refreshed into a binary patch.

    Args:
        turns: from :func:`overlay.refresh.binary_turns` / :func:`overlay.refresh.nul_turns`.
    Returns:
        One finding per turn, located at the patch's line.
    """
    return [
        _f(
            "SER015",
            f"{PATCH_DIR}/{t.patch}",
            t.line,
            t.message(),
            "remove the NUL byte from the patch's lines (a source file holds none), then `overlay refresh`"
            if t.nul_here
            else "remove the NUL byte the earlier patch adds to this file, then `overlay refresh`",
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
    from overlay.export import unsafe_tree_links

    findings: list[Finding] = []
    before: set[str] | None = None
    for result in results:
        patch = result.patch
        links = {
            c.path: c
            for c in patch.changes
            if c.target and "120000" in (c.new_mode, c.old_mode)
        }
        if not links or result.tree is None:
            continue
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
                    f"{PATCH_DIR}/{patch.name}",
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
    """SER001-008, SER013 and SER015 (a NUL byte in a hunk): the series file and each patch as text.

    Returns:
        ``(findings, patches that parsed, in series order)``.
    """
    findings, patches, _unparsed = _check_series_text(root, manifest)
    return findings, patches


def _check_series_text(
    root: str, manifest: Manifest
) -> tuple[list[Finding], list[Patch], set[int]]:
    """:func:`check_series_text`, plus the ``Local-Fix`` numbers of the patches that did not parse."""
    findings: list[Finding] = []
    unparsed: set[int] = set()
    try:
        listed = read_series(root)
    except RecordError as exc:
        return [_f("SER014", SERIES_PATH, None, exc.message, exc.hint)], [], unparsed
    except (PatchFormatError, UnsafePath) as exc:
        return (
            [_f("SER004", SERIES_PATH, getattr(exc, "line", None), exc.message)],
            [],
            unparsed,
        )
    seen: dict[str, int] = {}
    patches: list[Patch] = []
    for name, line in listed:
        if name in seen:
            findings.append(
                _f(
                    "SER003",
                    SERIES_PATH,
                    line,
                    f"{name} is listed twice (first at line {seen[name]})",
                    "remove the repeated line",
                )
            )
            continue
        seen[name] = line
        rel = f"{PATCH_DIR}/{name}"
        if not os.path.lexists(os.path.join(root, PATCH_DIR, name)):
            findings.append(
                _f(
                    "SER001",
                    SERIES_PATH,
                    line,
                    f"{name} does not exist",
                    "restore the file or remove it from series",
                )
            )
            continue
        try:
            patch = load_patch(root, name)
        except RecordError as exc:
            findings.append(_f("SER014", rel, None, exc.message, exc.hint))
            continue
        except (PatchFormatError, UnsafePath) as exc:
            finding, fix = _unparsable(root, name, exc)
            findings.append(finding)
            if fix is not None:
                unparsed.add(fix)
            continue
        patches.append(patch)
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
        carry = manifest.carry
        for path in sorted(patch.touched):
            if not carry(path):
                findings.append(
                    _f(
                        "SER007",
                        rel,
                        None,
                        f"touches {path}, which the manifest does not carry",
                        "carry the path in [carry] or drop it from the patch",
                    )
                )
        for m in _INDEX_RE.finditer(patch.data.decode("utf-8", "replace")):
            if len(m.group(1)) != 40 or len(m.group(2)) != 40:
                findings.append(
                    _f(
                        "SER008",
                        rel,
                        _line_of(patch.data, m.start()),
                        f"abbreviated index line {m.group(0)!r}",
                        "run `overlay refresh`",
                    )
                )
        for number, text in _added_markers(patch.data):
            findings.append(
                _f(
                    "SER013",
                    rel,
                    number,
                    f"conflict marker in an added line: {text[:30]!r}",
                    "finish the merge and refresh the patch",
                )
            )
        findings += binary_turn_findings(nul_turns(patch))
    listed_names = set(seen)
    patch_dir = os.path.join(root, PATCH_DIR)
    if os.path.isdir(patch_dir):
        unlisted = [
            fn
            for fn in sorted(os.listdir(patch_dir))
            if fn.endswith(".patch") and fn not in listed_names
        ]
        # A file git ignores is no record (issue 18): not an unlisted patch either.
        ignored = git_ignored(root, [f"{PATCH_DIR}/{fn}" for fn in unlisted])
        for fn in unlisted:
            if f"{PATCH_DIR}/{fn}" not in ignored:
                findings.append(
                    _f(
                        "SER002",
                        f"{PATCH_DIR}/{fn}",
                        None,
                        f"{fn} is not listed in series",
                        "add it to series in its place, or delete it",
                    )
                )
    return findings, patches, unparsed


def _resolution_findings(
    root: str, manifest: Manifest
) -> tuple[list[Finding], dict[str, bytes], bool]:
    """LAY003, LAY004 and LAY006 from the resolution files, read as records (no symlink, regular files only).

    Returns:
        ``(findings, {path: bytes}, safe)``; ``safe`` is false when a resolution
        was refused (LAY006): the layers must then not be computed, because
        :func:`overlay.layers.read_resolutions` would read the refused file.
    """
    findings = []
    resolutions, errors = scan_record_dir(root, RESOLVED_DIR, what="resolution")
    safe = not errors
    for exc in errors:
        findings.append(
            _f(
                "LAY006",
                exc.rel,
                None,
                exc.message,
                "replace it by a regular file (layer checks are skipped until then)",
            )
        )
    for path, data in resolutions.items():
        rel = f"{RESOLVED_DIR}/{path}"
        try:
            check_path(path, what="resolution")
        except UnsafePath as exc:
            findings.append(_f("LAY004", rel, None, exc.message))
            safe = False  # read_resolutions would raise on it
            continue
        for line, marker in marker_lines(data):
            findings.append(
                _f(
                    "LAY003",
                    rel,
                    line,
                    f"conflict marker {marker[:20]!r}",
                    "finish the resolution and delete the markers",
                )
            )
        if not manifest.carry(path):
            findings.append(
                _f(
                    "LAY004",
                    rel,
                    None,
                    f"{path} is not carried by the manifest",
                    "delete the resolution or carry the path",
                )
            )
    return findings, resolutions, safe


def _fork_ahead_findings(store: Store, manifest: Manifest) -> list[Finding]:
    """MAN004: the manifest's fork merged upstream commits newer than its pin (shared case 18).

    The same question ``overlay sync`` asks before it accepts a fork commit
    (:func:`overlay.pins.fork_ahead`), asked of the manifest as it stands. Upstream
    is known by the store's ``refs/remotes/upstream/*``: an online verify fetches
    them once when the store holds none; offline, the check uses what is there and
    says nothing when nothing is.
    """
    from overlay.pins import fetch_upstream_refs, fork_ahead

    if not store.out(
        "for-each-ref", "--count=1", "--format=%(refname)", "refs/remotes/upstream/"
    ):
        fetch_upstream_refs(store)
    ahead = fork_ahead(store, manifest.fork_commit, manifest.pin)
    if not ahead:
        return []
    shown = "; ".join(ahead[:3]) + (
        f"; and {len(ahead) - 3} more" if len(ahead) > 3 else ""
    )
    return [
        _f(
            "MAN004",
            "patches-rocm/overlay.toml",
            None,
            f"fork commit {manifest.fork_commit[:12]} has merged {len(ahead)} upstream commit(s) that pin "
            f"{manifest.pin[:12]} lacks ({shown})",
            "rebase onto a pin that holds them (`overlay rebase --onto`); if carrying them is deliberate, "
            "`overlay verify --skip MAN004`",
        )
    ]


def _repo_paths(root: str) -> list[str]:
    """The repository's paths for FIX015 and FIX021: :func:`overlay.verdict.repo_paths`,
    the very list the verdict cache's key holds."""
    from overlay.verdict import repo_paths

    return repo_paths(root)


def _fix_findings(
    root: str,
    store: Store,
    manifest: Manifest,
    doc,
    resolutions: dict[str, bytes],
    patches: list[Patch],
    unparsed: set[int],
    layers,
) -> list[Finding]:
    """The FIX family: ``LOCAL_FIXES.md`` as a document, against the repository's paths, the
    resolutions and, when the layers could be computed, the series and the patched tree."""
    repo_paths = _repo_paths(root)
    findings = fixes.check_document(
        doc,
        fork_repo=fixes.fork_repo_from_url(manifest.fork_url),
        fork_commit=manifest.fork_commit,
        pin=manifest.pin,
        closing_sentence=manifest.closing_sentence,
        repo_paths=repo_paths,
        older_closing=manifest.older_closing_sentences,
        closing_required_from=manifest.closing_sentence_required_from,
    )
    findings += fixes.check_resolutions(
        doc, [f"patches-rocm/resolved/{p}" for p in resolutions]
    )
    if layers is not None:
        # Every Local-Fix trailer counts: a patch may serve several entries (issue 18).
        records = [
            fixes.PatchRecord(
                f"{PATCH_DIR}/{p.name}",
                tuple(p.trailers.get("Local-Fix") or ()),
                p.forwarded,
                p.touched,
                p.deleted,
                p.data.decode("utf-8", "replace"),
            )
            for p in patches
        ]
        patched_paths = {e[3] for e in store.ls_tree(layers.patched)}
        findings += fixes.check_patch_entries(
            doc,
            records,
            patched_paths,
            repo_paths=repo_paths,
            unparsed=unparsed,
            outside_tree=manifest.outside_tree,
        )
        findings += fixes.check_dropped(doc, layers.dropped_changes)
    return findings


def verify(
    root: str, store: Store, *, only: Iterable[str] = (), skip: Iterable[str] = ()
) -> VerifyResult:
    """Run every check of the overlay at ``root``.

    Args:
        root: overlay repository.
        store: git store (``store.offline`` decides whether objects may be fetched).
        only: run only these families (``MAN``, ``SER``, ``LAY``, ``FIX``); all when empty.
            Only their checks run: the layers are computed whenever a family is asked
            for (their outcome gates the cross-checks of every family), each patch's
            tree and the refresh only for ``SER``, the ancestry checks only for ``MAN``,
            the repository's paths and the patched tree's listing only for ``FIX``.
        skip: drop findings with these codes.
    Returns:
        :class:`VerifyResult`; its notes say when a rebase or sync is in progress
        (the records are then as they were before it) or its state is wedged.
    Raises:
        ManifestError: the manifest is missing or invalid (exit 2).
        StateBusy: another command is writing the rebase state or the records
            (``rebase``, ``--continue``, ``--abort``, ``refresh``...): verify would read
            them half-changed, so it is refused (exit 2).
    """
    from overlay.runstate import in_progress_note, state_lock

    # Shared lock for the whole check: every record is read from one consistent
    # snapshot, never half before and half after a writer.
    with state_lock(root, "verify", shared=True):
        result = _verify(root, store, only=only, skip=skip)
        note = in_progress_note(root)
    if note:
        result.notes.append(note)
    return result


def _verify(
    root: str, store: Store, *, only: Iterable[str], skip: Iterable[str]
) -> VerifyResult:
    manifest = load_manifest(root)
    families = {f.upper() for f in only} or set(FAMILIES)
    findings: list[Finding] = []
    series_findings, patches, unparsed = _check_series_text(root, manifest)
    res_findings, resolutions, resolutions_safe = _resolution_findings(root, manifest)
    findings += series_findings + res_findings
    layers = None
    cacheable = True
    try:
        if not resolutions_safe:
            raise _SkipLayers
        for name, url in manifest.remote_urls().items():
            store.set_remote(name, url)
        # Each patch's tree only for the refresh check (SER011): the other families need
        # the layers' outcome and final trees, which the one-apply path gives as well
        # (issue 14: --only computes what its families need).
        layers = compute_layers(
            store, manifest, root, patches=patches, stepwise="SER" in families
        )
    except OfflineMiss as exc:
        cacheable = False
        findings.append(
            _f(
                "MAN002",
                "patches-rocm/overlay.toml",
                None,
                exc.message,
                "run `overlay verify` once online to fill the git store",
            )
        )
    except PatchApplyError as exc:
        findings.append(
            _f(
                "SER010",
                f"{PATCH_DIR}/{exc.patch}",
                None,
                f"{exc.file or '(no file)'}"
                + (f" hunk #{exc.hunk}" if exc.hunk else "")
                + f": {exc.reason}",
                exc.hint,
            )
        )
    except LayerError as exc:
        findings.append(
            _f("LAY001", "patches-rocm/overlay.toml", None, exc.message, exc.hint)
        )
    except GitError as exc:
        cacheable = False
        findings.append(_f("MAN001", "patches-rocm/overlay.toml", None, exc.message))
    except _SkipLayers:
        pass  # LAY006 already says why
    if layers is not None and "MAN" in families:
        if not store.is_ancestor(manifest.merge_base, manifest.fork_commit):
            findings.append(
                _f(
                    "MAN003",
                    "patches-rocm/overlay.toml",
                    None,
                    f"merge-base {manifest.merge_base[:12]} is not an ancestor of fork commit "
                    f"{manifest.fork_commit[:12]}",
                    "run `overlay sync` to recompute it",
                )
            )
        findings += _fork_ahead_findings(store, manifest)
    if layers is not None:
        for stale in layers.stale_resolutions:
            findings.append(
                _f(
                    "LAY002",
                    f"patches-rocm/resolved/{stale}",
                    None,
                    f"{stale} no longer conflicts; the resolution is not used",
                    "delete it (and its retarget entry) or re-check the merge",
                )
            )
        for conflict in layers.conflicts:
            for line, what in conflict.outside:
                findings.append(
                    _f(
                        "LAY005",
                        f"patches-rocm/resolved/{conflict.path}",
                        line,
                        f"outside the conflict regions of git's merge of pin and fork, the "
                        f"resolution {what}",
                        "keep git's merge outside the conflict regions (see `overlay rebase` "
                        "work files); change upstream code with a patch, not a resolution",
                    )
                )
        if "SER" in families:
            findings += link_findings(store, layers.forked, layers.patches)
        for item in refresh_series(store, layers) if "SER" in families else ():
            turns = item.turns
            if turns:
                # The NUL in the patch's own lines is already reported from its text.
                findings += binary_turn_findings(t for t in turns if not t.nul_here)
            elif item.changed and item.patch.name:
                findings.append(
                    _f(
                        "SER011",
                        f"{PATCH_DIR}/{item.patch.name}",
                        None,
                        "refreshing would change the patch's bytes",
                        "run `overlay refresh` and commit the result",
                    )
                )
    # FIX family: the records. The file is read whatever --only says: one that cannot be
    # read stops verify (exit 2), as it always has.
    doc = fixes.load(os.path.join(root, fixes.FILE_NAME))
    if "FIX" in families:
        findings += _fix_findings(
            root, store, manifest, doc, resolutions, patches, unparsed, layers
        )
    skip_set = {c.upper() for c in skip}
    findings = [f for f in findings if f.family in families and f.code not in skip_set]
    order = {fam: i for i, fam in enumerate(FAMILIES)}
    findings.sort(
        key=lambda f: (order.get(f.family, 99), f.path or "", f.line or 0, f.code)
    )
    checks = {
        fam: sorted(
            c
            for c in (fixes.CODES if fam == "FIX" else CODES)
            if c.startswith(fam) and c not in skip_set
        )
        for fam in FAMILIES
        if fam in families
    }
    return VerifyResult(
        findings, checks, layers.patched if layers else None, cacheable=cacheable
    )
