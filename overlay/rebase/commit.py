"""The end of a run: the records written whole, and the report.

Nothing in ``patches-rocm/`` or ``LOCAL_FIXES.md`` changes until the whole run
completes; then the manifest (every byte but the three commits kept), the
resolutions, the refreshed patches (only those whose bytes changed), the series
and the two pins named in ``LOCAL_FIXES.md`` are written, and the report goes to
``.overlay/last-rebase.md`` and ``.overlay/last-rebase.json``.
"""

from __future__ import annotations

import os

from overlay import layout
from overlay.checks.pins import uncarried_changes
from overlay.errors import OverlayError
from overlay.rebase.base import RunBase, _checkpoint
from overlay.rebase.report import (
    PinChange,
    RebaseReport,
    ReportPatch,
    ReportResolution,
    label_range_diff,
    patch_label,
    write_last_report,
)
from overlay.rebase.state import DROPPED, Bases, PatchStatus
from overlay.records import fixes
from overlay.records.manifest import (
    Manifest,
    manifest_text,
    set_fork_branch,
    set_uncarried_reviewed,
    with_pins,
    write_manifest,
)
from overlay.records.resolutions import (
    read_resolutions,
    scan_resolutions,
    write_resolutions,
)
from overlay.records.series import (
    parse_patch,
    remove_patch,
    series_keeping,
    series_text,
    write_patch,
    write_series,
)

#: The report's note on a resolution whose path no longer conflicts.
_REMOVED_NOTE = (
    "the path no longer conflicts; the resolution stays in the rr-cache, and a "
    "later run that meets the same conflict reuses it"
)


