"""``overlay record``: the work tree written into its patch file (:func:`record`).

Every check runs before the first write (the layer below unchanged, a change that is
carried, a message, the later patches still applying, the entry naming every touched
file); then the records are written all or nothing: a journal first, then the files,
then the end of the edit (:mod:`overlay.edit.writes`, :mod:`overlay.edit.finish`).
"""

import dataclasses
import os
from typing import TYPE_CHECKING

from overlay import layout
from overlay.edit.finish import (
    complete_interrupted,
    finish_record,
    keep_recorded_layers,
)
from overlay.edit.message import one_line, series_author, title_from, wrap_message
from overlay.edit.session import (
    Session,
    load_session,
    patch_file_name,
    records_locked,
    refuse_during_run,
    where,
)
from overlay.edit.worktree import snapshot
from overlay.edit.writes import (
    Journal,
    save_journal,
    sha256,
)
from overlay.engine import PatchApplyError, apply_series
from overlay.engine.layers import Layers
from overlay.engine.refresh import carry_series, refreshed_bytes
from overlay.engine.results import PatchResult
from overlay.errors import EXIT_FINDINGS, LayerError, OverlayError
from overlay.fs.paths import check_path
from overlay.git.store import Store
from overlay.records import fixes
from overlay.records.manifest import Manifest
from overlay.records.patchfmt import format_patch, tree_diff
from overlay.records.series import (
    Patch,
    parse_patch,
    read_series,
    series_renamed,
    series_text,
    series_with,
)

if TYPE_CHECKING:
    from overlay.workspace import Workspace


class NothingToRecord(OverlayError):
    """The work tree holds no change the patch does not already record (exit 1)."""

    exit_code = EXIT_FINDINGS


@dataclasses.dataclass
class Recorded:
    """What :func:`record` wrote.

    Attributes:
        name: the patch file written.
        new: true when it was added to the series.
        renamed_from: the patch's name before a rename (``--name``), else ``None``.
        after: the series entry it went after (new patch; ``None``: appended or first).
        files: ``(path, added, removed, mode change or "")`` per file the patch changes.
        fix: the ``Local-Fix`` number in the patch.
        entry_created: true when the LOCAL_FIXES.md entry was added by this record.
        forwarded: the ``Forwarded`` value.
        carried: later patches rewritten because they were carried onto the change.
        kept: the work tree stays (``--keep``), now at the recorded patch.
        spare: it became the spare work tree the next edit starts from.
        workdir: the work tree (absolute).
    """

    name: str
    new: bool
    after: str | None
    files: list[tuple[str, int, int, str]]
    fix: int | None
    entry_created: bool
    forwarded: str | None
    carried: list[str]
    kept: bool
    spare: bool
    workdir: str
    renamed_from: str | None = None


@dataclasses.dataclass
class _Message:
    """The message options of ``overlay record`` (``None``: not given)."""

    subject: str | None
    description: str | None
    fix: int | None
    forwarded: str | None
    section: str
    title: str | None
    author: str | None


@dataclasses.dataclass
class _Edit:
    """What the checks learned about the edit being recorded.

    Attributes:
        session: the edit in progress.
        layers: the layers now (stepwise).
        base: the tree the patch is made on.
        first_later: index of the first patch after it in ``layers.patches``.
        old: the patch as it is (``None`` for a new one).
        tree: the work tree as a tree of the store.
        changed: paths the edit changes relative to ``base``.
    """

    session: Session
    layers: Layers
    base: str
    first_later: int
    old: Patch | None
    tree: str
    changed: list[str]


@dataclasses.dataclass
class _Head:
    """The patch file to write, and what its message says.

    Attributes:
        data: the patch file's bytes.
        number: its ``Local-Fix`` (``None``: an existing patch without one, kept so).
        subject, forwarded: its subject and ``Forwarded`` value.
        planned: the new ``LOCAL_FIXES.md`` entry, when one is added.
    """

    data: bytes
    number: int | None
    subject: str
    forwarded: str | None
    planned: "fixes.PlannedEntry | None" = (
        None  # quoted: evaluating it loads the fixes writer
    )


