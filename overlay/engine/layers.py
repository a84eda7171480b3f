"""The three layers as git tree objects (docs/design.md §5).

* ``pin``: the tree of the MLX pin.
* ``forked``: the fork delta (``merge-base..fork``, carried paths only) merged
  onto ``pin`` by ``git merge-tree``, the recorded resolutions on its conflicted
  paths (:mod:`overlay.engine.forked`).
* ``patched``: the series applied in order onto ``forked`` by the engine
  (:mod:`overlay.engine`): each patch on its exact recorded pre-image, with its
  recorded post-image as the result. No fuzz, no offset, no silent 3-way.

Same inputs, same tree SHA: the synthetic commits the merge runs on have a
fixed identity and date. git does all merging and applying.
"""

import json
from collections.abc import Sequence
from typing import NamedTuple

from overlay.digests import sha256
from overlay.engine.forked import (
    Conflict,
    compute_forked,
    conflicts_from_json,
    conflicts_json,
)
from overlay.engine.results import PatchResult
from overlay.fs.paths import Carry
from overlay.git.store import EMPTY_TREE, Store
from overlay.records.manifest import Manifest
from overlay.records.resolutions import read_resolutions
from overlay.records.series import Patch, load_series, patch_digest

LAYERS = ("pin", "forked", "patched")


class Layers(NamedTuple):
    """The computed layers and what was learned computing them.

    Attributes:
        pin, forked, patched: tree SHAs (``patched`` is the overlay's identity).
        carried_changes: fork-delta paths carried onto the pin (sorted).
        dropped_changes: fork-delta paths the manifest does not carry (sorted).
        conflicts: carried paths that conflicted (all resolved when this object exists).
        stale_resolutions: ``resolved/`` paths that no longer conflict.
        patches: one :class:`PatchResult` per series entry.
        below: the layer cache's digest of everything below the series (commits,
            carry globs, resolutions; :func:`keep_layers` keys another series on the
            same layers below by it); ``""`` when not computed by
            :func:`compute_layers`.
    """

    pin: str
    forked: str
    patched: str
    carried_changes: list[str]
    dropped_changes: list[str]
    conflicts: list[Conflict]
    stale_resolutions: list[str]
    patches: list[PatchResult]
    below: str = ""

    def tree(self, layer: str) -> str:
        """The tree SHA of ``layer`` (``pin``, ``forked`` or ``patched``)."""
        return {"pin": self.pin, "forked": self.forked, "patched": self.patched}[layer]


def ensure_commits(
    store: Store,
    manifest: Manifest,
    *,
    pin: str | None = None,
    fork: str | None = None,
    merge_base: str | None = None,
) -> tuple[str, str, str]:
    """Point the store's remotes at the manifest's URLs and make the three commits present.

    Returns:
        ``(pin, fork_commit, merge_base)`` after overrides.
    Raises:
        OfflineMiss, GitError: a commit is missing and cannot be fetched (exit 2).
    """
    store.set_remotes(manifest.remote_urls())
    pin = pin or manifest.pin
    fork = fork or manifest.fork_commit
    merge_base = merge_base or manifest.merge_base
    store.ensure_commit(pin, ["upstream", "fork"])
    store.ensure_commit(fork, ["fork"])
    store.ensure_commit(merge_base, ["fork", "upstream"])
    return pin, fork, merge_base


def compute_layers(
    store: Store,
    manifest: Manifest,
    root: str,
    *,
    pin: str | None = None,
    fork: str | None = None,
    merge_base: str | None = None,
    patches: Sequence[Patch] | None = None,
    resolutions: dict[str, bytes] | None = None,
    stepwise: bool = False,
) -> Layers:
    """All three layers for the overlay at ``root`` (manifest values unless overridden).

    Args:
        store: git store (commits are fetched on demand unless it is offline).
        manifest: the validated manifest.
        root: overlay repository (``patches-rocm/`` lives there).
        pin, fork, merge_base: override the manifest's commits (preview a bump).
        patches: use this series instead of reading ``series``.
        resolutions: use these (path below ``resolved/`` -> bytes) instead of
            reading ``patches-rocm/resolved/`` (a run's backup holds the old ones).
        stepwise: keep each patch's tree (see :func:`overlay.engine.apply.apply_series`).
    Returns:
        :class:`Layers`.
    Raises:
        LayerError: unresolved conflict or a patch that does not apply (exit 1).
        GitError, OfflineMiss, PatchFormatError, UnsafePath: bad input (exit 2).
    """
    with store.lock():
        series = list(load_series(root) if patches is None else patches)
        if resolutions is None:
            resolutions = read_resolutions(root)
        pin = pin or manifest.pin
        fork = fork or manifest.fork_commit
        merge_base = merge_base or manifest.merge_base
        below = _below_key(manifest, pin, fork, merge_base, resolutions)
        key = _series_key(below, series)
        cached = _cache_read(store, key, series, stepwise)
        if cached is not None:
            store.set_remotes(manifest.remote_urls())  # later steps fetch by them
            return cached._replace(below=below)
        pin, fork, merge_base = ensure_commits(
            store, manifest, pin=pin, fork=fork, merge_base=merge_base
        )
        forked, carried, dropped, conflicts, stale = compute_forked(
            store, merge_base, pin, fork, manifest.carry, resolutions
        )
        # the engine's apply: only for layers not in the cache
        from overlay.engine.apply import apply_series

        patched, results = apply_series(store, forked, series, stepwise=stepwise)
        layers = Layers(
            pin=store.tree_of(pin),
            forked=forked,
            patched=patched,
            carried_changes=carried,
            dropped_changes=dropped,
            conflicts=conflicts,
            stale_resolutions=stale,
            patches=results,
            below=below,
        )
        _cache_write(store, key, layers, stepwise)
    return layers


