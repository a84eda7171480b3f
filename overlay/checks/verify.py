"""``overlay verify``: every record check, as located findings (docs/design.md §8).

Families and their codes (documented in ``docs/findings.md``):

* ``MAN`` -- the manifest's commits exist in the git store (online), or are at
  least well formed (offline, where layer checks are then skipped);
* ``SER`` -- ``series`` and the patch files agree; each patch parses, has a
  subject, a description, full ``index`` lines, touches only carried paths, no
  conflict markers in ``+`` lines, applies with no offset, and refreshes to the
  same bytes;
* ``LAY`` -- the fork delta merges (every conflict resolved), no stale or
  marker-bearing resolution;
* ``FIX`` -- ``LOCAL_FIXES.md`` (see :mod:`overlay.records.fixes`).

Textual checks need no git store at all; the rest need the pinned objects
(fetched on demand unless ``offline``).
"""

import dataclasses
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from overlay import layout
from overlay.checks.cache import repo_paths
from overlay.checks.codes import CODES, FAMILIES
from overlay.checks.codes import finding as _f
from overlay.checks.findings import Finding
from overlay.checks.pins import fork_ahead, pin_lacks_citations, uncarried_changes
from overlay.checks.series import (
    SER004_HINT,
    _check_series_text,
    binary_turn_findings,
    check_series_text,
    git_apply_reason,
    link_findings,
)
from overlay.engine.gitapply import PatchApplyError
from overlay.engine.layers import Layers
from overlay.engine.records import missing_records
from overlay.engine.refresh import refresh_series
from overlay.errors import GitError, LayerError, OfflineMiss, UnsafePath
from overlay.fs.paths import check_path
from overlay.fs.records_lock import state_lock
from overlay.git.store import Store
from overlay.rebase.ondisk import in_progress_note
from overlay.records import fixes
from overlay.records.fixes.model import finding
from overlay.records.manifest import Manifest
from overlay.records.markers import marker_lines
from overlay.records.resolutions import scan_resolutions
from overlay.records.series import Patch

if TYPE_CHECKING:
    from overlay.workspace import Workspace

__all__ = [
    "CODES",
    "FAMILIES",
    "SER004_HINT",
    "VerifyResult",
    "binary_turn_findings",
    "check_series_text",
    "git_apply_reason",
    "link_findings",
    "verify",
]


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
            (:mod:`overlay.checks.cache`) does not key on.
    """

    findings: list[Finding]
    checks: dict[str, list[str]]
    patched: str | None
    notes: list[str] = dataclasses.field(default_factory=list)
    cacheable: bool = True


def _resolution_findings(
    root: str, manifest: Manifest
) -> tuple[list[Finding], dict[str, bytes], bool]:
    """LAY003, LAY004 and LAY006 from the resolution files, read as records (no symlink,
    regular files only).

    Returns:
        ``(findings, {path: bytes}, safe)``; ``safe`` is false when a resolution
        was refused (LAY006): the layers must then not be computed, because
        :func:`overlay.records.resolutions.read_resolutions` would read the refused file.
    """
    findings = []
    resolutions, errors = scan_resolutions(root)
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
        rel = f"{layout.RESOLVED_DIR}/{path}"
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
    (:func:`overlay.checks.pins.fork_ahead`), asked of the manifest as it stands. Upstream
    is known by the store's ``refs/remotes/upstream/*``: an online verify fetches
    them once when the store holds none; offline, the check uses what is there and
    says nothing when nothing is.
    """
    if store.missing_objects([manifest.pin, manifest.fork_commit]):
        return []
    if not store.out(
        "for-each-ref", "--count=1", "--format=%(refname)", "refs/remotes/upstream/"
    ):
        store.refresh_upstream_refs()
    ahead = fork_ahead(store, manifest.fork_commit, manifest.pin)
    if not ahead:
        return []
    shown = "; ".join(ahead[:3]) + (
        f"; and {len(ahead) - 3} more" if len(ahead) > 3 else ""
    )
    return [
        _f(
            "MAN004",
            layout.MANIFEST,
            None,
            f"fork commit {manifest.fork_commit[:12]} has merged {len(ahead)} upstream "
            f"commit(s) that pin {manifest.pin[:12]} lacks ({shown})",
            "rebase onto a pin that holds them (`overlay rebase --onto`); if carrying "
            "them is deliberate, `overlay verify --skip MAN004`",
        )
    ]