def record(
    ws: "Workspace",
    *,
    subject: str | None = None,
    description: str | None = None,
    fix: int | None = None,
    forwarded: str | None = None,
    section: str = "kernels",
    title: str | None = None,
    author: str | None = None,
    keep: bool = False,
    rename: str | None = None,
) -> Recorded:
    """``overlay record``: write the edit in progress into its patch file.

    For a new patch: ``subject`` and ``description`` (its long prose lines wrapped at
    72 columns, :func:`wrap_message`) are required; ``Local-Fix`` is ``fix`` when given
    (the entry must exist) or a new entry of ``section`` (title: ``title`` or the
    subject without its ``tag:``; body: the description; files: every file the patch
    touches), planned by :func:`overlay.records.fixes.plan_entry` as ``overlay fix
    new`` does; ``Forwarded`` is ``forwarded`` or ``not-needed``. The series line goes
    after the patch the edit was made on.

    For an existing patch: its diff is replaced (every other byte kept, as ``overlay
    refresh`` does), unless one of ``subject``, ``description``, ``fix`` or
    ``forwarded`` is given: then its message is rewritten in the standard form (the
    author and any other trailer kept, notes after ``---`` dropped).

    Args:
        ws: the workspace: its root, store, manifest and its layers with each patch's
            tree (:meth:`Workspace.layers`); the manifest and layers are read again on
            their next use after the record (:meth:`Workspace.forget_records`).
        subject, description: the patch's message.
        fix: an existing ``LOCAL_FIXES.md`` entry number.
        forwarded: the ``Forwarded:`` value.
        section: the section of a new entry (``kernels``, ``build``, ``api``, ``retarget``).
        title: a new entry's title.
        author: ``Name <email>`` for a new patch (default: the author of the last
            patch of the series, else overlay's).
        keep: keep the work tree (at the recorded patch) for another round.
        rename: the patch's new name (``--name``; ``.patch`` added): the file and
            its series line take it in the same all-or-nothing write.
    Returns:
        :class:`Recorded`.
    Raises:
        OverlayError: no edit in progress, a rebase or sync in progress, the records
            changed since ``overlay edit``, a missing or bad option value, an unknown
            entry, a changed path the manifest does not carry (exit 2).
        NothingToRecord: the work tree holds no change (exit 1).
        LayerError: a later patch conflicts with the change (exit 1); nothing is written.
        ManifestError, GitError, OfflineMiss: see :meth:`Workspace.layers` (exit 2).
    """
    # The manifest first: a bad one is refused before anything else.
    root, store, manifest = ws.root, ws.store, ws.manifest
    with records_locked(root, "record"), store.reading():
        # the CLI has said so; an API caller too
        if complete_interrupted(root, store) is not None:
            ws.forget_records()  # that record wrote them
            manifest = ws.manifest
        session = _session_to_record(root)
        new_name = _new_name(root, session, rename)
        name = new_name or session.name
        layers = ws.layers(stepwise=True)
        edit = _check_edit(store, manifest, root, session, layers)
        diff = tree_diff(store, edit.base, edit.tree)
        message = _Message(subject, description, fix, forwarded, section, title, author)
        head = _patch_head(root, manifest, edit, message, diff)
        # The one promise of the format: refresh would write the very same bytes.
        if refreshed_bytes(head.data, diff) != head.data:
            raise OverlayError(
                f"internal: {name} would not be byte-stable under refresh"
            )
        new_patch = parse_patch(
            head.data, name, os.path.join(root, layout.PATCH_DIR, name)
        )
        carried, applied = _carry_later(store, edit)
        if head.planned is None:
            _check_entry_names(
                root, store, edit, head.number, new_patch, given=fix is not None
            )
        if (
            edit.old is not None
            and edit.old.data == head.data
            and not carried
            and new_name is None
        ):
            raise NothingToRecord(
                f"{session.name} already records the work tree {session.directory}: "
                "nothing to record",
                hint="edit files there first, or end the edit with `overlay edit --abort`",
            )
        journal = _journal(root, store, edit, head, carried, keep, name)
        save_journal(root, journal)
        finished = finish_record(root, store, journal)
        ws.forget_records()
        if applied is not None:  # the first patches as they were, then this one
            before = edit.first_later - (edit.old is not None)
            keep_recorded_layers(root, store, edit.layers, before, new_patch, applied)
        after = session.after if session.new else None
        if session.new and after is None and edit.first_later > 0:
            after = layers.patches[edit.first_later - 1].patch.name
        return Recorded(
            name=name,
            new=edit.old is None,
            after=after,
            files=new_patch.file_rows,
            fix=head.number,
            entry_created=head.planned is not None,
            forwarded=head.forwarded,
            carried=[p.name for p, _ in carried],
            kept=keep,
            spare=finished.spare,
            workdir=session.workdir(root),
            renamed_from=edit.old.name if new_name and edit.old else None,
        )


