"""Writing an import's records: staged, checked, then renamed into place under the lock."""

import dataclasses
import os
import shutil
import tempfile
import time

from overlay import layout
from overlay.engine.layers import (
    compute_layers,
)
from overlay.engine.refresh import refresh_series
from overlay.errors import OverlayError
from overlay.fs.atomic import counted_kill_point
from overlay.fs.records_lock import state_lock
from overlay.git.store import Store
from overlay.importer.planning import ImportPlan
from overlay.records import fixes
from overlay.records.manifest import write_manifest
from overlay.records.resolutions import write_resolution
from overlay.records.series import series_listing, write_patch, write_series

_TEMP_PREFIX = "import-"
_TEMP_SUFFIX = ".tmp"


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
    os.makedirs(layout.under(tmp, layout.PATCH_DIR))
    fixes.write_fixes(tmp, plan.fixes_data)
    write_manifest(tmp, plan.manifest_text)
    write_series(tmp, series_listing([p.name for p in plan.patches]))
    for patch in plan.patches:
        write_patch(tmp, patch.name, patch.data)
    for path, data in plan.resolutions.items():
        write_resolution(tmp, path, data)


def _staged_files(plan: ImportPlan) -> dict[str, bytes]:
    """What :func:`_stage` writes under ``patches-rocm/``, by path relative to it."""
    files = {
        os.path.relpath(layout.MANIFEST, layout.PATCH_DIR): plan.manifest_text.encode(
            "utf-8"
        ),
        os.path.relpath(layout.SERIES, layout.PATCH_DIR): series_listing(
            [p.name for p in plan.patches]
        ).encode(),
    }
    files.update({p.name: p.data for p in plan.patches})
    resolved = os.path.relpath(layout.RESOLVED_DIR, layout.PATCH_DIR)
    files.update(
        {f"{resolved}/{path}": data for path, data in plan.resolutions.items()}
    )
    return files


def _already_imported(pdir: str, plan: ImportPlan) -> bool:
    """Whether ``patches-rocm/`` holds exactly what this import writes (a killed run
    of it got that far): the re-run then has nothing left to write."""
    if os.path.islink(pdir) or not os.path.isdir(pdir):
        return False
    found: dict[str, bytes] = {}
    for top, _dirs, names in os.walk(pdir):
        for name in names:
            full = os.path.join(top, name)
            if os.path.islink(full) or len(found) > len(plan.patches) + 10_000:
                return False
            with open(full, "rb") as fh:
                found[os.path.relpath(full, pdir).replace(os.sep, "/")] = fh.read()
    return found == _staged_files(plan)


def _self_check(store: Store, plan: ImportPlan, tmp: str) -> None:
    """Compute the layers from the staged records, as every command will, and compare.

    The patched layer must be the plan's target, and differ from the overlay's files
    written over the pin at exactly the paths the plan carried onto the pin (where
    upstream's later lines are kept): any other difference would be a byte of the
    overlay the records lost.

    Raises:
        OverlayError: the patched layer is not the target, differs from the overlay
            elsewhere than at the carried paths, a resolution is stale, or a refresh
            would change a patch (a bug: nothing has been written).
    """
    # Not a Workspace's layers: these are of the staging directory, from the plan's
    # own manifest, before any record exists where the command's workspace looks.
    layers = compute_layers(store, plan.manifest, tmp, stepwise=True)
    problems = []
    if layers.patched != plan.target:
        problems.append(
            f"the patched layer is {layers.patched[:12]}, the target {plan.target[:12]}"
        )
    elsewhere = sorted(
        {path for *_r, path in store.diff_tree(layers.patched, plan.whole)}
        ^ set(plan.carried)
    )
    if elsewhere:
        problems.append(
            "the patched layer and the overlay's files differ at other paths than the "
            "carried ones: " + ", ".join(elsewhere[:5])
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
    records' lock (:func:`overlay.fs.records_lock.state_lock`, the one every command that
    writes records takes) is held throughout.

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
        layout.under(target, layout.PATCH_DIR),
        os.path.join(target, layout.LOCAL_FIXES),
    )
    with state_lock(target, "import whole-file"):
        state = layout.under(target, layout.STATE_DIR)
        for name in os.listdir(state):
            if name.startswith(_TEMP_PREFIX) and name.endswith(_TEMP_SUFFIX):
                shutil.rmtree(
                    os.path.join(state, name), ignore_errors=True
                )  # a killed import's
        taken = _nonempty_dir(pdir) or os.path.islink(pdir)
        try:
            present = fixes.fixes_bytes(target)
            # Something that is not a regular file there is not the overlay's either.
            other_fixes = (
                present != plan.fixes_data
                if present is not None
                else os.path.exists(lfix)
            )
        except OSError:
            other_fixes = True
        if taken and not other_fixes and _already_imported(pdir, plan):
            return Written(None)  # a killed run of this import had written everything
        if not force and taken:
            raise OverlayError(
                "patches-rocm/ is not empty: the import writes a new one",
                hint="import into a repository without records, or pass --force to move the "
                "present patches-rocm/ aside to .overlay/import-backup-<time>-<random>/",
            )
        if not force and other_fixes:
            raise OverlayError(
                f"{layout.LOCAL_FIXES} exists with other content: "
                "the import carries the overlay's over",
                hint="pass --force to move it aside to .overlay/import-backup-<time>-<random>/",
            )
        tmp = tempfile.mkdtemp(prefix=_TEMP_PREFIX, suffix=_TEMP_SUFFIX, dir=state)
        # Write points (OVERLAY_TEST_KILL_AT=import:N kills at the Nth): a kill at any
        # of them is completed by the same import run again (tools/fuzz_kills.py).
        kill = lambda: counted_kill_point("import")  # noqa: E731
        try:
            _stage(tmp, plan)
            _self_check(store, plan, tmp)
            kill()
            backup = None
            if taken or other_fixes:
                stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
                backup = tempfile.mkdtemp(prefix=f"import-backup-{stamp}-", dir=state)
                if taken:
                    os.rename(pdir, layout.under(backup, layout.PATCH_DIR))
                    kill()
                if other_fixes:
                    os.rename(lfix, os.path.join(backup, layout.LOCAL_FIXES))
                    kill()
            os.replace(os.path.join(tmp, layout.LOCAL_FIXES), lfix)
            kill()
            if os.path.isdir(pdir) and not os.path.islink(pdir):
                os.rmdir(
                    pdir
                )  # empty (checked above): the rename below needs the name free
                kill()
            os.rename(layout.under(tmp, layout.PATCH_DIR), pdir)
            kill()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return Written(os.path.relpath(backup, target) if backup else None)
