"""``overlay import whole-file DIR``: a whole-file overlay turned into records (issue 18).

A team that keeps its ROCm overlay by hand holds, in DIR:

* ``UPSTREAM``: ``key: value`` lines naming the fork (``source``, ``branch``), the
  fork commit (``commit``), its merge base with MLX (``fork_upstream_merge_base``)
  and the MLX pin the files were retargeted to (``retargeted_to_mlx_pin``);
* ``LOCAL_FIXES.md``: the numbered entries;
* the overlay: whole files under ``mlx/`` and ``CMakeLists.txt``, copied over an
  MLX checkout at the pin.

The import writes into the target repository ``patches-rocm/overlay.toml`` (from
``UPSTREAM``), ``patches-rocm/resolved/``, the series of byte-stable patches, and
``LOCAL_FIXES.md`` carried over byte for byte. The rules (``docs/import.md``):

* the *target* is the pin's tree with every overlay file written over it; the
  patched layer of the imported records must equal it, and does before anything
  is written (the records are computed again from a temporary directory);
* the forked layer is the carried fork delta merged onto the pin with the layer
  code (:mod:`overlay.layers`); a fork change that the target does not hold (the
  overlay has no file there, or the pin's) is not carried: its path joins
  ``[carry] exclude``, and so does nothing else;
* where the fork delta conflicts with the pin, the path gets a resolution: git's
  merge outside the conflict regions, the overlay's lines inside them; what the
  overlay changes outside them goes into a patch on top;
* every other file that differs from the forked layer goes into a patch. Files are
  grouped by the ``LOCAL_FIXES.md`` entries that name them: one patch per entry
  (``Local-Fix: N``); a file several entries name goes into one patch with a
  ``Local-Fix:`` trailer for each; a file no entry names gets a patch of its own
  without ``Local-Fix:`` (verify says so: FIX017). A file the forked layer lacks is
  created by its patch.

Patches are made the one way the project makes them: :func:`overlay.patchfmt.tree_diff`
and :func:`overlay.patchfmt.format_patch`, passed through
:func:`overlay.refresh.refreshed_bytes`, so ``overlay refresh`` would not change a byte.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
import shutil
import tempfile
import textwrap
import time
from collections.abc import Sequence

from overlay import fixes
from overlay.errors import OverlayError
from overlay.fsutil import (
    RecordMissing,
    atomic_write,
    decode_record,
    git_ignored,
    read_record,
    read_record_text,
    scan_record_dir,
)
from overlay.gitstore import Store, TreeEntry
from overlay.layers import (
    changes_outside_conflicts,
    compute_forked,
    compute_layers,
    merge_fork_delta,
)
from overlay.manifest import MANIFEST_PATH, Manifest, parse_manifest
from overlay.markers import conflict_regions
from overlay.patchfmt import DEFAULT_AUTHOR, format_patch, tree_diff
from overlay.paths import Carry, check_path, glob_match
from overlay.templating import render_report, render_template

UPSTREAM_FILE = "UPSTREAM"
#: The keys an ``UPSTREAM`` record must hold.
UPSTREAM_KEYS = (
    "source",
    "branch",
    "commit",
    "fork_upstream_merge_base",
    "retargeted_to_mlx_pin",
)
DEFAULT_UPSTREAM_URL = "https://github.com/ml-explore/mlx.git"
#: What the manifest carries before the import excludes the fork changes the overlay dropped.
DEFAULT_INCLUDE = ("CMakeLists.txt", "mlx/**")
DEFAULT_EXCLUDE = ("mlx/backend/cuda/**", "mlx/backend/metal/**")
DEFAULT_ARCHITECTURES = ("gfx1100", "gfx1151")
#: The tree part of a whole-file overlay directory; everything else in it is records or notes.
TREE_NAMES = ("mlx", "CMakeLists.txt")
REPORT_MD = os.path.join(".overlay", "last-import.md")
_TEMP_PREFIX = "import-"
_TEMP_SUFFIX = ".tmp"

_UPSTREAM_LINE = re.compile(
    r"^(?P<key>[A-Za-z_][A-Za-z0-9_.-]*)\s*[:=]\s*(?P<value>.*?)\s*$"
)
_HEX_REF = re.compile(r"^[0-9a-fA-F]{7,40}$")
_OWNER_NAME = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


# --------------------------------------------------------------------------- reading DIR


@dataclasses.dataclass(frozen=True)
class Upstream:
    """An ``UPSTREAM`` record.

    Attributes:
        source: the fork's repository (URL, path or ``owner/name``).
        branch: the fork's branch.
        commit, merge_base, pin: the fork commit, its merge base with MLX and the MLX
            pin, as written (hex, full or abbreviated) or, after :func:`plan_import`,
            full 40-hex SHAs.
        other: keys the import does not use, with their values (named in the report).
    """

    source: str
    branch: str
    commit: str
    merge_base: str
    pin: str
    other: dict = dataclasses.field(default_factory=dict)


def parse_upstream(text: str, rel: str = UPSTREAM_FILE) -> Upstream:
    """Parse an ``UPSTREAM`` record: ``key: value`` lines (``key = value`` too).

    Blank lines and ``#`` comments are skipped; a value may be quoted. The five keys
    of :data:`UPSTREAM_KEYS` are required; the three commits must be hex (7 to 40
    digits); other keys are kept in ``other``.

    Args:
        text: the record.
        rel: its name in messages.
    Returns:
        :class:`Upstream`.
    Raises:
        OverlayError: a line that is no ``key: value``, a key given twice, a missing
            key, a commit that is not hex; every problem in one line (exit 2).
    """
    values: dict[str, str] = {}
    other: dict[str, str] = {}
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = _UPSTREAM_LINE.match(s)
        if not m:
            problems.append(f"line {number} is not 'key: value'")
            continue
        key, value = m.group("key"), m.group("value")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        if key in UPSTREAM_KEYS:
            if key in values:
                problems.append(f"line {number}: {key} is given twice")
            values[key] = value
        else:
            other[key] = value
    missing = [k for k in UPSTREAM_KEYS if not values.get(k)]
    if missing:
        problems.append("missing " + ", ".join(missing))
    for key in ("commit", "fork_upstream_merge_base", "retargeted_to_mlx_pin"):
        if values.get(key) and not _HEX_REF.match(values[key]):
            problems.append(
                f"{key} must be a commit SHA (7 to 40 hex digits), got {values[key][:60]!r}"
            )
    if problems:
        raise OverlayError(
            f"{rel}: " + "; ".join(problems),
            hint="UPSTREAM holds 'key: value' lines: " + ", ".join(UPSTREAM_KEYS),
        )
    return Upstream(
        values["source"],
        values["branch"],
        values["commit"].lower(),
        values["fork_upstream_merge_base"].lower(),
        values["retargeted_to_mlx_pin"].lower(),
        other,
    )


@dataclasses.dataclass
class WholeFile:
    """A whole-file overlay directory, read.

    Attributes:
        directory: the directory (absolute).
        upstream: its ``UPSTREAM`` record.
        fixes_data: the bytes of its ``LOCAL_FIXES.md``.
        files: tree path -> ``(mode, bytes)`` of every overlay file (``100755``
            when the file is executable by its owner, else ``100644``).
        ignored: tree paths git ignores in the directory (a ``.DS_Store``): not part of it.
        outside: other entries of the directory, not part of the tree (notes, scripts).
    """

    directory: str
    upstream: Upstream
    fixes_data: bytes
    files: dict[str, tuple[str, bytes]]
    ignored: list[str]
    outside: list[str]


def read_whole_file(directory: str) -> WholeFile:
    """Read a whole-file overlay directory, every file as a record (``docs/records.md``).

    Args:
        directory: the directory holding ``UPSTREAM``, ``LOCAL_FIXES.md``, ``mlx/`` and
            ``CMakeLists.txt``.
    Returns:
        :class:`WholeFile`.
    Raises:
        OverlayError: no such directory, no ``UPSTREAM`` or ``LOCAL_FIXES.md``, an
            invalid ``UPSTREAM``, ``LOCAL_FIXES.md`` not UTF-8, no overlay file at all;
            RecordError (an OverlayError): an overlay file that is a symlink, a FIFO,
            over 16 MiB or unreadable; UnsafePath: a hostile name (exit 2 each).
    """
    d = os.path.abspath(directory)
    if not os.path.isdir(d):
        raise OverlayError(f"{directory}: no such directory")
    try:
        upstream = parse_upstream(
            read_record_text(d, UPSTREAM_FILE, what="UPSTREAM record")
        )
    except RecordMissing:
        raise OverlayError(
            f"{directory} holds no {UPSTREAM_FILE} record",
            hint="a whole-file overlay names its fork, fork commit, merge base and MLX pin in "
            "UPSTREAM (docs/import.md)",
        ) from None
    try:
        fixes_data = read_record(d, fixes.FILE_NAME, what="file")
    except RecordMissing:
        raise OverlayError(
            f"{directory} holds no {fixes.FILE_NAME}",
            hint="the import carries LOCAL_FIXES.md over and groups the patches by its entries",
        ) from None
    decode_record(fixes_data, fixes.FILE_NAME, what="file")
    ignored: list[str] = []
    found, errors = scan_record_dir(d, "mlx", what="overlay file", ignored=ignored)
    if errors:
        raise errors[0]
    raw = {f"mlx/{p}": data for p, data in found.items()}
    ignored = [f"mlx/{p}" for p in ignored]
    if os.path.lexists(os.path.join(d, "CMakeLists.txt")):
        if git_ignored(d, ["CMakeLists.txt"]):
            ignored.append("CMakeLists.txt")
        else:
            raw["CMakeLists.txt"] = read_record(
                d, "CMakeLists.txt", what="overlay file", allow_symlink=False
            )
    files = {}
    for path, data in sorted(raw.items()):
        check_path(path, what="overlay file")
        executable = os.stat(os.path.join(d, *path.split("/"))).st_mode & 0o100
        files[path] = ("100755" if executable else "100644", data)
    if not files:
        raise OverlayError(
            f"{directory} holds no overlay file under mlx/ or CMakeLists.txt"
        )
    outside = sorted(
        n
        for n in os.listdir(d)
        if n not in (*TREE_NAMES, UPSTREAM_FILE, fixes.FILE_NAME)
    )
    return WholeFile(d, upstream, fixes_data, files, sorted(ignored), outside)


# --------------------------------------------------------------------------- the plan


@dataclasses.dataclass
class PlannedPatch:
    """One patch of the imported series.

    Attributes:
        name: file name in ``patches-rocm/``.
        local_fix: the entry numbers of its ``Local-Fix:`` trailers (empty: none names it).
        files: the tree paths it changes; ``created``: those it creates.
        data: the patch file's bytes.
    """

    name: str
    local_fix: tuple[int, ...]
    files: list[str]
    created: list[str]
    data: bytes


@dataclasses.dataclass
class FileRow:
    """What one path became (a row of the report).

    Attributes:
        path: tree path, or for ``skipped`` a name in DIR.
        kind: ``unchanged``, ``resolution``, ``patch``, ``created``, ``dropped``,
            ``ignored`` or ``skipped``.
        result: the record that holds it, in words.
        entries: the ``LOCAL_FIXES.md`` entries that name it.
        note: why, when the kind alone does not say.
    """

    path: str
    kind: str
    result: str
    entries: tuple[int, ...] = ()
    note: str = ""


@dataclasses.dataclass
class ImportPlan:
    """Everything the import writes, computed before anything is.

    Attributes:
        upstream: the ``UPSTREAM`` record with full SHAs.
        manifest: the validated manifest; manifest_text: its bytes to write.
        fixes_data: ``LOCAL_FIXES.md`` as carried over.
        closing_from: where the closing sentence came from (``"entry N"`` or ``"--closing-sentence"``).
        resolutions: path -> resolution bytes.
        patches: the series.
        rows: what every path became.
        target, forked, patched: tree SHAs (``patched == target`` always).
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