class CommitSteps(RunBase):
    """Write the records of a completed run, and its report."""

    #: What the fork changed outside [carry] in this run (set by :meth:`_commit`).
    _uncarried: list[tuple[str, list[str]]] = []
    #: The ``[fork] uncarried-reviewed`` the run leaves (set by :meth:`_commit`).
    _review_from: str | None = None

    def _commit(self, manifest: Manifest, old: Bases, new: Bases) -> RebaseReport:
        """Write every record, the report, and remove the state.

        Args:
            manifest: the manifest as the run started (unused: the file is re-read
                so its comments survive).
            old, new: the bases before and after.
        Returns:
            The report.
        Raises:
            OverlayError: a record was edited while the run was stopped (exit 2).
        """
        if not self.state.commit_started:
            self._refuse_edited_records()
            self.state.commit_started = True
            self.save()
        self._uncarried = uncarried_changes(
            self.store, self._manifest().carry, old.fork, new.fork
        )
        self._review_from = self._awaiting_review(old, new)
        self._write_manifest(new)
        _checkpoint("commit")
        self._write_resolutions()
        kept = self._write_patches()
        self._write_series(kept)
        self._write_fix_pins(new)
        self.ws.forget_records()  # the manifest and series are the run's now
        report = self.report(old, new)
        self._write_report(report)
        self._discard_dir()
        return report

    def _refuse_edited_records(self) -> None:
        """Never overwrite what the user edited while the run was stopped: refuse when a
        backed-up record differs from its backup (or is gone)."""
        copies = self.backup().copies
        edited = []
        for rel in self.state.backup:
            try:
                with open(os.path.join(self.root, rel), "rb") as fh:
                    if rel not in copies or fh.read() != copies[rel][0]:
                        edited.append(rel)
            except FileNotFoundError:
                edited.append(rel)
        if edited:
            raise OverlayError(
                f"changed since the {self.state.kind} started: {', '.join(edited)}",
                hint="move your edits aside and run --continue again (or --abort)",
            )

    def _awaiting_review(self, old: Bases, new: Bases) -> str | None:
        """The ``[fork] uncarried-reviewed`` this run leaves: the fork commit from which
        the fork's changes outside ``[carry]`` await review (MAN005 of ``verify``, until
        ``overlay sync --ack-uncarried``), or ``None`` when nothing awaits.

        A run that keeps the fork commit keeps the key. Otherwise review starts at the
        commit the key names, else at the old fork commit, and the key stays only if
        something outside ``[carry]`` differs from there to the new fork commit: a sync
        there and back (or one whose changes outside ``[carry]`` a later one undid)
        leaves nothing to acknowledge, and says so by clearing the key, so the report
        and ``verify`` agree.
        """
        reviewed = self._manifest().uncarried_reviewed
        if old.fork == new.fork:
            return reviewed
        since = reviewed or old.fork
        if since == old.fork:
            return since if self._uncarried else None
        if self.store.missing_objects([since]):
            return reviewed  # a commit the store lacks: its review is left as it was
        carry = self._manifest().carry
        return since if uncarried_changes(self.store, carry, since, new.fork) else None

    def _write_manifest(self, new: Bases) -> None:
        """The manifest with the new commits, :attr:`_review_from` and the run's fork
        branch, comments preserved."""
        updated = with_pins(manifest_text(self.root), new.pin, new.fork, new.merge_base)
        if self._review_from != self._manifest().uncarried_reviewed:
            updated = set_uncarried_reviewed(updated, self._review_from)
        branch = self.state.fork_branch
        if branch is not None and branch != self._manifest().fork_branch:
            updated = set_fork_branch(updated, branch)
        write_manifest(self.root, updated, if_changed=True)

    def _present_resolutions(self, wanted: dict[str, str]) -> list[str]:
        """The resolutions on disk, as :func:`read_resolutions` names them (and with its
        errors), for :meth:`_write_resolutions` to delete those not ``wanted``.

        git's ignore rules (one ``check-ignore``) only decide which unwanted files are
        records: when every file there is wanted and readable, none is deleted whatever
        git says about them, and git is not asked. Anything else (a file not
        wanted, a refused entry) is read the full way.
        """
        found, errors = scan_resolutions(self.root, skip_ignored=False)
        if not errors and all(rel in wanted for rel in found):
            return list(found)
        return list(read_resolutions(self.root))

    def _write_resolutions(self) -> None:
        """``patches-rocm/resolved/`` holds exactly the decided resolutions."""
        wanted = {p: e.blob for p, e in self.state.resolutions.items()}
        present = self._present_resolutions(wanted)
        write_resolutions(
            self.root, {rel: self._blob(oid) for rel, oid in wanted.items()}, present
        )

    def _write_patches(self) -> list[str]:
        """Delete the dropped patches, write the refreshed ones; return the names kept."""
        kept = []
        for entry in self.state.patches:
            if entry.status in DROPPED:
                remove_patch(self.root, entry.name)
                continue
            kept.append(entry.name)
            if entry.blob is None:
                continue  # applied exactly: the file keeps its bytes
            write_patch(self.root, entry.name, self._blob(entry.blob), if_changed=True)
        return kept

    def _write_series(self, kept: list[str]) -> None:
        """The series without the lines of dropped patches (comments, blanks and its
        line ending kept: :func:`overlay.records.series.series_keeping`)."""
        old_series = series_text(self.root)
        new_series = series_keeping(old_series, kept)
        if new_series != old_series:
            write_series(self.root, new_series)

    def _write_fix_pins(self, new: Bases) -> None:
        """The two commits ``LOCAL_FIXES.md``'s headings name, and the paths its entries
        name where the run followed an upstream rename (:mod:`overlay.records.fixes.rewrite`);
        each entry so changed is said in its patch's note."""
        text = fixes.fixes_bytes(self.root)
        if text is None:
            return
        updated = fixes.set_heading_pins(text, new.fork, new.pin)
        for entry in self.state.patches:
            renames = (
                self._followed_renames(entry)
                if entry.status == PatchStatus.MERGED
                else {}
            )
            if not renames:
                continue
            numbers = [
                int(n)
                for n in self._backup_patch(entry.name, header_only=True).trailers.get(
                    "Local-Fix", []
                )
                if n.strip().isdigit()
            ]
            updated, changed = fixes.rename_entry_paths(updated, numbers, renames)
            if changed:
                entry.note = (entry.note or "") + (
                    f"; LOCAL_FIXES.md entry {', '.join(map(str, changed))} now names "
                    + ", ".join(sorted(renames.values()))
                )
        if updated != text:
            fixes.write_fixes(self.root, updated)

    def _followed_renames(self, entry) -> dict[str, str]:
        """Old path -> new path for each file a merged patch moved with an upstream
        rename: the paths its old bytes touch and its new bytes do not, paired by git's
        rename detection between its old and new results (one pair needs none)."""
        if entry.blob is None or entry.tree is None:
            return {}
        old = self._backup_patch(entry.name)
        new = parse_patch(self._blob(entry.blob), entry.name)
        gone = sorted(old.touched - new.touched)
        moved = sorted(new.touched - old.touched)
        if not gone or not moved:
            return {}
        if len(gone) == len(moved) == 1:
            return {gone[0]: moved[0]}
        layers = self._old_layers()
        before = (
            next((r.tree for r in layers.patches if r.patch.name == entry.name), None)
            if layers is not None
            else None
        )
        if before is None:
            return {}
        fields = (
            self.store.git(
                "diff-tree",
                "-r",
                "-z",
                "-M",
                "--name-status",
                before,
                entry.tree,
                "--",
                *gone,
                *moved,
            )
            .stdout.decode("utf-8", "surrogateescape")
            .split("\0")
        )
        pairs = {}
        i = 0
        while i < len(fields) - 1:
            if fields[i].startswith("R"):
                pairs[fields[i + 1]] = fields[i + 2]
                i += 3
            else:
                i += 2
        return {a: b for a, b in pairs.items() if a in gone and b in moved}

    def _write_report(self, report: RebaseReport) -> None:
        """The run's report (:func:`overlay.rebase.report.write_last_report`)."""
        write_last_report(self.root, report)

    # -- the report -------------------------------------------------------------------
    def report(self, old: Bases, new: Bases) -> RebaseReport:
        """The run's outcome (see :mod:`overlay.rebase.report`)."""
        resolutions = [
            ReportResolution(p, e.status, e.note)
            for p, e in sorted(self.state.resolutions.items())
        ]
        resolutions += [
            ReportResolution(p, "removed", _REMOVED_NOTE)
            for p in self.state.stale or []
        ]
        patches = []
        for entry in self.state.patches:
            patch = self._backup_patch(entry.name, header_only=True)
            status = entry.status
            if status == "merged" and not entry.changed:
                status = "merged (bytes unchanged)"
            patches.append(
                ReportPatch(entry.name, status, patch.local_fix, entry.note or "")
            )
        return RebaseReport(
            kind=self.state.kind,
            pins=PinChange(old, new),
            merge=dict(self.state.merge_stats or {}),
            resolutions=resolutions,
            patches=patches,
            range_diff=self._range_diff(),
            next_steps=self._submodule_steps()
            + self._uncarried_steps()
            + _dropped_patch_steps(patches)
            + _next_steps(resolutions),
            uncarried=self._uncarried,
            warnings=self.state.warnings,
        )

    def _uncarried_steps(self) -> list[str]:
        """The next steps for the fork's changes outside ``[carry]`` in this run: review
        them (MAN005), and list under Dropped those no bullet covers (FIX022)."""
        if not self._uncarried:
            return []
        steps = (
            [
                f"review the fork's {len(self._uncarried)} change(s) outside [carry] "
                "(listed under Not carried; MAN005), then overlay sync --ack-uncarried"
            ]
            if self._review_from is not None
            else []
        )
        lf = os.path.join(self.root, layout.LOCAL_FIXES)
        if os.path.isfile(lf):
            paths = [p for p, _c in self._uncarried]
            found = [
                f.message
                for f in fixes.check_dropped(fixes.load(lf), paths)
                if f.code == "FIX022"
            ]
            unlisted = [p for p in paths if any(f"path {p} is not" in m for m in found)]
            if unlisted:
                steps.append(
                    "list under Dropped in LOCAL_FIXES.md (FIX022): "
                    + ", ".join(unlisted)
                )
        return steps

    def _submodule_steps(self) -> list[str]:
        """A first next step per submodule (gitlink) the new patched tree holds, which
        ``overlay export`` refuses (LAY007 of ``verify``); empty when there is none."""
        landed = [e.tree for e in self.state.patches if e.landed and e.tree]
        tree = landed[-1] if landed else self.state.forked
        if tree is None:
            return []
        out = self.store.git("ls-tree", "-r", "-z", "--full-tree", tree).stdout
        links = [
            rec.split(b"\t", 1)[1].decode("utf-8", "surrogateescape")
            for rec in out.split(b"\0")
            if rec.startswith(b"160000 ")
        ]
        return [
            f"exclude the submodule {path} from [carry] and list it under Dropped "
            "(LAY007: export refuses it)"
            for path in links
        ]

    def _range_diff(self) -> str:
        """``git range-diff`` of the old series (on the old layer) against the new one.

        When every patch applied exactly and keeps its bytes there is nothing to
        compare: the range-diff would pair each patch with itself (``=``), so it is
        summarized without running git.
        """
        entries = self.state.patches
        labels = {
            e.name: patch_label(
                e.name, self._backup_patch(e.name, header_only=True).local_fix
            )
            for e in entries
        }
        if all(e.status == PatchStatus.CLEAN and not e.changed for e in entries):
            return "".join(f"{labels[e.name]} = {labels[e.name]}\n" for e in entries)
        layers = self._old_layers()
        if layers is None:
            return ""
        landed = [e for e in entries if e.tree and e.landed]
        old_base, old_tip = self._chain(
            layers.forked, [(r.patch.subject, r.tree) for r in layers.patches]
        )
        assert self.state.forked is not None
        new_base, new_tip = self._chain(
            self.state.forked,
            [
                (self._backup_patch(e.name, header_only=True).subject, e.tree)
                for e in landed
            ],
        )
        proc = self.store.git(
            "range-diff",
            "--no-color",
            f"{old_base}..{old_tip}",
            f"{new_base}..{new_tip}",
            check=False,
        )
        return label_range_diff(
            proc.stdout.decode("utf-8", "replace"),
            [patch_label(r.patch.name, r.patch.local_fix) for r in layers.patches],
            [labels[e.name] for e in landed],
        )

    def _chain(
        self, base_tree: str, trees: list[tuple[str, str | None]]
    ) -> tuple[str, str]:
        """Synthetic commits for a layer and the patches on it: ``(base, tip)``."""
        specs: list[tuple[str, list[str | int], str]] = [
            (base_tree, [], "overlay: layer below the series")
        ]
        for i, (subject, tree) in enumerate(trees):
            assert tree is not None
            specs.append((tree, [i], subject))
        shas = self.store.commit_chain(specs)
        return shas[0], shas[-1]


