"""What ``overlay status`` says, as data: where the remotes point, how each export stands.

The command renders these; the verdicts (which URL is an override, whether an
export is up to date, stale, half written or edited by hand) are decided here.
"""

import glob
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from overlay import layout
from overlay.export import edited_files, read_stamp, unsafe_tree_links
from overlay.export.stamp import stray_files

if TYPE_CHECKING:
    from overlay.git.store import Store
    from overlay.records.manifest import Manifest

#: The environment variable that overrides each remote's URL.
URL_OVERRIDES = {"upstream": "OVERLAY_UPSTREAM_URL", "fork": "OVERLAY_FORK_URL"}


class Remote(NamedTuple):
    """One remote: its URL and the variable that overrode the manifest's, if any."""

    name: str
    url: str
    override: str | None


def remotes(manifest: "Manifest") -> dict[str, Remote]:
    """``{"upstream": Remote, "fork": Remote}``: the URLs the store fetches from, each
    with the environment variable that replaced the manifest's URL (``None`` when none)."""
    urls = manifest.remote_urls()
    declared = {"upstream": manifest.upstream_url, "fork": manifest.fork_url}
    return {
        name: Remote(
            name,
            urls[name],
            URL_OVERRIDES[name] if urls[name] != declared[name] else None,
        )
        for name in ("upstream", "fork")
    }


class ExportState(NamedTuple):
    """How one export directory stands against the patched layer.

    Attributes:
        dest: the export directory.
        state: ``"no stamp"`` (never exported), ``"interrupted"`` (an export was
            cut short), ``"stale"`` (another tree than the layer), ``"edited"`` (the
            layer's tree, with files edited or deleted by hand since, or files no
            export wrote) or ``"up to date"``.
        tree: the tree the stamp names (the interrupted export's, when interrupted;
            ``None`` without a stamp).
        files: how many files the stamp lists (0 without a stamp or when interrupted).
        edited: files edited by hand since the export (see
            :func:`overlay.export.edited_files`).
        strays: files DEST holds that no export wrote (see
            :func:`overlay.export.stamp.stray_files`), as ``export`` names them; empty
            without a finished export.
    """

    dest: str
    state: str
    tree: str | None
    files: int
    edited: list[str]
    strays: list[str]


def unsafe_links_added(store: "Store", forked: str, patched: str) -> list[str]:
    """The symlinks the series makes that point out of the tree, in words: the one
    check of ``overlay export`` and ``verify``'s SER016 (:func:`overlay.fs.paths.unsafe_links`);
    a link already unsafe in the forked layer is not the series' doing.

    Args:
        store: git store.
        forked: the layer below the series.
        patched: the patched layer.
    Returns:
        One line per link (``symlink 'mlx/evil' -> '/etc': absolute target``), in
        path order; empty when there is none.
    """
    if patched == forked:
        return []
    below = unsafe_tree_links(store, forked)
    return [
        exc.message.replace("refusing symlink", "symlink", 1)
        for path, exc in unsafe_tree_links(store, patched).items()
        if path not in below
    ]


def export_dirs(root: str, dests: Sequence[str]) -> list[str]:
    """``dests`` when given, else the repository's ``build/*/src``, sorted."""
    return list(dests) or sorted(glob.glob(layout.under(root, layout.EXPORTS_GLOB)))


def export_state(dest: str, store: "Store", patched: str) -> ExportState:
    """The verdict on the export in ``dest`` against the patched layer ``patched``.

    Raises:
        OverlayError: the stamp is unreadable (exit 2).
    """
    stamp = read_stamp(dest)
    if stamp is None:
        return ExportState(dest, "no stamp", None, 0, [], [])
    edited = edited_files(dest, stamp, store=store, tree=patched)
    if stamp.get("pending"):
        return ExportState(dest, "interrupted", stamp["pending"]["tree"], 0, edited, [])
    # The files no export wrote, as `export` names them: a build of DEST builds them.
    strays = stray_files(dest, stamp["files"])
    if stamp["tree"] != patched:
        state = "stale"
    else:
        state = "edited" if edited or strays else "up to date"
    return ExportState(dest, state, stamp["tree"], len(stamp["files"]), edited, strays)