def _slug(text: str, limit: int = 48) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    if len(slug) > limit:
        slug = slug[:limit].rsplit("-", 1)[0]
    return slug or "import"


def _numbers(key: Sequence[int]) -> str:
    names = [str(n) for n in key]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _wrap(text: str) -> str:
    return textwrap.fill(
        " ".join(text.split()), 72, break_long_words=False, break_on_hyphens=False
    )


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
        :class:`ImportPlan`, whose patched tree equals the target tree.
    Raises:
        OverlayError: no closing sentence can be found, a manifest value is invalid
            (exit 2); GitError, OfflineMiss: a commit cannot be found or fetched (exit 2).
    """
    up = whole.upstream
    fork_url = fork_url or fork_url_of(up.source)
    store.set_remote("upstream", os.environ.get("OVERLAY_UPSTREAM_URL") or upstream_url)
    store.set_remote("fork", os.environ.get("OVERLAY_FORK_URL") or fork_url)
    pin = store.resolve(up.pin, ["upstream", "fork"])
    fork = store.resolve(up.commit, ["fork"])
    base = store.resolve(up.merge_base, ["fork", "upstream"])
    if (
        base == fork
        or store.git("merge-base", "--is-ancestor", base, fork, check=False).returncode
        != 0
    ):
        # A typo here would turn the whole fork into "changes" of the overlay (a
        # patch for every file) instead of a clear refusal.
        raise OverlayError(
            f"UPSTREAM: fork_upstream_merge_base {base[:12]} is not an ancestor of the fork "
            f"commit {fork[:12]}",
            hint="it is `git merge-base <fork commit> <MLX commit the fork last merged>`; "
            "check the UPSTREAM record",
        )
    upstream = dataclasses.replace(up, commit=fork, merge_base=base, pin=pin)
    doc = fixes.parse(whole.fixes_data.decode("utf-8").removeprefix("\ufeff"))
    if closing_sentence:
        closing_from = "--closing-sentence"
    else:
        inferred = infer_closing_sentence(doc)
        if inferred is None:
            raise OverlayError(
                f"{fixes.FILE_NAME} has no kernels, build or API entry to take the policy's "
                "closing sentence from",
                hint="pass --closing-sentence TEXT",
            )
        closing_sentence, number = inferred
        closing_from = f"entry {number}"
    notes: list[str] = []

    pin_tree = store.tree_of(pin)
    blobs = {
        p: (mode, store.hash_blob(data)) for p, (mode, data) in whole.files.items()
    }
    target = store.edit_tree(pin_tree, blobs)
    at_pin = store.entries(pin_tree, list(blobs))
    differs = {p for p, blob in blobs.items() if _key(at_pin.get(p)) != blob}

    # [carry]: the default globs, less an exclude glob the overlay changes files under,
    # plus every fork change the target does not hold (it keeps the pin's file there).
    exclude = [g for g in DEFAULT_EXCLUDE if not any(glob_match(p, g) for p in differs)]
    dropped: set[str] = set()
    for _round in range(
        8
    ):  # dropping a path can change rename pairing: merge again until stable
        carry = Carry(DEFAULT_INCLUDE, [*exclude, *sorted(dropped)])
        merge = merge_fork_delta(store, base, pin, fork, carry)
        check = [p for p in merge.carried if p not in differs]
        merged, pinned = (
            store.entries(merge.tree, check),
            store.entries(pin_tree, check),
        )
        new = {
            p
            for p in check
            if p in merge.stages or _key(merged.get(p)) != _key(pinned.get(p))
        }
        if not new:
            break
        dropped |= new
    else:
        raise OverlayError("internal: the carried paths did not settle after 8 merges")
    carry = Carry(DEFAULT_INCLUDE, [*exclude, *sorted(dropped)])

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
            resolutions[path], whole_file = split_resolution(auto, whole.files[path][1])
            if not whole_file:
                partial.append(path)
            elif auto is not None and changes_outside_conflicts(
                auto, whole.files[path][1]
            ):
                notes.append(
                    f"{path}: the overlay also changes the lines around a conflict region, so the "
                    "resolution is the whole file and verify reports LAY005; move those changes "
                    "into a patch"
                )
    forked, _carried, uncarried, _conflicts, stale = compute_forked(
        store, base, pin, fork, carry, resolutions
    )
    if stale:
        raise OverlayError(
            f"internal: resolutions for paths that do not conflict: {', '.join(stale)}"
        )

    changes = store.diff_tree(forked, target)
    if any(status == "D" for *_r, status, _p in changes):
        raise OverlayError("internal: the forked layer holds a path the target lacks")
    changed = [path for *_r, path in changes]
    created = {path for _om, _nm, _oo, _no, status, path in changes if status == "A"}
    wanted = store.entries(target, changed)

    paths = {e[3] for e in store.ls_tree(target)}
    bases: dict[str, list[str]] = {}
    for p in paths:
        bases.setdefault(p.rsplit("/", 1)[-1], []).append(p)
    named_by: dict[str, set[int]] = {}
    titles: dict[int, str] = {}
    for e in doc.entries():
        titles.setdefault(e.number, e.title)
        for name in e.files:
            # A resolution's path (patches-rocm/resolved/...) names the resolution, not the
            # file: a patch pointing at that entry would be FIX020.
            cands = fixes.resolve_name(name, paths, bases)
            if len(cands) == 1:
                named_by.setdefault(cands[0], set()).add(e.number)

    groups: dict[tuple[int, ...], list[str]] = {}
    alone: list[str] = []
    for path in changed:
        key = tuple(sorted(named_by.get(path, ())))
        if key:
            groups.setdefault(key, []).append(path)
        else:
            alone.append(path)
    ordered = [(k, groups[k]) for k in sorted(groups)] + [
        ((), [p]) for p in sorted(alone)
    ]

    patches: list[PlannedPatch] = []
    tree = forked
    for index, (key, files) in enumerate(ordered, 1):
        after = store.edit_tree(
            tree, {p: (wanted[p].mode, wanted[p].oid) for p in files}
        )
        diff = tree_diff(store, tree, after)
        subject, description = _message(key, files, titles, created, partial)
        trailers = [("Local-Fix", str(n)) for n in key] + [("Forwarded", "not-needed")]
        data = format_patch(subject, description, trailers, diff, author)
        slug = _slug(
            titles[key[0]]
            if len(key) == 1
            else f"fixes {'-'.join(map(str, key))}"
            if key
            else files[0].rsplit("/", 1)[-1]
        )
        patches.append(
            PlannedPatch(
                f"{index:04d}-{slug}.patch",
                key,
                list(files),
                sorted(set(files) & created),
                data,
            )
        )
        tree = after
    if tree != target:
        raise OverlayError(
            f"internal: the imported series makes tree {tree[:12]}, not the target {target[:12]}"
        )

    manifest_text = render_manifest(
        upstream,
        upstream_url=upstream_url,
        fork_url=fork_url,
        exclude=[*exclude, *sorted(dropped)],
        closing_sentence=closing_sentence,
        architectures=architectures,
    )
    manifest = parse_manifest(manifest_text, MANIFEST_PATH)
    rows = _rows(
        whole, differs, dropped, resolutions, patches, named_by, changed, partial
    )
    uncarried_rest = sorted(set(uncarried) - dropped)
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
        uncarried_rest,
        notes,
    )


def _message(
    key: tuple[int, ...],
    files: list[str],
    titles: dict[int, str],
    created: set[str],
    partial: list[str],
) -> tuple[str, str]:
    """The subject and description of an imported patch."""
    listed = ", ".join(f"`{p}`" for p in files)
    if len(key) == 1:
        subject = titles[key[0]]
        text = (
            f"Imported from a whole-file overlay: the change to {listed} that LOCAL_FIXES.md entry "
            f"{key[0]} describes."
        )
    elif key:
        subject = f"Local fixes {_numbers(key)}: " + ", ".join(
            p.rsplit("/", 1)[-1] for p in files
        )
        text = (
            f"Imported from a whole-file overlay: LOCAL_FIXES.md entries {_numbers(key)} each name "
            f"{listed} ({'; '.join(titles[n] for n in key)}). The whole-file copy does not say which "
            "lines belong to which entry, so one patch carries them all."
        )
    else:
        verb = "Add" if files[0] in created else "Change"
        subject = f"{verb} {files[0]}"
        text = (
            f"Imported from a whole-file overlay: no LOCAL_FIXES.md entry names {listed}, so this patch "
            "has no Local-Fix trailer. Add an entry that says why, and its number here."
        )
    for path in files:
        if path in partial:
            text += (
                f" The fork delta conflicts with the pin in `{path}`: "
                f"patches-rocm/resolved/{path} holds git's merge with the overlay's lines in the conflict "
                "regions; this patch holds what the overlay changes outside them."
            )
    return subject, _wrap(text)


def _rows(
    whole: WholeFile,
    differs: set[str],
    dropped: set[str],
    resolutions: dict[str, bytes],
    patches: list[PlannedPatch],
    named_by: dict[str, set[int]],
    changed: list[str],
    partial: list[str],
) -> list[FileRow]:
    """One row per overlay file, dropped fork change, ignored or skipped name."""
    patch_of = {p: patch for patch in patches for p in patch.files}
    changed_set = set(changed)
    rows = []
    for path in sorted(whole.files):
        entries = tuple(sorted(named_by.get(path, ())))
        patch = patch_of.get(path)
        if path in dropped:
            rows.append(
                FileRow(
                    path,
                    "dropped",
                    "not carried ([carry] exclude)",
                    entries,
                    "the overlay holds the pin's file; the fork's change to it is not carried",
                )
            )
        elif path not in differs:
            rows.append(
                FileRow(path, "unchanged", "the pin's file", entries, "equals the pin")
            )
        elif path in resolutions:
            result = f"patches-rocm/resolved/{path}"
            note = "the fork delta conflicts with the pin here"
            if patch is not None:
                result += f" + {patch.name}"
                note += "; the overlay's changes outside the conflict regions are in the patch"
            rows.append(FileRow(path, "resolution", result, entries, note))
        elif path not in changed_set:
            rows.append(
                FileRow(
                    path,
                    "unchanged",
                    "the forked layer's file",
                    entries,
                    "equals the fork delta carried onto the pin",
                )
            )
        else:
            assert patch is not None
            kind = "created" if path in patch.created else "patch"
            if len(patch.local_fix) > 1:
                note = f"named by entries {_numbers(patch.local_fix)}: one patch for all of them"
            elif not patch.local_fix:
                note = "named by no entry: the patch has no Local-Fix trailer"
            else:
                note = ""
            if kind == "created":
                note = "absent from the fork and the pin" + (
                    f"; {note}" if note else ""
                )
            rows.append(FileRow(path, kind, patch.name, entries, note))
    for path in sorted(dropped - set(whole.files)):
        rows.append(
            FileRow(
                path,
                "dropped",
                "not carried ([carry] exclude)",
                (),
                "the fork changes it; the overlay does not hold it",
            )
        )
    for path in whole.ignored:
        rows.append(
            FileRow(
                path,
                "ignored",
                "not imported",
                (),
                "git ignores it in the overlay directory",
            )
        )
    for name in whole.outside:
        rows.append(
            FileRow(
                name, "skipped", "not imported", (), "not under mlx/ or CMakeLists.txt"
            )
        )
    return rows


def _toml_string(value: str) -> str:
    # JSON string escapes (\", \\, \n, \uXXXX) are valid TOML basic-string escapes.
    return json.dumps(value, ensure_ascii=False)


def _toml_list(values: Sequence[str], indent: str = "") -> str:
    if len(values) <= 2:
        return "[" + ", ".join(_toml_string(v) for v in values) + "]"
    return (
        "[\n"
        + "".join(f"{indent}    {_toml_string(v)},\n" for v in values)
        + f"{indent}]"
    )


def render_manifest(
    upstream: Upstream,
    *,
    upstream_url: str,
    fork_url: str,
    exclude: Sequence[str],
    closing_sentence: str,
    architectures: Sequence[str],
) -> str:
    """The text of ``patches-rocm/overlay.toml`` for an import.

    Args:
        upstream: the record with full SHAs.
        upstream_url, fork_url: the remotes.
        exclude: ``[carry] exclude``.
        closing_sentence: ``[policy] closing-sentence``.
        architectures: ``[backend] architectures``.
    Returns:
        TOML text (comments say where each value came from).
    """
    return f"""\
