"""Planning an import: the records of a whole-file overlay, computed before any is written."""

import dataclasses
import difflib
import os
import re
from collections.abc import Sequence

from overlay import layout
from overlay.engine.forked import (
    ForkMerge,
    changes_outside_conflicts,
    compute_forked,
    merge_fork_delta,
)
from overlay.errors import OverlayError
from overlay.fs.paths import Carry, glob_match
from overlay.git.store import Store, TreeEntry
from overlay.importer.carry import (
    CarriedFiles,
    Removed,
    carry_files,
    copy_sources,
    removed_upstream_lines,
    resolution_losses,
)
from overlay.importer.manifest_text import (
    DEFAULT_ARCHITECTURES,
    DEFAULT_EXCLUDE,
    DEFAULT_INCLUDE,
    DEFAULT_UPSTREAM_URL,
    render_manifest,
)
from overlay.importer.patches import (
    PlannedPatch,
    build_series,
    entries_by_path,
    group_by_entries,
)
from overlay.importer.reading import Upstream, WholeFile
from overlay.importer.rows import FileRow, file_rows
from overlay.lazy import lazy_pattern
from overlay.records import fixes
from overlay.records.manifest import (
    Manifest,
    override_urls,
    parse_manifest,
)
from overlay.records.markers import conflict_regions
from overlay.records.patchfmt import DEFAULT_AUTHOR

