"""The quilt-like loop: ``overlay edit`` prepares a work tree, ``overlay record`` writes the patch.

quilt users know ``quilt new``/``quilt edit``/``quilt refresh``/``quilt header -e``;
here it is two commands (issue 17, item 1):

* :func:`start_edit` makes ``.overlay/edit/<stem>/``, an ordinary git checkout of
  the layer the patch is made on: for a new patch, the patched layer (or the layer
  up to ``--after PATCH``); for an existing patch, the layer below it *with the
  patch applied*, so the user edits the patch's result. The checkout has two
  commits (the layer below, then the patch) so ``git diff`` there shows the edit
  since ``overlay edit`` and ``git diff HEAD~1`` the whole patch. Its objects are
  borrowed from the git store (``objects/info/alternates``): nothing is copied.
* :func:`record` turns the work tree into the patch file, byte-stable exactly as
  ``overlay refresh`` would write it, with ``Local-Fix: N`` (a new entry planned
  by :func:`overlay.fixes.plan_entry`, the code of ``overlay fix new``, or a named
  one) and ``Forwarded:``; a new patch's series line goes after the patch it was
  made on. Patches later in the series are checked on the new tree: exactly when
  they still sit on their recorded pre-images, else carried by the engine's
  merge-ort cherry-pick (:func:`overlay.refresh.carry_series`) and rewritten; a
  conflict refuses the record and writes nothing.

Every check runs before the first write; the files are then written temp +
rename, in the order that leaves the least to repair after a crash (patch files,
``LOCAL_FIXES.md``, ``series`` last), and an error while writing puts back what
was already written. One edit at a time per repository; ``.overlay/edit.json``
says which, and the records' lock (``.overlay/rebase.lock``) keeps two commands from racing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import textwrap
from collections.abc import Iterator

from overlay import fixes
from overlay.engine import PatchApplyError, apply_series
from overlay.errors import EXIT_FINDINGS, LayerError, OverlayError
from overlay.fsutil import atomic_write
from overlay.gitstore import CatFile, Store, run_git
from overlay.layers import Layers, compute_layers
from overlay.manifest import Manifest
from overlay.patchfmt import DEFAULT_AUTHOR, format_patch, tree_diff
from overlay.paths import check_path
from overlay.refresh import carry_series, refreshed_bytes
from overlay.runstate import run_in_progress
from overlay.series import PATCH_DIR, SERIES_PATH, Patch, parse_patch, read_series

EDIT_DIR = os.path.join(".overlay", "edit")
STATE_FILE = os.path.join(".overlay", "edit.json")
_BRANCH = "refs/heads/overlay-edit"
#: A new patch's name: one file name, letters, digits, ``.``, ``_``, ``-`` (quilt's habit).
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class NothingToRecord(OverlayError):
    """The work tree holds no change the patch does not already record (exit 1)."""

    exit_code = EXIT_FINDINGS


@dataclasses.dataclass
class Session:
    """The edit in progress, as ``.overlay/edit.json`` holds it.

    Attributes:
        name: the patch file name (``0012-bounds-check.patch``).
        new: true for ``--new`` (the patch does not exist yet).
        after: for a new patch, the series entry it goes after (``None``: the end).
        base: the tree the patch is made on (the layer below it).
        start: the tree the work tree was checked out at (``base`` for a new patch,
            the patch's result for an existing one).
        patch_sha256: sha256 of the patch file when the edit began (existing patch).
        directory: the work tree, relative to the repository.
    """

    name: str
    new: bool
    after: str | None
    base: str
    start: str
    patch_sha256: str | None
    directory: str

    def workdir(self, root: str) -> str:
        """The work tree's absolute path."""
        return os.path.join(root, self.directory)


@dataclasses.dataclass
class Started:
    """What :func:`start_edit` prepared.

    Attributes:
        session: the edit now in progress.
        workdir: the work tree (absolute).
        below: patches the work tree holds below the edited one (names).
        resumed: true when the same edit was already prepared (nothing was redone).
    """

    session: Session
    workdir: str
    below: list[str]
    resumed: bool = False


@dataclasses.dataclass
class Recorded:
    """What :func:`record` wrote.

    Attributes:
        name: the patch file written.
        new: true when it was added to the series.
        after: the series entry it went after (new patch; ``None``: appended or first).
        files: ``(path, added, removed)`` for each file the patch changes.
        fix: the ``Local-Fix`` number in the patch.
        entry_created: true when the LOCAL_FIXES.md entry was added by this record.
        forwarded: the ``Forwarded`` value.
        carried: later patches rewritten because they were carried onto the change.
        kept: the work tree stays (``--keep``), now at the recorded patch.
        workdir: the work tree (absolute).
    """

    name: str
    new: bool
    after: str | None
    files: list[tuple[str, int, int]]
    fix: int | None
    entry_created: bool
    forwarded: str | None
    carried: list[str]
    kept: bool
    workdir: str


# -- state and lock -----------------------------------------------------------------------


@contextlib.contextmanager
def _locked(root: str, command: str) -> Iterator[None]:
    """Hold the records' lock (:func:`overlay.runstate.state_lock`, the one a rebase,
    ``refresh`` and ``fix new`` take) for the block: ``edit``/``record`` read and write
    the same records, so they must not interleave with those or with each other; a
    second command is refused at once, naming the holder."""
    from overlay.runstate import state_lock

    with state_lock(root, command):
        yield


def load_session(root: str) -> Session | None:
    """The edit in progress at ``root``, or ``None``.

    Args:
        root: overlay repository.
    Returns:
        The :class:`Session` from ``.overlay/edit.json``, or ``None`` when there is none.
    Raises:
        OverlayError: the state file is unreadable or malformed (exit 2); the hint
            names ``overlay edit --abort``.
    """
    path = os.path.join(root, STATE_FILE)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        return Session(**{f.name: data[f.name] for f in dataclasses.fields(Session)})
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        raise OverlayError(
            f"{STATE_FILE} is unreadable or not an overlay edit state",
            hint="throw the edit away with `overlay edit --abort`",
        ) from None


def _save_session(root: str, session: Session) -> None:
    atomic_write(
        os.path.join(root, STATE_FILE),
        (json.dumps(dataclasses.asdict(session), indent=2) + "\n").encode(),
    )


def _refuse_during_run(root: str) -> None:
    kind = run_in_progress(root)
    if kind is not None:
        raise OverlayError(
            f"a {kind} is in progress: patches are not edited or recorded during it",
            hint=f"finish it with `overlay {kind} --continue` (or undo it with "
            f"`overlay {kind} --abort`) first",
        )


# -- positions in the series ----------------------------------------------------------------


def patch_file_name(name: str) -> str:
    """The patch file name for ``--new NAME``: ``NAME`` plus ``.patch`` when it lacks it.

    Raises:
        OverlayError: not one plain file name of letters, digits, ``.``, ``_``, ``-`` (exit 2).
    """
    stem = name[: -len(".patch")] if name.endswith(".patch") else name
    if not _NAME_RE.match(stem) or stem in (".", ".."):
        raise OverlayError(
            f"bad patch name {name!r}",
            hint="use letters, digits, '.', '_' and '-', e.g. 0012-bounds-check",
        )
    return stem + ".patch"


def _stem(name: str) -> str:
    return name[: -len(".patch")] if name.endswith(".patch") else name


def _index(layers: Layers, name: str) -> int:
    names = [r.patch.name for r in layers.patches]
    if name not in names:
        raise OverlayError(
            f"{name} is not in {SERIES_PATH}",
            hint="name a patch of the series (`overlay status` lists them), or use --new NAME",
        )
    return names.index(name)


def _tree_after(layers: Layers, index: int) -> str:
    """The tree after patch ``index`` (``-1``: the layer below the series)."""
    if index < 0:
        return layers.forked
    tree = layers.patches[index].tree
    if tree is None:  # computed without stepwise: a bug of the caller
        raise ValueError("the layers must be computed with stepwise=True")
    return tree


def _where(
    layers: Layers, name: str, new: bool, after: str | None
) -> tuple[str, str, int]:
    """``(base, start, index of the first later patch)`` for an edit of ``name``."""
    if new:
        at = len(layers.patches) - 1 if after is None else _index(layers, after)
        base = _tree_after(layers, at)
        return base, base, at + 1
    at = _index(layers, name)
    return _tree_after(layers, at - 1), _tree_after(layers, at), at + 1


# -- the work tree ----------------------------------------------------------------------------


def _wt_git(
    workdir: str,
    *args: str,
    input: bytes | None = None,
    index: str | None = None,
    check: bool = True,
):
    """git in the work tree's own repository (never the overlay repository's)."""
    env = {"GIT_WORK_TREE": workdir}
    if index is not None:
        env["GIT_INDEX_FILE"] = index
    return run_git(
        list(args),
        git_dir=os.path.join(workdir, ".git"),
        cwd=workdir,
        env=env,
        input=input,
        check=check,
    )


def _make_worktree(
    store: Store, workdir: str, base: str, start: str, subject: str
) -> None:
    """A git checkout of ``start`` at ``workdir`` whose history is base -> start."""
    os.makedirs(os.path.dirname(workdir), exist_ok=True)
    # .overlay/ is ignored by this repository's .gitignore; a repository without that
    # line must not pick the checkout up either.
    ignore = os.path.join(os.path.dirname(workdir), ".gitignore")
    if not os.path.exists(ignore):
        atomic_write(ignore, b"*\n")
    run_git(["init", "-q", workdir])
    alternates = os.path.join(workdir, ".git", "objects", "info", "alternates")
    os.makedirs(os.path.dirname(alternates), exist_ok=True)
    # Borrow the store's objects instead of copying a few thousand files' blobs.
    with open(alternates, "w", encoding="utf-8") as fh:
        fh.write(os.path.join(store.git_dir, "objects") + "\n")
    commits = [store.commit_tree(base, (), "overlay: the layer below the patch")]
    if start != base:
        commits.append(
            store.commit_tree(start, commits, subject or "overlay: the patch")
        )
    _wt_git(workdir, "symbolic-ref", "HEAD", _BRANCH)
    _wt_git(workdir, "update-ref", _BRANCH, commits[-1])
    _wt_git(workdir, "reset", "-q", "--hard", commits[-1])


def _snapshot(store: Store, workdir: str, base: str) -> str:
    """The work tree as a tree in the git store (every file, as ``git add -A`` sees it).

    The user's own index in the work tree is left alone: a copy takes the adds.
    """
    if not os.path.isdir(os.path.join(workdir, ".git")):
        raise OverlayError(
            f"{os.path.basename(workdir)}: the work tree is gone or not a git checkout",
            hint="throw the edit away with `overlay edit --abort` and start again",
        )
    index = os.path.join(workdir, ".git", "overlay-record.index")
    try:
        shutil.copyfile(os.path.join(workdir, ".git", "index"), index)
    except FileNotFoundError:
        pass
    try:
        _wt_git(workdir, "add", "-A", "--", ".", index=index)
        tree = _wt_git(workdir, "write-tree", index=index).stdout.decode().strip()
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(index)
    rows = _wt_git(
        workdir, "diff-tree", "-r", "-z", "--no-renames", base, tree
    ).stdout.split(b"\0")
    changes: dict[str, tuple[str, str] | None] = {}
    with CatFile(os.path.join(workdir, ".git")) as cat:
        for i in range(0, len(rows) - 1, 2):
            meta = rows[i].decode().lstrip(":").split()
            path = check_path(
                rows[i + 1].decode("utf-8", "surrogateescape"), what="work tree path"
            )
            if meta[4] == "D":
                changes[path] = None
                continue
            mode, oid = meta[1], meta[3]
            if mode != "160000" and not store.has_object(oid, "blob"):
                store.hash_blob(
                    cat.read(oid)[1]
                )  # the same bytes give the same name in the store
            changes[path] = (mode, oid)
    result = store.edit_tree(base, changes)
    if result != tree:  # both repositories must agree on every byte
        raise OverlayError(
            f"internal: the work tree's tree {tree[:12]} is {result[:12]} in the git store"
        )
    return result


# -- overlay edit ------------------------------------------------------------------------------


def start_edit(
    root: str,
    store: Store,
    manifest: Manifest,
    *,
    patch: str | None = None,
    new: str | None = None,
    after: str | None = None,
) -> Started:
    """``overlay edit``: prepare the work tree for an existing patch or a new one.

    Args:
        root: overlay repository.
        store: git store.
        manifest: the manifest.
        patch: the existing patch to edit (its file name, ``.patch`` optional).
        new: the name of a new patch (``.patch`` is added when missing).
        after: for a new patch, the series entry it goes after (default: the last).
    Returns:
        :class:`Started` (``resumed`` when the very same edit was already prepared).
    Raises:
        OverlayError: neither or both of ``patch`` and ``new``; a bad or taken name;
            a patch not in the series; another edit in progress; a rebase or sync in
            progress (exit 2).
        LayerError: the layers cannot be computed (exit 1).
    """
    if (patch is None) == (new is None):
        raise OverlayError(
            "give a PATCH of the series to edit, or --new NAME for a new one"
        )
    if after is not None and new is None:
        raise OverlayError(
            "--after goes with --new (an existing patch stays where it is)"
        )
    with _locked(root, "edit"):
        _refuse_during_run(root)
        if new is not None:
            name = patch_file_name(new)
        else:
            assert patch is not None
            name = patch if patch.endswith(".patch") else patch + ".patch"
        if after is not None and not after.endswith(".patch"):
            after = after + ".patch"
        current = load_session(root)
        if current is not None:
            if (
                current.name == name
                and current.new == (new is not None)
                and current.after == after
                and os.path.isdir(current.workdir(root))
            ):
                return Started(current, current.workdir(root), [], resumed=True)
            raise OverlayError(
                f"an edit of {current.name} is in progress in {current.directory}",
                hint="record it with `overlay record`, or throw it away with `overlay edit --abort`",
            )
        listed = [n for n, _ in read_series(root)]
        if new is not None:
            if name in listed or os.path.lexists(os.path.join(root, PATCH_DIR, name)):
                raise OverlayError(
                    f"{PATCH_DIR}/{name} already exists",
                    hint=f"edit it with `overlay edit {name}`, or choose another name",
                )
        layers = compute_layers(store, manifest, root, stepwise=True)
        base, start, first_later = _where(layers, name, new is not None, after)
        subject = ""
        digest = None
        if new is None:
            existing = layers.patches[first_later - 1].patch
            subject, digest = (
                existing.subject,
                hashlib.sha256(existing.data).hexdigest(),
            )
        directory = os.path.join(EDIT_DIR, _stem(name))
        workdir = os.path.join(root, directory)
        if os.path.lexists(workdir):
            shutil.rmtree(workdir)  # a leftover of an edit whose state is gone
        session = Session(
            name=name,
            new=new is not None,
            after=after,
            base=base,
            start=start,
            patch_sha256=digest,
            directory=directory,
        )
        try:
            _make_worktree(store, workdir, base, start, subject)
            _save_session(root, session)
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        below = [
            r.patch.name
            for r in layers.patches[: first_later - (0 if new is not None else 1)]
        ]
        return Started(session, workdir, below)


def abort_edit(root: str) -> Session | None:
    """``overlay edit --abort``: throw the work tree and the edit state away.

    Args:
        root: overlay repository.
    An unreadable state file is removed too: ``--abort`` is the way out of it.

    Returns:
        The session that was thrown away, or ``None`` when there was none (or its
        state could not be read).
    """
    with _locked(root, "edit --abort"):
        try:
            session = load_session(root)
        except OverlayError:
            session = None
        if session is not None:
            shutil.rmtree(session.workdir(root), ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(root, STATE_FILE))
        return session


def changed_files(store: Store, root: str, session: Session) -> list[str]:
    """Paths the work tree changes relative to where it started (``overlay edit`` with
    no argument shows them).

    Args:
        store: git store.
        root: overlay repository.
        session: the edit in progress.
    Returns:
        Sorted paths (empty when the work tree is gone).
    """
    workdir = session.workdir(root)
    if not os.path.isdir(os.path.join(workdir, ".git")):
        return []
    tree = _snapshot(store, workdir, session.base)
    return sorted(row[5] for row in store.diff_tree(session.start, tree))


# -- overlay record ------------------------------------------------------------------------------


def _title_from(subject: str) -> str:
    """An entry title from a subject: ``rocm: bounds-check x`` -> ``Bounds-check x``."""
    title = re.sub(r"^\[[^\]]*\]\s*", "", subject.strip())
    title = re.sub(r"^[\w./-]+:\s+", "", title)
    return title[:1].upper() + title[1:]


def wrap_message(text: str, width: int = 72) -> str:
    """A description with its long prose lines refilled to ``width`` columns (git's
    habit for messages, and how the series' patches are written): a one-line
    ``--description`` becomes a readable paragraph. A paragraph with an indented
    line, a list item or a fence stays exactly as written.

    Args:
        text: the description.
        width: the column to wrap at.
    Returns:
        The text, paragraphs separated by one blank line, no trailing newline.
    """
    out = []
    for para in re.split(r"\n[ \t]*\n", text.strip()):
        lines = para.split("\n")
        verbatim = any(
            ln[:1].isspace() or ln.lstrip().startswith(("- ", "* ", "```"))
            for ln in lines
        )
        if not verbatim and any(len(ln) > width for ln in lines):
            para = textwrap.fill(
                " ".join(para.split()),
                width=width,
                break_long_words=False,
                break_on_hyphens=False,
            )
        out.append(para)
    return "\n\n".join(p for p in out if p.strip())


def _one_line(value: str, what: str) -> str:
    value = " ".join(value.split())
    if not value:
        raise OverlayError(f"{what} is empty")
    return value


def _counts(patch: Patch) -> list[tuple[str, int, int]]:
    return [(c.path, c.added, c.removed) for c in patch.changes]


class _Writes:
    """Files to write together: each temp + rename; an error while writing puts back
    what was already written (a crash in between leaves at worst the earlier files)."""

    def __init__(self) -> None:
        self.items: list[tuple[str, bytes]] = []

    def add(self, path: str, data: bytes) -> None:
        self.items.append((path, data))

    def commit(self) -> None:
        done: list[tuple[str, bytes | None]] = []
        try:
            for path, data in self.items:
                try:
                    with open(path, "rb") as fh:
                        old: bytes | None = fh.read()
                except FileNotFoundError:
                    old = None
                if old == data:
                    continue
                atomic_write(path, data)
                done.append((path, old))
        except BaseException:
            for path, old in reversed(done):
                with contextlib.suppress(OSError):
                    if old is None:
                        os.unlink(path)
                    else:
                        atomic_write(path, old)
            raise


def _series_with(root: str, name: str, after: str | None) -> bytes:
    """``series`` with ``name`` on a new line after ``after`` (the end when ``None``)."""
    path = os.path.join(root, SERIES_PATH)
    try:
        with open(path, "rb") as fh:
            text = fh.read().decode("utf-8")
    except FileNotFoundError:
        text = ""
    nl = "\r\n" if "\r\n" in text else "\n"
    lines = text.splitlines()
    if after is None:
        at = len(lines)
        while at and not lines[at - 1].strip():
            at -= 1  # before trailing blank lines, after the last entry or comment
    else:
        at = next(
            i + 1 for i, ln in enumerate(lines) if ln.split("#", 1)[0].strip() == after
        )
    lines.insert(at, name)
    return (nl.join(lines) + nl).encode("utf-8")


def record(
    root: str,
    store: Store,
    manifest: Manifest,
    *,
    subject: str | None = None,
    description: str | None = None,
    fix: int | None = None,
    forwarded: str | None = None,
    section: str = "kernels",
    title: str | None = None,
    author: str | None = None,
    keep: bool = False,
) -> Recorded:
    """``overlay record``: write the edit in progress into its patch file.

    For a new patch: ``subject`` and ``description`` (its long prose lines wrapped at
    72 columns, :func:`wrap_message`) are required; ``Local-Fix`` is
    ``fix`` when given (the entry must exist) or a new entry of ``section`` (title:
    ``title`` or the subject without its ``tag:``; body: the description; files: every
    file the patch touches), planned by :func:`overlay.fixes.plan_entry` as
    ``overlay fix new`` does; ``Forwarded`` is ``forwarded`` or ``not-needed``. The
    series line goes after the patch the edit was made on.

    For an existing patch: its diff is replaced (every other byte kept, as ``overlay
    refresh`` does), unless one of ``subject``, ``description``, ``fix`` or
    ``forwarded`` is given: then its message is rewritten in the standard form (the
    author and any other trailer kept, notes after ``---`` dropped).

    Args:
        root: overlay repository.
        store: git store.
        manifest: the manifest.
        subject, description: the patch's message.
        fix: an existing ``LOCAL_FIXES.md`` entry number.
        forwarded: the ``Forwarded:`` value.
        section: the section of a new entry (``kernels``, ``build``, ``api``, ``retarget``).
        title: a new entry's title.
        author: ``Name <email>`` for a new patch (default: the author of the last
            patch of the series, else overlay's).
        keep: keep the work tree (at the recorded patch) for another round.
    Returns:
        :class:`Recorded`.
    Raises:
        OverlayError: no edit in progress, a rebase or sync in progress, the records
            changed since ``overlay edit``, a missing or bad option value, an unknown
            entry, a changed path the manifest does not carry (exit 2).
        NothingToRecord: the work tree holds no change (exit 1).
        LayerError: a later patch conflicts with the change (exit 1); nothing is written.
    """
    with _locked(root, "record"):
        session = load_session(root)
        if session is None:
            raise OverlayError(
                "no edit in progress",
                hint="start one with `overlay edit PATCH` or `overlay edit --new NAME`",
            )
        _refuse_during_run(root)
        layers = compute_layers(store, manifest, root, stepwise=True)
        listed = [r.patch.name for r in layers.patches]
        if session.new and session.name in listed:
            raise OverlayError(
                f"{session.name} is in the series already; the records changed since `overlay edit`",
                hint="throw the edit away with `overlay edit --abort` and start again",
            )
        try:
            base, _start, first_later = _where(
                layers, session.name, session.new, session.after
            )
        except OverlayError:
            raise OverlayError(
                f"{session.after or session.name} is no longer in the series; the records "
                "changed since `overlay edit`",
                hint="copy your change out of the work tree, then `overlay edit --abort` "
                "and edit again",
            ) from None
        old: Patch | None = (
            None if session.new else layers.patches[first_later - 1].patch
        )
        if base != session.base or (
            old is not None
            and hashlib.sha256(old.data).hexdigest() != session.patch_sha256
        ):
            raise OverlayError(
                f"the layer below {session.name} changed since `overlay edit` (a patch, the series, a "
                "resolution or a pin changed); the edit is not recorded onto other content",
                hint=f"copy your change out of {session.directory}, then `overlay edit --abort` and edit again",
            )
        workdir = session.workdir(root)
        tree = _snapshot(store, workdir, base)
        if tree == base:
            raise NothingToRecord(
                f"the work tree {session.directory} changes nothing on the layer below {session.name}"
                + ("" if session.new else ": the patch would be empty"),
                hint="edit files there first"
                if session.new
                else "a patch is never emptied by record; remove it from patches-rocm/series yourself if that is "
                "what you want, and `overlay edit --abort`",
            )
        changed = [row[5] for row in store.diff_tree(base, tree)]
        uncarried = [p for p in changed if not manifest.carry(p)]
        if uncarried:
            raise OverlayError(
                f"the edit changes {', '.join(uncarried[:5])}"
                f"{' ...' if len(uncarried) > 5 else ''}, which the manifest does not carry",
                hint="undo that change in the work tree (a build or editor file?), or carry "
                "the path in patches-rocm/overlay.toml",
            )
        diff = tree_diff(store, base, tree)

        # The message and trailers.
        lf_path = os.path.join(root, fixes.FILE_NAME)
        planned = None
        if fix is not None:
            doc = fixes.load(lf_path)
            entry = doc.entry(fix)
            if entry is None:
                raise OverlayError(
                    f"--fix {fix}: {fixes.FILE_NAME} has no entry {fix}",
                    hint="`overlay fix list` lists them; leave --fix out to add a new entry",
                )
        number = (
            fix if fix is not None else (old.local_fix if old is not None else None)
        )
        rewrite_head = (
            old is None
            or number is None
            or any(v is not None for v in (subject, description, fix, forwarded))
        )
        if old is None and (subject is None or description is None):
            raise OverlayError(
                "a new patch needs a subject and a description",
                hint='give -m "subject" and --description "why" (or run in a terminal for $EDITOR)',
            )
        if rewrite_head:
            subject = _one_line(
                subject if subject is not None else old.subject, "the subject"
            )  # type: ignore[union-attr]
            description = (
                wrap_message(description)
                if description is not None
                else old.description.strip()
            )  # type: ignore[union-attr]
            if not description:
                raise OverlayError(
                    "the description is empty",
                    hint="say why the change is needed (verify: SER006)",
                )
            forwarded = (
                _one_line(forwarded, "--forwarded")
                if forwarded is not None
                else (
                    old.forwarded if old is not None and old.forwarded else "not-needed"
                )
            )
            if number is None:
                planned = fixes.plan_entry(
                    lf_path,
                    section,
                    title if title is not None else _title_from(subject),
                    sorted(changed),
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
                author
                or (old.author if old is not None and old.author else None)
                or _series_author(layers)
            )
            data = format_patch(subject, description, trailers, diff, author=who)
        else:
            assert old is not None
            subject, forwarded = old.subject, old.forwarded
            data = refreshed_bytes(old.data, diff)
        # The one promise of the format: refresh would write the very same bytes.
        if refreshed_bytes(data, diff) != data:
            raise OverlayError(
                f"internal: {session.name} would not be byte-stable under refresh"
            )
        new_patch = parse_patch(
            data, session.name, os.path.join(root, PATCH_DIR, session.name)
        )

        # Later patches on the new tree: exactly, else carried by the engine (or refused).
        later = [r.patch for r in layers.patches[first_later:]]
        carried: list[tuple[Patch, bytes]] = []
        if later:
            try:
                apply_series(store, tree, later)
            except PatchApplyError:
                try:
                    refreshed = carry_series(store, tree, later)
                except LayerError as exc:
                    raise LayerError(
                        f"{exc.message}; your change to {session.name} would break it, so "
                        "nothing was recorded",
                        hint=f"change the edit in {session.directory} so the later patch still "
                        "applies; if that patch must change too, record the rest first, then "
                        "`overlay edit` that patch",
                    ) from None
                carried = [(r.patch, r.data) for r in refreshed if r.changed]

        # Entry coverage: a named or kept entry that does not name a touched file.
        unnamed: list[str] = []
        if planned is None:
            doc = fixes.load(lf_path)
            entry = doc.entry(number) if number is not None else None
            if entry is not None:
                universe = {row[3] for row in store.ls_tree(tree)} | set(
                    new_patch.deleted
                )
                named = {
                    c
                    for name in entry.files
                    for c in fixes.resolve_name(name, universe)
                }
                unnamed = sorted(p for p in new_patch.touched if p not in named)

        if unnamed:
            raise OverlayError(
                f"LOCAL_FIXES.md entry {number} does not name {', '.join(unnamed)}, which "
                f"{session.name} touches (verify: FIX020); nothing was recorded",
                hint=f"name the file in entry {number} (in backticks), or leave --fix out so "
                "that record adds an entry naming it",
            )
        if old is not None and old.data == data and not carried:
            raise NothingToRecord(
                f"{session.name} already records the work tree {session.directory}: "
                "nothing to record",
                hint="edit files there first, or end the edit with `overlay edit --abort`",
            )

        # Everything is checked: write.
        patch_path = os.path.join(root, PATCH_DIR, session.name)
        writes = _Writes()
        writes.add(patch_path, data)
        for patch, new_data in carried:
            writes.add(patch.path, new_data)
        if planned is not None:
            writes.add(planned.path, planned.text.encode("utf-8"))
        if session.new:
            writes.add(
                os.path.join(root, SERIES_PATH),
                _series_with(root, session.name, session.after),
            )
        writes.commit()
        after = session.after if session.new else None
        if session.new and after is None and first_later > 0:
            after = layers.patches[first_later - 1].patch.name

        if keep:
            start_commit = store.commit_tree(
                tree,
                [store.commit_tree(base, (), "overlay: the layer below the patch")],
                subject,
            )
            _wt_git(workdir, "update-ref", _BRANCH, start_commit)
            _wt_git(workdir, "reset", "-q", "--mixed", start_commit)
            session = dataclasses.replace(
                session,
                new=False,
                after=None,
                start=tree,
                patch_sha256=hashlib.sha256(data).hexdigest(),
            )
            _save_session(root, session)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(root, STATE_FILE))
        return Recorded(
            name=session.name,
            new=old is None,
            after=after,
            files=_counts(new_patch),
            fix=number,
            entry_created=planned is not None,
            forwarded=forwarded,
            carried=[p.name for p, _ in carried],
            kept=keep,
            workdir=workdir,
        )


def _series_author(layers: Layers) -> str:
    """The author of the last patch of the series (a team writes as one), else overlay's."""
    for result in reversed(layers.patches):
        if result.patch.author:
            return result.patch.author
    return DEFAULT_AUTHOR


__all__ = [
    "EDIT_DIR",
    "STATE_FILE",
    "NothingToRecord",
    "Recorded",
    "Session",
    "Started",
    "abort_edit",
    "changed_files",
    "load_session",
    "patch_file_name",
    "record",
    "start_edit",
    "wrap_message",
]
