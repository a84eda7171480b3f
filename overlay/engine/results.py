"""How one patch of the series applied: the result :func:`overlay.engine.apply.apply_series`
gives per patch and :mod:`overlay.engine.layers` keeps in its cache, in a module of its
own so that layers read from the cache load no apply."""

from typing import NamedTuple

from overlay.records.series import Patch


class PatchResult(NamedTuple):
    """How one patch of the series applied.

    Attributes:
        patch: the parsed patch.
        state: ``"exact"`` (on its recorded pre-image, its result the recorded
            post-image), ``"unverified"`` (a recorded blob is not in the git store, or
            not recorded at all: applied at its stated lines, its result unchecked;
            SER017), or, from :func:`overlay.engine.apply.carry_patch` only, ``"merged"`` (a clean
            cherry-pick by merge-ort).
        tree: the tree after this patch, or ``None`` when the series was applied in
            one batch (the fast path).
    """

    patch: Patch
    state: str
    tree: str | None = None