def _uncarried_findings(store: Store, manifest: Manifest) -> list[Finding]:
    """MAN005 (info): what the fork changed outside ``[carry]`` since ``[fork]
    uncarried-reviewed`` (a sync that brought such changes wrote it), until ``overlay
    sync --ack-uncarried`` says they were reviewed."""
    reviewed = manifest.uncarried_reviewed
    if reviewed is None or store.missing_objects([reviewed, manifest.fork_commit]):
        return []
    changes = uncarried_changes(store, manifest.carry, reviewed, manifest.fork_commit)
    if not changes:
        return []
    shown = "; ".join(f"{p} ({c[0]})" if c else p for p, c in changes[:5]) + (
        f"; and {len(changes) - 5} more" if len(changes) > 5 else ""
    )
    return [
        _f(
            "MAN005",
            layout.MANIFEST,
            None,
            f"the fork changed {len(changes)} path(s) outside [carry] from "
            f"{reviewed[:12]} to {manifest.fork_commit[:12]}: {shown}",
            "review what the overlay does not take (carry a path, or list it under "
            "Dropped), then `overlay sync --ack-uncarried`",
        )
    ]


def _repo_paths(root: str) -> list[str]:
    """The repository's paths for FIX015 and FIX021: :func:`overlay.checks.cache.repo_paths`,
    the very list the verdict cache's key holds."""
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
    listing: list[tuple[str, str, str, str]] | None = None,
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
        doc, [f"{layout.RESOLVED_DIR}/{p}" for p in resolutions]
    )
    if layers is not None:
        # Every Local-Fix trailer counts: a patch may serve several entries.
        records = [
            fixes.PatchRecord(
                f"{layout.PATCH_DIR}/{p.name}",
                tuple(p.trailers.get("Local-Fix") or ()),
                p.forwarded,
                p.touched,
                p.deleted,
                p.data.decode("utf-8", "replace"),
            )
            for p in patches
        ]
        patched_paths = {
            e[3]
            for e in (listing if listing is not None else store.ls_tree(layers.patched))
        }
        findings += fixes.check_patch_entries(
            doc,
            records,
            patched_paths,
            repo_paths=repo_paths,
            unparsed=unparsed,
            outside_tree=manifest.outside_tree,
        )
        findings += fixes.check_dropped(doc, layers.dropped_changes)
        findings += _pin_citation_findings(root, store, manifest)
    return findings


def _pin_citation_findings(
    root: str, store: Store, manifest: Manifest
) -> list[Finding]:
    """FIX027: the retarget entries citing an upstream commit the pin lacks (the
    warning of a rebase that moved the pin back, kept while it holds)."""
    return [
        finding(
            layout.LOCAL_FIXES,
            "FIX027",
            line or None,
            citation.describe(f"the pin {manifest.pin[:8]}"),
            hint=(
                "the patch follows API the pin does not have, so the tree may not "
                "build: move the pin to a commit that has it (`overlay rebase --onto`), "
                "or change the patch and the entry's citation"
                if citation.patches
                else "the entry cites API the pin does not have: move the pin to a "
                "commit that has it (`overlay rebase --onto`), or correct the entry's "
                "citation"
            ),
        )
        for line, citation in pin_lacks_citations(
            store, root, manifest.pin, manifest.fork_commit
        )
    ]


def verify(
    ws: "Workspace", *, only: Iterable[str] = (), skip: Iterable[str] = ()
) -> VerifyResult:
    """Run every check of the overlay of ``ws``.

    Args:
        ws: the workspace: its root, its store (``offline`` decides whether objects
            may be fetched), its manifest (read under the lock unless the command read
            it before) and its layers (:meth:`Workspace.layers` of the patches that parse).
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
        ManifestError: there is no repository, or its manifest is invalid (exit 2).
        GitError: the store cannot be opened (exit 2).
        StateBusy: another command is writing the rebase state or the records
            (``rebase``, ``--continue``, ``--abort``, ``refresh``...): verify would read
            them half-changed, so it is refused (exit 2).
    """
    # Shared lock for the whole check: every record is read from one consistent
    # snapshot, never half before and half after a writer.
    with state_lock(ws.root, "verify", shared=True):
        result = _verify(ws, only=only, skip=skip)
        note = in_progress_note(ws.root)
    if note:
        result.notes.append(note)
    return result