def _new_name(root: str, session: Session, rename: str | None) -> str | None:
    """The patch's new name for ``--name``, ``None`` when it keeps its name.

    Raises:
        OverlayError: a bad name, or one a patch of the series or a file has (exit 2).
    """
    if rename is None:
        return None
    name = patch_file_name(rename)
    if name == session.name:
        return None
    listed = {n for n, _line in read_series(root)}
    if name in listed or os.path.lexists(os.path.join(root, layout.PATCH_DIR, name)):
        raise OverlayError(
            f"{layout.PATCH_DIR}/{name} already exists: {session.name} is not renamed to it",
            hint="choose another name",
        )
    return name


def _session_to_record(root: str) -> Session:
    """The edit in progress; refused when there is none or a run is in progress."""
    session = load_session(root)
    if session is None:
        raise OverlayError(
            "no edit in progress",
            hint="start one with `overlay edit PATCH` or `overlay edit --new NAME`",
        )
    refuse_during_run(root)
    return session


def _check_edit(
    store: Store, manifest: Manifest, root: str, session: Session, layers: Layers
) -> _Edit:
    """The edit against the records now: the layer below and the patch unchanged
    since ``overlay edit``, a change in the work tree, and only carried paths.

    Raises:
        OverlayError: the records changed, or the edit changes a path not carried.
        NothingToRecord: the work tree changes nothing.
    """
    listed = [r.patch.name for r in layers.patches]
    if session.new and session.name in listed:
        raise OverlayError(
            f"{session.name} is in the series already; the records changed since "
            "`overlay edit`",
            hint="throw the edit away with `overlay edit --abort` and start again",
        )
    try:
        base, _start, first_later = where(
            layers, session.name, session.new, session.after
        )
    except OverlayError:
        raise OverlayError(
            f"{session.after or session.name} is no longer in the series; the records "
            "changed since `overlay edit`",
            hint="copy your change out of the work tree, then `overlay edit --abort` "
            "and edit again",
        ) from None
    old = None if session.new else layers.patches[first_later - 1].patch
    if base != session.base or (
        old is not None and sha256(old.data) != session.patch_sha256
    ):
        raise OverlayError(
            f"the layer below {session.name} changed since `overlay edit` (a patch, the "
            "series, a resolution or a pin changed); the edit is not recorded onto other "
            "content",
            hint=f"copy your change out of {session.directory}, then `overlay edit "
            "--abort` and edit again",
        )
    tree = snapshot(store, session.workdir(root), base)
    if tree == base:
        raise NothingToRecord(
            f"the work tree {session.directory} changes nothing on the layer below "
            f"{session.name}" + ("" if session.new else ": the patch would be empty"),
            hint="edit files there first"
            if session.new
            else "a patch is never emptied by record; remove it from patches-rocm/series "
            "yourself if that is what you want, and `overlay edit --abort`",
        )
    changed = [
        check_path(row[5], what="work tree path") for row in store.diff_tree(base, tree)
    ]
    uncarried = [p for p in changed if not manifest.carry(p)]
    if uncarried:
        raise OverlayError(
            f"the edit changes {', '.join(uncarried[:5])}"
            f"{' ...' if len(uncarried) > 5 else ''}, which the manifest does not carry",
            hint="undo that change in the work tree (a build or editor file?), or carry "
            "the path in patches-rocm/overlay.toml",
        )
    return _Edit(session, layers, base, first_later, old, tree, changed)