def keep_layers(
    store: Store,
    below: Layers,
    series: Sequence[Patch],
    patched: str,
    results: Sequence[PatchResult],
) -> bool:
    """Keep in the layer cache the layers of another ``series`` on the same layers
    below as ``below`` (the same commits, carry globs and resolutions), with the
    ``patched`` tree and ``results`` the caller proved: what :func:`compute_layers`
    would compute for that series, so that the next command reads them.

    ``overlay record`` calls it: the tree it wrote the patch from is the patch's
    post-image (the records' truth, docs/design.md §5), the patches after it were
    applied onto that tree by the engine, and those before it are unchanged.

    Args:
        store: git store.
        below: layers from :func:`compute_layers` (their ``below`` digest).
        series: the new series, in order, as its files now hold it.
        patched: its patched tree.
        results: one per patch of ``series``.
    Returns:
        ``True`` when kept; ``False`` when ``below`` has no digest, a result is
        not of its patch, or one is unverified (nothing is kept then).
    """
    if not below.below or len(results) != len(series):
        return False
    if any(
        r.patch is not p or r.state == "unverified"
        for r, p in zip(results, series, strict=True)
    ):
        return False
    layers = below._replace(patched=patched, patches=list(results))
    _cache_write(store, _series_key(below.below, series), layers, stepwise=False)
    return True


#: Bump when the layer algorithm changes what a tree would be for the same inputs.
#: (4: the key is two digests, the layers below and then the series.)
LAYER_CACHE_VERSION = 4


def _below_key(
    manifest: Manifest,
    pin: str,
    fork: str,
    merge_base: str,
    resolutions: dict[str, bytes],
) -> str:
    """sha256 over everything the layers below the series depend on: commits, carry
    globs, resolutions (their paths and bytes)."""
    h = sha256(
        json.dumps(
            [
                LAYER_CACHE_VERSION,
                pin,
                fork,
                merge_base,
                manifest.include,
                manifest.exclude,
            ]
        ).encode()
    )
    for path, data in sorted(resolutions.items()):
        h.update(b"R" + path.encode() + b"\0" + sha256(data).digest())
    return h.hexdigest()


def _series_key(below: str, series: Sequence[Patch]) -> str:
    """The layer cache's key: sha256 over :func:`_below_key`'s digest and each patch's
    name and bytes, in order."""
    h = sha256(below.encode())
    for patch in series:
        h.update(b"P" + patch.name.encode() + b"\0" + patch_digest(patch.data))
    return h.hexdigest()


#: The store's directory of computed layers (:meth:`Store.cache_read`).
LAYER_CACHE = "overlay-layers"


def _cache_read(
    store: Store, key: str, series: Sequence[Patch], stepwise: bool
) -> Layers | None:
    """The cached layers for ``key``, or ``None`` (absent, unreadable, or its trees pruned)."""
    rec = store.cache_read(LAYER_CACHE, key)
    if rec is None:
        return None
    if (stepwise and not rec.get("stepwise")) or len(rec.get("patches", [])) != len(
        series
    ):
        return None
    if not store.has_object(rec["patched"], "tree"):
        return None
    return Layers(
        pin=rec["pin"],
        forked=rec["forked"],
        patched=rec["patched"],
        carried_changes=rec["carried"],
        dropped_changes=rec["dropped"],
        conflicts=conflicts_from_json(rec["conflicts"]),
        stale_resolutions=rec["stale"],
        patches=[
            PatchResult(p, r["state"], r["tree"])
            for p, r in zip(
                series, rec["patches"], strict=True
            )  # lengths checked above
        ],
    )


def _cache_write(store: Store, key: str, layers: Layers, stepwise: bool) -> None:
    if any(r.state == "unverified" for r in layers.patches):
        # It depends on what the store lacks, which the key does not hold: a missing
        # blob fetched later makes the same patch bytes verifiable (or refused).
        return
    rec = {
        "pin": layers.pin,
        "forked": layers.forked,
        "patched": layers.patched,
        "carried": layers.carried_changes,
        "dropped": layers.dropped_changes,
        "conflicts": conflicts_json(layers.conflicts),
        "stale": layers.stale_resolutions,
        "stepwise": stepwise,
        "patches": [{"state": r.state, "tree": r.tree} for r in layers.patches],
    }
    store.cache_write(LAYER_CACHE, key, rec)


__all__ = [
    "Carry",
    "EMPTY_TREE",
    "LAYERS",
    "Layers",
    "PatchResult",
    "compute_layers",
    "ensure_commits",
    "keep_layers",
]