def _verify(
    ws: "Workspace", *, only: Iterable[str], skip: Iterable[str]
) -> VerifyResult:
    """The checks of :func:`verify`, under its lock, family by family."""
    root, store, manifest = ws.root, ws.store, ws.manifest
    families = {f.upper() for f in only} or set(FAMILIES)
    findings: list[Finding] = []
    series_findings, patches, unparsed = _check_series_text(root, manifest)
    res_findings, resolutions, resolutions_safe = _resolution_findings(root, manifest)
    findings += series_findings + res_findings
    layers, layer_findings, cacheable = _layers_or_findings(
        ws, patches, safe=resolutions_safe, stepwise="SER" in families
    )
    findings += layer_findings
    # The ancestry findings ask the manifest's commits, not the layers: a manifest that
    # breaks them is often why the layers fail (MAN003 must not hide behind SER010).
    man003 = (
        _merge_base_findings(store, manifest)
        if cacheable and families & {"MAN", "SER"}
        else []
    )
    if "MAN" in families and cacheable:
        findings += (
            man003
            + _fork_ahead_findings(store, manifest)
            + _uncarried_findings(store, manifest)
        )
    listing = None
    if layers is not None:
        # One listing of the patched tree for LAY007 and the FIX cross-checks.
        if families & {"LAY", "FIX"}:
            listing = store.ls_tree(layers.patched)
            findings += _gitlink_findings(listing)
        findings += _layer_findings(layers)
        if "SER" in families:
            findings += _applied_series_findings(store, layers)
    # FIX family: the records. The file is read whatever --only says: one that cannot be
    # read stops verify (exit 2), as it always has.
    doc = fixes.load(os.path.join(root, layout.LOCAL_FIXES))
    if "FIX" in families:
        findings += _fix_findings(
            root, store, manifest, doc, resolutions, patches, unparsed, layers, listing
        )
    if man003:
        findings = [_no_rewrite_hint(f) for f in findings]
    return _result(findings, families, skip, layers, cacheable)


def _layers_or_findings(
    ws: "Workspace", patches: list[Patch], *, safe: bool, stepwise: bool
) -> tuple[Layers | None, list[Finding], bool]:
    """The layers of the patches that parsed, or the finding that says why there are
    none (MAN001, MAN002, SER010, LAY001; nothing when a refused resolution, LAY006,
    already said so).

    Returns:
        ``(layers or None, findings, cacheable)``; ``cacheable`` is false when the
        answer depends on what the git store lacks.
    """
    if not safe:
        return None, [], True
    try:
        # Each patch's tree only for the refresh check (SER011): the other families need
        # the layers' outcome and final trees, which the one-apply path gives as well
        # (--only computes what its families need).
        layers = ws.layers(series=patches, stepwise=stepwise)
    except OfflineMiss as exc:
        hint = "run `overlay verify` once online to fill the git store"
        return None, [_f("MAN002", layout.MANIFEST, None, exc.message, hint)], False
    except PatchApplyError as exc:
        where = f"{exc.file or '(no file)'}" + (
            f" hunk #{exc.hunk}" if exc.hunk else ""
        )
        rel = f"{layout.PATCH_DIR}/{exc.patch}"
        names = [p.name for p in patches]
        reached = patches[: names.index(exc.patch) + 1] if exc.patch in names else []
        return (
            None,
            [_f("SER010", rel, None, f"{where}: {exc.reason}", exc.hint)]
            + _unverifiable_findings(ws.store, reached, failed=True),
            True,
        )
    except LayerError as exc:
        return None, [_f("LAY001", layout.MANIFEST, None, exc.message, exc.hint)], True
    except GitError as exc:
        return None, [_f("MAN001", layout.MANIFEST, None, exc.message)], False
    return layers, _unverifiable_findings(ws.store, patches, failed=False), True


def _unverifiable_findings(
    store: Store, patches: list[Patch], *, failed: bool
) -> list[Finding]:
    """SER017: each recorded blob of the patches the layers reached that cannot be found
    (:func:`overlay.engine.records.missing_records`); ``failed``: the last of them did
    not apply, so only its pre-images are asked for (git never wrote its post-images)."""
    return [
        _f(
            "SER017",
            f"{layout.PATCH_DIR}/{patch.name}",
            None,
            f"{path}: {reason}: the patch is unverifiable, its text cannot be checked "
            "against its record",
            "restore the patch from version control, or apply it where it was made and "
            f"refresh it there; to take its text as the truth: `overlay refresh "
            f"--accept-text {patch.name}`",
        )
        for patch, path, _side, reason in missing_records(
            store, patches, last_pre_only=failed
        )
    ]