def _dropped_patch_steps(patches: list[ReportPatch]) -> list[str]:
    """A next step per patch the run left out (``--skip``/``--drop``) whose entry stays."""
    return [
        f"move or delete LOCAL_FIXES.md entry {p.local_fix}: its patch {p.name} is "
        "gone (FIX024; FIX021 where it names a file the tree no longer has)"
        for p in patches
        if p.status == "skipped" and p.local_fix is not None
    ]


def _next_steps(resolutions: list[ReportResolution]) -> list[str]:
    """What the user does after the run: review the changed resolutions' entries,
    update those of removed ones, then verify, check, build and run the suites (the
    user guide's order: ``build --check`` runs every unit through the front end, the
    quick look for API drift, before the full build that links)."""
    steps = []
    changed = [r.path for r in resolutions if r.status not in ("unchanged", "removed")]
    removed = [r.path for r in resolutions if r.status == "removed"]
    if changed:
        steps.append(
            "review the retarget entries of LOCAL_FIXES.md for "
            + ", ".join(changed)
            + " (where one has no entry yet, verify says FIX023: overlay fix new "
            "--section retarget ...)"
        )
    if removed:
        steps.append(
            "update or drop the LOCAL_FIXES.md entries that name the removed "
            "resolution(s) "
            + ", ".join(f"{layout.RESOLVED_DIR}/{p}" for p in removed)
            + " (FIX021)"
        )
    return steps + [
        "overlay verify",
        "overlay build --backend rocm --check",
        "overlay build --backend rocm",
        "overlay suite run",
    ]