def _patch_head(
    root: str, manifest: Manifest, edit: _Edit, msg: _Message, diff: bytes
) -> _Head:
    """The patch file: a message in the standard form (a new patch, a patch without
    Local-Fix, or any message option given), else the old message with the new diff.

    Raises:
        OverlayError: ``--fix`` names no entry; a new patch lacks a subject or a
            description; the description is empty.
    """
    lf_path = os.path.join(root, layout.LOCAL_FIXES)
    old = edit.old
    if msg.fix is not None and fixes.load(lf_path).entry(msg.fix) is None:
        raise OverlayError(
            f"--fix {msg.fix}: {layout.LOCAL_FIXES} has no entry {msg.fix}",
            hint="`overlay fix list` lists them; leave --fix out to add a new entry",
        )
    number = (
        msg.fix if msg.fix is not None else (old.local_fix if old is not None else None)
    )
    if old is None and (msg.subject is None or msg.description is None):
        raise OverlayError(
            "a new patch needs a subject and a description",
            hint='give -m "subject" and --description "why" (or run in a terminal for '
            "$EDITOR)",
        )
    given = (msg.subject, msg.description, msg.fix, msg.forwarded)
    if old is not None and number is not None and all(v is None for v in given):
        return _Head(
            refreshed_bytes(old.data, diff), number, old.subject, old.forwarded
        )
    return _new_head(lf_path, manifest, edit, msg, number, diff)


def _new_head(
    lf_path: str,
    manifest: Manifest,
    edit: _Edit,
    msg: _Message,
    number: int | None,
    diff: bytes,
) -> _Head:
    """A message in the standard form: subject, wrapped description, ``Local-Fix`` (a
    new entry planned when there is none), ``Forwarded``, the other trailers kept."""
    old = edit.old
    subject = one_line(
        msg.subject if msg.subject is not None else _old(old).subject, "the subject"
    )
    description = (
        wrap_message(msg.description)
        if msg.description is not None
        else _old(old).description.strip()
    )
    if not description:
        raise OverlayError(
            "the description is empty",
            hint="say why the change is needed (verify: SER006)",
        )
    if msg.forwarded is not None:
        forwarded = one_line(msg.forwarded, "--forwarded")
    else:
        forwarded = old.forwarded if old is not None and old.forwarded else "not-needed"
    planned = None
    if number is None:
        planned = fixes.plan_entry(
            lf_path,
            msg.section,
            msg.title if msg.title is not None else title_from(subject),
            sorted(edit.changed),
            description,
            **fixes.entry_policy(manifest),
        )
        number = planned.number
    trailers: list[tuple[str, str]] = [
        ("Local-Fix", str(number)),
        ("Forwarded", forwarded),
    ]
    for key, values in (old.trailers if old is not None else {}).items():
        if key not in ("Local-Fix", "Forwarded"):
            trailers += [(key, v) for v in values]
    who = (
        msg.author
        or (old.author if old is not None and old.author else None)
        or series_author(edit.layers, os.path.dirname(lf_path))
    )
    data = format_patch(subject, description, trailers, diff, author=who)
    return _Head(data, number, subject, forwarded, planned)


def _old(old: Patch | None) -> Patch:
    """The existing patch, where only an existing one can lack the option."""
    assert old is not None, "a new patch has a subject and a description"
    return old


def _carry_later(
    store: Store, edit: _Edit
) -> tuple[list[tuple[Patch, bytes]], tuple[str, list[PatchResult]] | None]:
    """The later patches on the new tree: exactly as they are, else carried by the
    engine. Returns ``(carried, applied)``: those whose file changes, with their new
    bytes; when none does, ``applied`` (the patched tree, the later ones' results).
    Raises:
        LayerError: a later patch conflicts with the change; nothing is written.
    """
    later = [r.patch for r in edit.layers.patches[edit.first_later :]]
    if not later:
        return [], (edit.tree, [])
    try:
        return [], apply_series(store, edit.tree, later)
    except PatchApplyError:
        pass
    session = edit.session
    try:
        refreshed = carry_series(store, edit.tree, later)
    except LayerError as exc:
        raise LayerError(
            f"{exc.message}; your change to {session.name} would break it, so "
            "nothing was recorded",
            hint=f"change the edit in {session.directory} so the later patch still "
            "applies: record the part of it that the later patch takes, then "
            "`overlay edit` the later patch and make the rest of the change there "
            "(or `overlay edit --abort`)",
        ) from None
    return [(r.patch, r.data) for r in refreshed if r.changed], None