#: Findings a wrong merge base makes by itself (the fork delta from it differs): their
#: hints (delete a resolution, list paths as dropped) would rewrite valid records.
_MERGE_BASE_MADE = frozenset(
    {"LAY001", "LAY002", "LAY004", "LAY005", "FIX022", "FIX023", "FIX025"}
)


def _no_rewrite_hint(finding: Finding) -> Finding:
    """``finding`` with a hint that sends nobody to a command that rewrites records:
    on a manifest whose merge base is not an ancestor of its fork commit (MAN003), a
    refresh or rebase would carry the patches onto a fork delta that undoes upstream."""
    if finding.code.startswith("MAN") or not finding.hint:
        return finding
    if finding.code not in _MERGE_BASE_MADE and not any(
        cmd in finding.hint for cmd in ("overlay refresh", "overlay rebase")
    ):
        return finding
    return dataclasses.replace(
        finding,
        hint="fix the manifest first (MAN003: correct [fork] merge-base, or `overlay "
        "sync` recomputes it); until then this finding may come from the wrong merge "
        "base, and no record should be rewritten or deleted for it",
    )


def _merge_base_findings(store: Store, manifest: Manifest) -> list[Finding]:
    """MAN003: the merge base is not an ancestor of the fork commit; nothing when a
    manifest commit is not in the store (MAN001 or MAN002 says so)."""
    commits = [manifest.pin, manifest.fork_commit, manifest.merge_base]
    if store.missing_objects(commits):
        return []
    findings = []
    if not store.is_ancestor(manifest.merge_base, manifest.fork_commit):
        findings.append(
            _f(
                "MAN003",
                layout.MANIFEST,
                None,
                f"merge-base {manifest.merge_base[:12]} is not an ancestor of fork "
                f"commit {manifest.fork_commit[:12]}",
                "run `overlay sync` to recompute it",
            )
        )
    return findings


def _gitlink_findings(listing: list[tuple[str, str, str, str]]) -> list[Finding]:
    """LAY007: each submodule (gitlink) of the patched tree, which ``overlay export``
    refuses (it writes files, not other repositories), so no build can run."""
    return [
        _f(
            "LAY007",
            layout.MANIFEST,
            None,
            f"{path} is a submodule (gitlink {oid[:12]}) in the patched tree: "
            "`overlay export` and every build refuse it",
            f'leave it out of the carried paths (`[carry] exclude` "{path}") and list '
            "it under Dropped in LOCAL_FIXES.md, or vendor its files in the fork",
        )
        for mode, _kind, oid, path in listing
        if mode == "160000"
    ]


def _layer_findings(layers: Layers) -> list[Finding]:
    """LAY002 (stale resolutions) and LAY005 (a resolution changing lines outside the
    conflict regions)."""
    findings = [
        _f(
            "LAY002",
            f"{layout.RESOLVED_DIR}/{stale}",
            None,
            f"{stale} no longer conflicts; the resolution is not used",
            "delete it (and its retarget entry) or re-check the merge",
        )
        for stale in layers.stale_resolutions
    ]
    for conflict in layers.conflicts:
        for line, what in conflict.outside:
            findings.append(
                _f(
                    "LAY005",
                    f"{layout.RESOLVED_DIR}/{conflict.path}",
                    line,
                    f"outside the conflict regions of git's merge of pin and fork, the "
                    f"resolution {what}",
                    "keep git's merge outside the conflict regions (see `overlay rebase` "
                    "work files); change upstream code with a patch, not a resolution",
                )
            )
    return findings


def _applied_series_findings(store: Store, layers: Layers) -> list[Finding]:
    """SER016 (symlinks out of the tree), SER015 (a refresh turning a diff binary) and
    SER011 (a refresh changing a patch's bytes), from the applied series."""
    findings = link_findings(store, layers.forked, layers.patches)
    for item in refresh_series(store, layers):
        turns = item.turns
        if turns:
            # The NUL in the patch's own lines is already reported from its text.
            findings += binary_turn_findings(t for t in turns if not t.nul_here)
        elif item.changed and item.patch.name:
            findings.append(
                _f(
                    "SER011",
                    f"{layout.PATCH_DIR}/{item.patch.name}",
                    None,
                    "refreshing would change the patch's bytes",
                    "run `overlay refresh` and commit the result",
                )
            )
    return findings


def _result(
    findings: list[Finding],
    families: set[str],
    skip: Iterable[str],
    layers: Layers | None,
    cacheable: bool,
) -> VerifyResult:
    """The findings of the asked families less the skipped codes, in report order, and
    the codes that ran."""
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
