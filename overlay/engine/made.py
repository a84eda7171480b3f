"""The trees a patch was made on and produced, rebuilt from its records (docs/engine.md).

The engine's carry (:func:`overlay.engine.carry_patch`) cherry-picks a patch by merge-ort
from these two trees when no old layer holds them: the base takes every recorded
pre-image blob, and the result every recorded post-image blob when the store has them
(the truth model: the change *is* pre-image -> post-image, whatever the ``@@`` headers
say), else the text applied exactly on the base, whose result must be the recorded one.
"""

from __future__ import annotations

from overlay.engine.gitapply import git_apply
from overlay.engine.records import oid_matches, resolve_records
from overlay.errors import LayerError
from overlay.git.store import Store, TreeEntry, first_error_line, is_sha
from overlay.records.series import Patch


class CarryError(LayerError):
    """A patch cannot even be merged: the 3-way fallback has nothing to run from (exit 1)."""


def made_on(
    store: Store, patch: Patch, new_tree: str, *, accept_text: bool = False
) -> tuple[str, str]:
    """The tree ``patch`` was made on and the tree it produced, rebuilt from its records.

    Every touched path takes its recorded pre-image blob on top of ``new_tree`` (a
    created path is removed): the base. The tree it produced takes the recorded
    post-image blobs on that base when the store holds every one of them (the truth
    model, docs/engine.md: the patch's change *is* pre-image -> post-image, whatever
    its ``@@`` headers say); otherwise the patch's text is applied exactly there, and
    its result must be the post-image it records.

    Args:
        store: git store.
        patch: the patch (its ``index`` names full, or abbreviations of one blob here).
        new_tree: the tree it is to be carried onto.
        accept_text: the user said the text is right where it disagrees with a record
            the store cannot check (``--accept-text``): its result is taken as it is.
    Returns:
        ``(base_tree, theirs_tree)``.
    Raises:
        CarryError: a pre-image blob is not recorded, or not in the git store (the
            patch was made elsewhere), or the text gives another post-image than the
            one recorded, which the store lacks: the reason names the path and blob.
    """
    patch = resolve_records(store, [patch])[0]
    current = store.entries(new_tree, sorted(patch.touched))
    changes = _recorded_preimages(store, patch, current)
    with store.scratch_index(new_tree) as env:
        base = store.edit_tree_in(env, changes)
        post = _recorded_postimages(store, patch, current)
        if post is not None:
            return base, store.edit_tree_in(env, post)
        proc = git_apply(store, env, [patch])
        if proc.returncode != 0:
            raise CarryError(
                f"patch {patch.name}: does not apply even to its own recorded pre-image: "
                + first_error_line(proc.stderr)
            )
        theirs = store.out("write-tree", env=env)
    if not accept_text:
        _check_text_result(store, patch, theirs)
    return base, theirs


def _recorded_preimages(
    store: Store, patch: Patch, current: dict[str, TreeEntry]
) -> dict[str, tuple[str, str] | None]:
    """The tree changes that put every recorded pre-image of ``patch`` in place over a
    tree whose entries at the touched paths are ``current``.

    Raises:
        CarryError: a pre-image is not recorded in full, or not in the git store.
    """
    changes: dict[str, tuple[str, str] | None] = {}
    for change in patch.changes:
        if change.source is None:
            changes[change.path] = None
            continue
        oid = change.old_oid
        have = current.get(change.source)
        if not oid and have is not None and have.kind == "blob" and not change.hunks:
            oid = have.oid  # a mode-only change or a pure rename: no content recorded
        if not oid or not is_sha(oid):
            raise CarryError(
                f"patch {patch.name}: {change.source}: the 3-way fallback cannot run: the "
                f"pre-image {oid or '(not recorded)'} names no blob of the git store "
                "(an abbreviated `index` line of another clone)",
                hint="apply it where it was made and refresh it there, or take its text "
                "with `overlay refresh --accept-text`",
            )
        if not store.has_object(oid, "blob"):
            raise CarryError(
                f"patch {patch.name}: {change.source}: the 3-way fallback cannot run: pre-image "
                f"blob {oid[:12]} is not in the git store (the patch was made elsewhere)",
                hint="apply it where it was made and refresh it there, or take its text "
                "with `overlay refresh --accept-text`",
            )
        mode = change.old_mode or (have.mode if have is not None else "100644")
        changes[change.source] = (mode, oid)
        if change.rename and change.target:
            changes[change.target] = None
    return changes


def _recorded_postimages(
    store: Store, patch: Patch, current: dict[str, TreeEntry]
) -> dict[str, tuple[str, str] | None] | None:
    """The tree changes that put every recorded post-image of ``patch`` in place over
    its pre-images, or ``None`` when one is not recorded in full or not in the store
    (then only the text can say what the patch produces)."""
    out: dict[str, tuple[str, str] | None] = {}
    wanted: list[str] = []
    for change in patch.changes:
        if change.source and (change.target is None or change.rename):
            out[change.source] = None
        if change.target is None:
            continue
        have = current.get(change.source) if change.source else None
        oid = change.new_oid
        if not oid and not change.hunks and not change.binary:
            oid = change.old_oid or (have.oid if have is not None else None)
        if not oid or not is_sha(oid):
            return None
        old_mode = change.old_mode or (have.mode if have is not None else "100644")
        out[change.target] = (change.new_mode or old_mode, oid)
        wanted.append(oid)
    if store.missing_objects(sorted(set(wanted))):
        return None
    return out


def _check_text_result(store: Store, patch: Patch, theirs: str) -> None:
    """Refuse a text whose result is not the post-image its ``index`` line records
    (the record is not in the store, so the text is all there is, and it disagrees).

    Raises:
        CarryError: naming the path, both blobs and ``--accept-text``.
    """
    got = store.entries(theirs, [c.target for c in patch.changes if c.target])
    for change in patch.changes:
        have = got.get(change.target) if change.target else None
        if have is None or not change.new_oid or oid_matches(change.new_oid, have.oid):
            continue
        raise CarryError(
            f"patch {patch.name}: {change.target}: its text produces blob {have.oid[:12]}, "
            f"its `index` line records {change.new_oid[:12]}, which is not in the git "
            "store: the text and the record disagree and the record cannot be checked",
            hint=f"`overlay refresh --accept-text {patch.name}` takes the text as the "
            "truth; or restore the patch from version control",
        )