_OWNER_NAME = lazy_pattern(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


@dataclasses.dataclass
class ImportPlan:
    """Everything the import writes, computed before anything is.

    Attributes:
        upstream: the ``UPSTREAM`` record with full SHAs.
        manifest: the validated manifest; manifest_text: its bytes to write.
        fixes_data: ``LOCAL_FIXES.md`` as carried over.
        closing_from: where the closing sentence came from (``"entry N"`` or
            ``"--closing-sentence"``).
        resolutions: path -> resolution bytes.
        patches: the series.
        rows: what every path became.
        target, forked, patched: tree SHAs (``patched == target`` always): the
            target is the pin with each overlay file's change carried onto it.
        whole: the pin's tree with every overlay file written over it as it is.
        carried: path -> what its copy was made from, for each path where the target
            keeps upstream's later lines instead of the overlay's file as is.
        conflicts: paths whose carry conflicted: the patch holds the whole file.
        removed: the upstream lines an imported patch removes, by path.
        dropped_by_import: fork changes excluded because the overlay does not hold them.
        uncarried: other fork changes the default ``[carry]`` leaves out.
        notes: things the user should know.
    """

    upstream: Upstream
    manifest: Manifest
    manifest_text: str
    fixes_data: bytes
    closing_from: str
    resolutions: dict[str, bytes]
    patches: list[PlannedPatch]
    rows: list[FileRow]
    target: str
    forked: str
    patched: str
    dropped_by_import: list[str]
    uncarried: list[str]
    notes: list[str]
    whole: str = ""
    carried: dict[str, str] = dataclasses.field(default_factory=dict)
    conflicts: list[str] = dataclasses.field(default_factory=list)
    removed: list[Removed] = dataclasses.field(default_factory=list)


def fork_url_of(source: str) -> str:
    """The fork remote for ``UPSTREAM``'s ``source``: ``owner/name`` becomes its GitHub
    URL; anything else is taken as written."""
    if _OWNER_NAME.match(source) and not os.path.exists(source):
        return f"https://github.com/{source}.git"
    return source


def infer_closing_sentence(doc: fixes.Document) -> tuple[str, int] | None:
    """The closing sentence of the highest-numbered kernels/build/API entry, and that number.

    The last sentence of its text, without a trailing issue reference; the newest entry
    shows the policy as it stands (older entries may use older forms).

    Returns:
        ``(sentence, entry number)``, or ``None`` when there is no such entry.
    """
    entries = [
        e
        for e in doc.entries()
        if e.section in fixes.POLICY_SECTIONS and e.text.strip()
    ]
    if not entries:
        return None
    newest = max(entries, key=lambda e: e.number)
    text = fixes.without_reference(newest.text)
    starts = [m.end() for m in re.finditer(r"[.!?]\s+(?=[A-Z])", text[:-1])]
    sentence = text[starts[-1] :] if starts else text
    return (sentence, newest.number) if sentence.strip() else None


def split_resolution(auto: bytes | None, wanted: bytes) -> tuple[bytes, bool]:
    """A resolution for a conflicted path whose wanted content may also change other lines.

    The resolution is git's merge outside the conflict regions and ``wanted``'s lines
    inside them, so it passes LAY005; what ``wanted`` changes outside the regions is
    left for a patch on top. A region is mapped onto ``wanted`` by the unchanged lines
    just before and after it.

    Args:
        auto: git's merged text with its markers (``None`` for a conflict with no text,
            such as modify/delete).
        wanted: the whole-file overlay's content.
    Returns:
        ``(resolution, whole)``: ``whole`` is true when the resolution is ``wanted``
        itself (no region, nothing changed outside them, or a region whose neighbour
        lines the overlay changed too: then LAY005 tells the user).
    """
    if (
        auto is None
        or not conflict_regions(auto)
        or not changes_outside_conflicts(auto, wanted)
    ):
        return wanted, True
    a, w = auto.split(b"\n"), wanted.split(b"\n")
    matcher = difflib.SequenceMatcher(None, a, w, autojunk=False)
    where: dict[int, int] = {}
    for i, j, size in matcher.get_matching_blocks():
        for k in range(size):
            where[i + k] = j + k
    out: list[bytes] = []
    done = 0
    for start, end in conflict_regions(auto):
        lo, hi = start - 1, end  # 0-based, hi exclusive: the marker lines included
        before = where.get(lo - 1) if lo > 0 else -1
        after = where.get(hi) if hi < len(a) else len(w)
        if before is None or after is None or after < before + 1:
            return wanted, True
        out += a[done:lo] + w[before + 1 : after]
        done = hi
    out += a[done:]
    resolution = b"\n".join(out)
    if changes_outside_conflicts(auto, resolution) or conflict_regions(resolution):
        return wanted, True
    return resolution, False


def _key(entry: TreeEntry | None) -> tuple[str, str] | None:
    return None if entry is None else (entry.mode, entry.oid)


def plan_import(
    store: Store,
    whole: WholeFile,
    *,
    upstream_url: str = DEFAULT_UPSTREAM_URL,
    fork_url: str | None = None,
    closing_sentence: str | None = None,
    author: str = DEFAULT_AUTHOR,
    architectures: Sequence[str] = DEFAULT_ARCHITECTURES,
) -> ImportPlan:
    """Compute the records of a whole-file overlay (nothing is written).

    Args:
        store: the git store (``OVERLAY_UPSTREAM_URL`` / ``OVERLAY_FORK_URL`` override
            the URLs it fetches from, as for every command).
        whole: the overlay (:func:`read_whole_file`).
        upstream_url: upstream MLX's URL for the manifest.
        fork_url: the fork's URL for the manifest (default: from ``UPSTREAM``'s source).
        closing_sentence: the policy sentence (default: inferred from the newest
            kernels/build/API entry, :func:`infer_closing_sentence`).
        author: the ``From:`` header of the patches.
        architectures: ``[backend] architectures`` of the manifest.
    Returns:
        :class:`ImportPlan`, whose patched tree equals the target tree: the pin with
        each overlay file's change against the file it was copied from carried onto
        it (:mod:`overlay.importer.carry`).
    Raises:
        OverlayError: no closing sentence can be found, a manifest value is invalid
            (exit 2); GitError, OfflineMiss: a commit cannot be found or fetched (exit 2).
    """
    fork_url = fork_url or fork_url_of(whole.upstream.source)
    upstream = _resolve_upstream(store, whole.upstream, upstream_url, fork_url)
    pin, fork, base = upstream.pin, upstream.commit, upstream.merge_base
    doc = fixes.parse(whole.fixes_data.decode("utf-8").removeprefix("\ufeff"))
    closing_sentence, closing_from = _closing_sentence(doc, closing_sentence)
    notes: list[str] = []

    pin_tree = store.tree_of(pin)
    blobs: dict[str, tuple[str, str] | None] = {
        p: (mode, store.hash_blob(data)) for p, (mode, data) in whole.files.items()
    }
    whole_tree = store.edit_tree(pin_tree, blobs)
    at_pin = store.entries(pin_tree, list(blobs))
    differs = {p for p, blob in blobs.items() if _key(at_pin.get(p)) != blob}

    globs, dropped, merge = _settle_carry(store, upstream, pin_tree, differs)
    exclude = [*globs, *sorted(dropped)]
    resolutions, partial = _resolutions(store, merge, whole, notes)
    forked, fork_carried, uncarried, _conflicts, stale = compute_forked(
        store, base, pin, fork, Carry(DEFAULT_INCLUDE, exclude), resolutions
    )
    if stale:
        raise OverlayError(
            f"internal: resolutions for paths that do not conflict: {', '.join(stale)}"
        )
    carry, sources = _carry_onto_pin(store, upstream, forked, whole_tree, fork_carried)
    target = carry.target

    changes = store.diff_tree(forked, target)
    changed = [path for *_r, path in changes]
    created = {path for _om, _nm, _oo, _no, status, path in changes if status == "A"}
    named_by, titles = entries_by_path(store, target, doc)
    patches, tree = build_series(
        store,
        forked,
        store.entries(target, changed),
        group_by_entries(changed, named_by),
        titles=titles,
        created=created,
        partial=partial,
        author=author,
    )
    if tree != target or {p for *_r, p in store.diff_tree(target, whole_tree)} != set(
        carry.carried
    ):
        raise OverlayError(
            f"internal: the imported series makes tree {tree[:12]}, not the target "
            f"{target[:12]}, or the target differs from the overlay's files elsewhere "
            "than where they were carried onto the pin"
        )
    removed = removed_upstream_lines(
        store,
        forked,
        target,
        [p for p in changed if p not in created],
        sources,
        carry.conflicts,
    )
    removed += resolution_losses(store, forked, merge.stages)
    notes += [r.describe(record_of(r, patches)) for r in removed]

    manifest_text = render_manifest(
        upstream,
        upstream_url=upstream_url,
        fork_url=fork_url,
        exclude=exclude,
        closing_sentence=closing_sentence,
        architectures=architectures,
    )
    manifest = parse_manifest(manifest_text, layout.MANIFEST)
    rows = file_rows(
        whole, differs, dropped, resolutions, patches, named_by, changed, partial
    )
    _carry_notes(rows, carry, removed)
    if upstream.other:
        notes.append("UPSTREAM keys not used: " + ", ".join(sorted(upstream.other)))
    return ImportPlan(
        upstream,
        manifest,
        manifest_text,
        whole.fixes_data,
        closing_from,
        resolutions,
        patches,
        rows,
        target,
        forked,
        tree,
        sorted(dropped),
        sorted(set(uncarried) - dropped),
        notes,
        whole_tree,
        carry.carried,
        carry.conflicts,
        removed,
    )


def _resolve_upstream(
    store: Store, up: Upstream, upstream_url: str, fork_url: str
) -> Upstream:
    """``up`` with full SHAs, after pointing the remotes at the URLs; refuses a merge
    base that is not an ancestor of the fork commit.

    Raises:
        OverlayError: the merge base is the fork commit or not its ancestor (exit 2);
            GitError, OfflineMiss: a commit cannot be found or fetched.
    """
    store.set_remotes(override_urls(upstream_url, fork_url))
    pin = store.resolve(up.pin, ["upstream", "fork"])
    fork = store.resolve(up.commit, ["fork"])
    base = store.resolve(up.merge_base, ["fork", "upstream"])
    ancestor = store.git("merge-base", "--is-ancestor", base, fork, check=False)
    if base == fork or ancestor.returncode != 0:
        # A typo here would turn the whole fork into "changes" of the overlay (a
        # patch for every file) instead of a clear refusal.
        raise OverlayError(
            f"UPSTREAM: fork_upstream_merge_base {base[:12]} is not an ancestor of the "
            f"fork commit {fork[:12]}",
            hint="it is `git merge-base <fork commit> <MLX commit the fork last merged>`; "
            "check the UPSTREAM record",
        )
    return dataclasses.replace(up, commit=fork, merge_base=base, pin=pin)


def _closing_sentence(doc: fixes.Document, given: str | None) -> tuple[str, str]:
    """``(sentence, where it came from)``: ``given``, else the newest policy entry's.

    Raises:
        OverlayError: none given and no kernels/build/API entry to infer it from.
    """
    if given:
        return given, "--closing-sentence"
    inferred = infer_closing_sentence(doc)
    if inferred is None:
        raise OverlayError(
            f"{layout.LOCAL_FIXES} has no kernels, build or API entry to take the policy's "
            "closing sentence from",
            hint="pass --closing-sentence TEXT",
        )
    sentence, number = inferred
    return sentence, f"entry {number}"


def _settle_carry(
    store: Store, upstream: Upstream, pin_tree: str, differs: set[str]
) -> tuple[list[str], set[str], ForkMerge]:
    """``[carry] exclude`` as ``(globs, dropped paths)``, and the fork delta's merge
    onto the pin under it.

    The globs are the default ones, less one the overlay changes files under; the
    dropped paths are every fork change the target does not hold (the overlay keeps
    the pin's file there, or has none).

    Raises:
        OverlayError: the carried paths did not settle after 8 merges (a bug).
    """
    base, pin, fork = upstream.merge_base, upstream.pin, upstream.commit
    exclude = [g for g in DEFAULT_EXCLUDE if not any(glob_match(p, g) for p in differs)]
    dropped: set[str] = set()
    # Dropping a path can change rename pairing: merge again until stable.
    for _round in range(8):
        carry = Carry(DEFAULT_INCLUDE, [*exclude, *sorted(dropped)])
        merge = merge_fork_delta(store, base, pin, fork, carry)
        check = [p for p in merge.carried if p not in differs]
        merged = store.entries(merge.tree, check)
        pinned = store.entries(pin_tree, check)
        new = {
            p
            for p in check
            if p in merge.stages or _key(merged.get(p)) != _key(pinned.get(p))
        }
        if not new:
            return exclude, dropped, merge
        dropped |= new
    raise OverlayError("internal: the carried paths did not settle after 8 merges")


def _resolutions(
    store: Store, merge: ForkMerge, whole: WholeFile, notes: list[str]
) -> tuple[dict[str, bytes], list[str]]:
    """``(path -> resolution, paths whose overlay changes also go into a patch)``.

    Each conflicted path gets :func:`split_resolution` of git's merge and the
    overlay's file; a note is added to ``notes`` where the overlay changes the lines
    around a region, so the resolution must be the whole file (LAY005).
    """
    resolutions: dict[str, bytes] = {}
    partial: list[str] = []
    with store.cat_file() as cat:
        for path in sorted(merge.stages):
            entry = store.entries(merge.tree, [path]).get(path)
            auto = (
                cat.read(entry.oid)[1]
                if entry is not None and entry.kind == "blob"
                else None
            )
            wanted = whole.files[path][1]
            resolutions[path], whole_file = split_resolution(auto, wanted)
            if not whole_file:
                partial.append(path)
            elif auto is not None and changes_outside_conflicts(auto, wanted):
                notes.append(
                    f"{path}: the overlay also changes the lines around a conflict region, "
                    "so the resolution is the whole file and verify reports LAY005; move "
                    "those changes into a patch"
                )
    return resolutions, partial


def record_of(removed: Removed, patches: Sequence[PlannedPatch]) -> str:
    """The record that removes ``removed``'s lines: the patch, or the resolution."""
    if removed.kind == "resolution":
        return f"{layout.RESOLVED_DIR}/{removed.path}"
    return next(p.name for p in patches if removed.path in p.files)


def _carry_onto_pin(
    store: Store, upstream: Upstream, forked: str, whole_tree: str, fork_carried
) -> tuple[CarriedFiles, dict]:
    """Each overlay file's change carried onto the forked layer, and the files the
    copies were taken from (:func:`~overlay.importer.carry.copy_sources`).

    Raises:
        OverlayError: the forked layer holds a path the overlay's tree lacks (a bug).
    """
    first = store.diff_tree(forked, whole_tree)
    if any(status == "D" for *_r, status, _p in first):
        raise OverlayError("internal: the forked layer holds a path the target lacks")
    modified = [path for *_r, status, path in first if status != "A"]
    sources = copy_sources(
        store,
        modified,
        fork_tree=store.tree_of(upstream.commit),
        base_tree=store.tree_of(upstream.merge_base),
        fork_carried=set(fork_carried),
    )
    return carry_files(store, forked, whole_tree, modified, sources), sources


def _carry_notes(
    rows: list[FileRow], carry: CarriedFiles, removed: list[Removed]
) -> None:
    """Say in each row what the carry onto the pin did to its file."""
    losing: dict[str, list[str]] = {}
    for r in removed:
        record = "the resolution" if r.kind == "resolution" else "it"
        verb = "changes or drops" if r.kind == "resolution" else "removes"
        losing.setdefault(r.path, []).append(
            f"{record} {verb} {len(r.lines)} upstream line(s)"
        )
    for row in rows:
        if row.kind not in ("unchanged", "patch", "resolution"):
            continue
        extra = []
        if row.path in carry.carried and row.kind == "unchanged":
            extra.append(
                f"the overlay holds {carry.carried[row.path]}, upstream's later lines "
                "kept"
            )
        elif row.path in carry.carried:
            extra.append(
                f"the overlay's change against {carry.carried[row.path]} carried onto "
                "the pin: upstream's later lines kept"
            )
        elif row.path in carry.conflicts:
            extra.append(
                f"the overlay's change against {carry.sources[row.path]} conflicts with "
                "the pin's file: the patch is the whole file"
            )
        if row.path in losing:
            extra.append(" and ".join(losing[row.path]) + " (see the notes)")
        if extra:
            row.note = "; ".join([row.note, *extra] if row.note else extra)