def _check_entry_names(
    root: str,
    store: Store,
    edit: _Edit,
    number: int | None,
    new_patch: Patch,
    *,
    given: bool,
) -> None:
    """A named or kept entry must name every file the patch touches (FIX020);
    ``given``: the entry came from ``--fix`` (the hint then offers leaving it out).

    Raises:
        OverlayError: it does not; nothing is recorded.
    """
    doc = fixes.load(os.path.join(root, layout.LOCAL_FIXES))
    entry = doc.entry(number) if number is not None else None
    if entry is None:
        return
    # A touched path is in the universe and names itself there (resolve_name's first
    # rule): when the entry names each in full, the tree need not be listed.
    if new_patch.touched <= {name.removeprefix("./") for name in entry.files}:
        return
    universe = {row[3] for row in store.ls_tree(edit.tree)} | set(new_patch.deleted)
    named = {c for name in entry.files for c in fixes.resolve_name(name, universe)}
    unnamed = sorted(p for p in new_patch.touched if p not in named)
    if unnamed:
        other = (
            "or leave --fix out so that record adds an entry naming it"
            if given
            else "then run `overlay record` again"
        )
        raise OverlayError(
            f"LOCAL_FIXES.md entry {number} does not name {', '.join(unnamed)}, which "
            f"{edit.session.name} touches (verify: FIX020); nothing was recorded",
            hint=f"name the file in entry {number} of LOCAL_FIXES.md (in backticks), "
            + other,
        )


def _journal(
    root: str,
    store: Store,
    edit: _Edit,
    head: _Head,
    carried: list[tuple[Patch, bytes]],
    keep: bool,
    name: str,
) -> Journal:
    """Everything is checked: the journal of the record, the patch, the carried later
    patches, the new entry and (a new patch) the series, in the order they are written,
    with how the edit ends (:mod:`overlay.edit.writes`). A patch renamed to ``name``
    is written there, its old file removed and its series line renamed."""
    session = edit.session
    planned: list[tuple[str, bytes | None]] = [
        (os.path.join(layout.PATCH_DIR, name), head.data)
    ]
    planned += [(os.path.relpath(p.path, root), data) for p, data in carried]
    if head.planned is not None:
        planned.append(
            (os.path.relpath(head.planned.path, root), head.planned.text.encode())
        )
    if session.new:
        planned.append(
            (
                layout.SERIES,
                series_with(series_text(root), name, session.after).encode(),
            )
        )
    elif name != session.name:
        planned.append((os.path.join(layout.PATCH_DIR, session.name), None))
        planned.append(
            (
                layout.SERIES,
                series_renamed(series_text(root), session.name, name).encode(),
            )
        )
    files = []
    for rel, data in planned:
        try:
            with open(os.path.join(root, rel), "rb") as fh:
                old: bytes | None = fh.read()
        except FileNotFoundError:
            old = None
        if old != data:
            files.append((rel, old, data))
    # The work tree's history at the recorded patch (kept with --keep, or when it
    # changed after a kill): the layer below, then the patch.
    start_commit = store.commit_chain(
        [
            (edit.base, [], "overlay: the layer below the patch"),
            (edit.tree, [0], head.subject),
        ]
    )[-1]
    kept = dataclasses.replace(
        session,
        name=name,
        new=False,
        after=None,
        start=edit.tree,
        patch_sha256=sha256(head.data),
    )
    return Journal(
        name=name,
        files=files,
        directory=session.directory,
        tree=edit.tree,
        keep=keep,
        kept_session=dataclasses.asdict(kept),
        start_commit=start_commit,
    )