# overlay manifest (docs/manifest.md), written by `overlay import whole-file` from UPSTREAM.
# Rewritten by `overlay rebase` / `overlay sync` with tomlkit; comments survive.

[upstream]
# ml-explore/mlx; OVERLAY_UPSTREAM_URL overrides the URL (a local mirror works).
url = {_toml_string(upstream_url)}
# The MLX pin (UPSTREAM retargeted_to_mlx_pin).
pin = "{upstream.pin}"

[fork]
# UPSTREAM source and branch; OVERLAY_FORK_URL overrides the URL.
url = {_toml_string(fork_url)}
branch = {_toml_string(upstream.branch)}
commit = "{upstream.commit}"
# UPSTREAM fork_upstream_merge_base; the fork delta is merge-base..commit.
merge-base = "{upstream.merge_base}"

[carry]
include = {_toml_list(DEFAULT_INCLUDE)}
# The default excludes, and each fork change the whole-file overlay did not hold.
exclude = {_toml_list(list(exclude))}

[backend]
cmake-option = "MLX_BUILD_ROCM"
architectures = {_toml_list(list(architectures))}

[policy]
# Every entry of the kernels, build and API sections of LOCAL_FIXES.md ends with this.
closing-sentence = {_toml_string(closing_sentence)}
"""


# --------------------------------------------------------------------------- writing


@dataclasses.dataclass
class Written:
    """What :func:`write_import` did.

    Attributes:
        backup: where ``--force`` moved the previous ``patches-rocm/`` and
            ``LOCAL_FIXES.md`` (relative to the target), or ``None``.
    """

    backup: str | None


def _nonempty_dir(path: str) -> bool:
    try:
        return bool(os.listdir(path))
    except NotADirectoryError:
        return True
    except FileNotFoundError:
        return False


def _stage(tmp: str, plan: ImportPlan) -> None:
    """Write every record of the plan under ``tmp`` as the repository will hold them."""
    pdir = os.path.join(tmp, "patches-rocm")
    os.makedirs(pdir)
    atomic_write(os.path.join(tmp, fixes.FILE_NAME), plan.fixes_data)
    atomic_write(os.path.join(tmp, MANIFEST_PATH), plan.manifest_text.encode("utf-8"))
    atomic_write(
        os.path.join(pdir, "series"),
        "".join(f"{p.name}\n" for p in plan.patches).encode(),
    )
    for patch in plan.patches:
        atomic_write(os.path.join(pdir, patch.name), patch.data)
    for path, data in plan.resolutions.items():
        full = os.path.join(pdir, "resolved", *path.split("/"))
        os.makedirs(os.path.dirname(full), exist_ok=True)
        atomic_write(full, data, mode=0o644)


def _self_check(store: Store, plan: ImportPlan, tmp: str) -> None:
    """Compute the layers from the staged records, as every command will, and compare.

    Raises:
        OverlayError: the patched layer is not the target, a resolution is stale, or a
            refresh would change a patch (a bug: nothing has been written).
    """
    from overlay.refresh import refresh_series

    layers = compute_layers(store, plan.manifest, tmp, stepwise=True)
    problems = []
    if layers.patched != plan.target:
        problems.append(
            f"the patched layer is {layers.patched[:12]}, the target {plan.target[:12]}"
        )
    if layers.stale_resolutions:
        problems.append("stale resolutions " + ", ".join(layers.stale_resolutions))
    drift = [r.patch.name for r in refresh_series(store, layers) if r.changed]
    if drift:
        problems.append("a refresh would rewrite " + ", ".join(drift))
    if problems:
        raise OverlayError(
            "internal: the imported records do not reproduce the overlay: "
            + "; ".join(problems),
            hint="nothing was written; please report this with the overlay directory",
        )


def write_import(
    store: Store, target: str, plan: ImportPlan, *, force: bool = False
) -> Written:
    """Write the plan's records into the repository at ``target``, crash-safe and locked.

    Everything is first written into a temporary directory under ``target/.overlay/``
    and checked there (the layers are computed from it and must give the target tree).
    Then ``LOCAL_FIXES.md`` and ``patches-rocm/`` are renamed into place, the
    directory last: the manifest appears with the complete series or not at all. A
    killed import leaves a temporary directory that the next import removes. The
    records' lock (:func:`overlay.runstate.state_lock`, the one every command that writes records takes) is held throughout.

    Args:
        store: the git store.
        target: the repository to write into.
        plan: from :func:`plan_import`.
        force: move a non-empty ``patches-rocm/`` and a different ``LOCAL_FIXES.md``
            aside to ``.overlay/import-backup-<time>-<random>/`` instead of refusing.
    Returns:
        :class:`Written`.
    Raises:
        OverlayError: ``target`` is not a directory; ``patches-rocm/`` is not empty,
            or ``LOCAL_FIXES.md`` exists with other content, and ``force`` is false;
            the self-check fails (nothing is written; exit 2).
    """
    target = os.path.abspath(target)
    if not os.path.isdir(target):
        raise OverlayError(f"{target}: no such directory")
    pdir, lfix = (
        os.path.join(target, "patches-rocm"),
        os.path.join(target, fixes.FILE_NAME),
    )
    from overlay.runstate import state_lock

    with state_lock(target, "import whole-file"):
        state = os.path.join(target, ".overlay")
        taken = _nonempty_dir(pdir) or os.path.islink(pdir)
        try:
            with open(lfix, "rb") as fh:
                other_fixes = fh.read() != plan.fixes_data
        except FileNotFoundError:
            other_fixes = False
        except OSError:
            other_fixes = True
        if not force and taken:
            raise OverlayError(
                "patches-rocm/ is not empty: the import writes a new one",
                hint="import into a repository without records, or pass --force to move the "
                "present patches-rocm/ aside to .overlay/import-backup-<time>-<random>/",
            )
        if not force and other_fixes:
            raise OverlayError(
                f"{fixes.FILE_NAME} exists with other content: the import carries the overlay's over",
                hint="pass --force to move it aside to .overlay/import-backup-<time>-<random>/",
            )
        for name in os.listdir(state):
            if name.startswith(_TEMP_PREFIX) and name.endswith(_TEMP_SUFFIX):
                shutil.rmtree(
                    os.path.join(state, name), ignore_errors=True
                )  # a killed import's
        tmp = tempfile.mkdtemp(prefix=_TEMP_PREFIX, suffix=_TEMP_SUFFIX, dir=state)
        try:
            _stage(tmp, plan)
            _self_check(store, plan, tmp)
            backup = None
            if taken or other_fixes:
                stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
                backup = tempfile.mkdtemp(prefix=f"import-backup-{stamp}-", dir=state)
                if taken:
                    os.rename(pdir, os.path.join(backup, "patches-rocm"))
                if other_fixes:
                    os.rename(lfix, os.path.join(backup, fixes.FILE_NAME))
            os.replace(os.path.join(tmp, fixes.FILE_NAME), lfix)
            if os.path.isdir(pdir) and not os.path.islink(pdir):
                os.rmdir(
                    pdir
                )  # empty (checked above): the rename below needs the name free
            os.rename(os.path.join(tmp, "patches-rocm"), pdir)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return Written(os.path.relpath(backup, target) if backup else None)


# --------------------------------------------------------------------------- the report


def report_data(
    plan: ImportPlan,
    *,
    directory: str,
    findings: Sequence | None = None,
    backup: str | None = None,
) -> dict:
    """The import report as plain data (text, JSON and Markdown are rendered from it).

    Args:
        plan: the import.
        directory: the overlay directory as the user named it.
        findings: ``overlay verify``'s findings on the written records, or ``None``.
        backup: where ``--force`` moved the previous records.
    Returns:
        ``{directory, upstream, closing_sentence, carry, files, patches, resolutions,
        uncarried, round_trip, findings, summary, counts, backup, notes}``.
    """
    from overlay.render import summary_line

    up = plan.upstream
    counts: dict[str, int] = {}
    for row in plan.rows:
        counts[row.kind] = counts.get(row.kind, 0) + 1
    return {
        "directory": directory,
        "upstream": {
            "source": up.source,
            "branch": up.branch,
            "commit": up.commit,
            "merge_base": up.merge_base,
            "pin": up.pin,
        },
        "closing_sentence": {
            "text": plan.manifest.closing_sentence,
            "from": plan.closing_from,
        },
        "carry": {
            "include": list(plan.manifest.include),
            "exclude": list(plan.manifest.exclude),
        },
        "files": [
            dataclasses.asdict(r) | {"entries": list(r.entries)} for r in plan.rows
        ],
        "patches": [
            {
                "name": p.name,
                "local_fix": list(p.local_fix),
                "files": p.files,
                "created": p.created,
            }
            for p in plan.patches
        ],
        "resolutions": sorted(plan.resolutions),
        "uncarried": plan.uncarried,
        "round_trip": {
            "target": plan.target,
            "forked": plan.forked,
            "patched": plan.patched,
            "equal": plan.patched == plan.target,
        },
        "findings": None if findings is None else [f.as_dict() for f in findings],
        "summary": None if findings is None else summary_line(list(findings)),
        "counts": counts,
        "backup": backup,
        "notes": plan.notes,
    }


def render_text(report: dict) -> str:
    """The report as plain lines for a terminal: one line per file, then the findings."""
    up = report["upstream"]
    out = [
        f"import of {report['directory']}: pin {up['pin'][:12]}, fork {up['commit'][:12]} "
        f"(merge base {up['merge_base'][:12]})",
        f"  closing sentence from {report['closing_sentence']['from']}: {report['closing_sentence']['text']}",
    ]
    width = max((len(r["path"]) for r in report["files"]), default=0)
    for r in report["files"]:
        entries = (
            f"  [entries {', '.join(map(str, r['entries']))}]" if r["entries"] else ""
        )
        note = f"  ({r['note']})" if r["note"] else ""
        out.append(
            f"  {r['path']:<{width}}  {r['kind']:<10} {r['result']}{entries}{note}"
        )
    counts = ", ".join(f"{n} {k}" for k, n in sorted(report["counts"].items()))
    out.append(
        f"{len(report['files'])} file(s): {counts}; {len(report['patches'])} patch(es), "
        f"{len(report['resolutions'])} resolution(s)"
    )
    if report["uncarried"]:
        out.append(
            f"{len(report['uncarried'])} other fork change(s) are outside [carry] (list them under "
            "'Dropped from the vendored set', or verify reports FIX022)"
        )
    rt = report["round_trip"]
    out.append(
        f"round trip: patched {rt['patched'][:12]} {'==' if rt['equal'] else '!='} "
        f"pin + overlay {rt['target'][:12]}"
    )
    for note in report["notes"]:
        out.append(f"note: {note}")
    if report["backup"]:
        out.append(f"the previous records were moved to {report['backup']}")
    if report["findings"] is not None:
        out.append(f"verify: {report['summary']}")
        for f in report["findings"]:
            where = (
                f"{f['path']}:{f['line']}"
                if f.get("line")
                else (f["path"] or "<overlay>")
            )
            out.append(f"  {where}: {f['severity']} {f['code']} {f['message']}")
    return "\n".join(out) + "\n"


def render_markdown(report: dict) -> str:
    """The report as a Markdown section (``.overlay/last-import.md``, a PR body)."""
    return render_template("import_report.md.j2", r=report)


def render(report: dict, fmt: str) -> str:
    """Dispatch on ``fmt``: ``text``, ``json`` or ``markdown``
    (:func:`overlay.templating.render_report`)."""
    return render_report(report, fmt, text=render_text, template="import_report.md.j2")


def import_whole_file(
    store: Store,
    target: str,
    directory: str,
    *,
    force: bool = False,
    upstream_url: str = DEFAULT_UPSTREAM_URL,
    fork_url: str | None = None,
    closing_sentence: str | None = None,
    author: str = DEFAULT_AUTHOR,
) -> dict:
    """``overlay import whole-file``: read, plan, write, verify; the report as data.

    Args:
        store: the git store.
        target: the repository to write into (made an overlay repository).
        directory: the whole-file overlay.
        force, upstream_url, fork_url, closing_sentence, author: see
            :func:`write_import` and :func:`plan_import`.
    Returns:
        :func:`report_data` with ``overlay verify``'s findings on the written records;
        the Markdown report is also written to ``.overlay/last-import.md``.
    Raises:
        OverlayError: as :func:`read_whole_file`, :func:`plan_import` and
            :func:`write_import` (nothing is written then; exit 2).
    """
    from overlay.checks import verify

    whole = read_whole_file(directory)
    if not os.path.isdir(target):
        raise OverlayError(f"{target}: no such directory")
    plan = plan_import(
        store,
        whole,
        upstream_url=upstream_url,
        fork_url=fork_url,
        closing_sentence=closing_sentence,
        author=author,
    )
    written = write_import(store, target, plan, force=force)
    findings = verify(os.path.abspath(target), store).findings
    report = report_data(
        plan, directory=directory, findings=findings, backup=written.backup
    )
    try:
        atomic_write(
            os.path.join(target, REPORT_MD), render_markdown(report).encode("utf-8")
        )
    except OSError:
        pass  # the report is also printed; a read-only .overlay/ costs only the copy
    return report


__all__ = [
    "DEFAULT_UPSTREAM_URL",
    "FileRow",
    "ImportPlan",
    "PlannedPatch",
    "Upstream",
    "WholeFile",
    "fork_url_of",
    "import_whole_file",
    "infer_closing_sentence",
    "parse_upstream",
    "plan_import",
    "read_whole_file",
    "render",
    "render_manifest",
    "report_data",
    "split_resolution",
    "write_import",
]
