"""The patch engine: the one place patches meet trees.

One invariant: **a patch records the exact blobs it was made from and produces,
and the engine never places a hunk anywhere else.**

* :func:`apply_series` applies the series at the current layer. A patch applies
  only where every path it touches holds the pre-image blob recorded in its
  ``index`` line, and the result must hold the recorded post-image blob. git does
  the applying (``git apply --cached`` on a private index); anything else is a
  :class:`PatchApplyError` naming the patch, the path and both blob names. A patch
  without recorded blobs (made elsewhere, abbreviated ``index`` lines) applies only
  at its stated lines: an offset is refused, never reported as a success.
* :func:`carry_patch` carries one patch onto a new base (rebase, sync, refresh).
  A patch whose touched blobs are unchanged on the new base is applied exactly.
  Otherwise it is a cherry-pick by merge-ort: ``git merge-tree`` with base = the
  tree the patch was made on, ours = the new tree, theirs = the tree it produced.
  merge-ort follows renames and names modify/delete, add/add, rename/delete,
  file/directory and submodule conflicts with git's own types. "Already
  upstream" means only that the cherry-pick came out empty.

Every git child runs with a private index and a working directory of ours
(:mod:`overlay.git.store`); nothing is written outside the git store.

The engine's parts: :mod:`overlay.engine.apply` (the series apply and the carry
onto a new base), :mod:`overlay.engine.records` (the records checked without git),
:mod:`overlay.engine.gitapply` (``git apply`` and :class:`PatchApplyError`),
:mod:`overlay.engine.chain` (the stepwise apply as one chain of copies),
:mod:`overlay.engine.layers` (the three layers, kept in the store, and each patch's
result), :mod:`overlay.engine.forked` (the fork delta merged onto the pin, the
resolutions on its conflicts). This package imports each name from its module when first used
(:mod:`overlay.lazy`): a command whose layers are in the cache loads no apply.
"""

from typing import TYPE_CHECKING

from overlay.lazy import attach

if TYPE_CHECKING:
    from overlay.engine.apply import (
        Carried,
        apply_series,
        apply_text,
        carry_patch,
        exact_prefix,
        upstream_commit,
    )
    from overlay.engine.gitapply import PatchApplyError
    from overlay.engine.made import CarryError, made_on
    from overlay.engine.records import postimage_mismatches, preimage_mismatches
    from overlay.engine.results import PatchResult

# Each name is imported from its module when first used (overlay.lazy).
__getattr__, __dir__ = attach(
    __name__,
    {
        "Carried": "apply",
        "apply_series": "apply",
        "apply_text": "apply",
        "carry_patch": "apply",
        "exact_prefix": "apply",
        "upstream_commit": "apply",
        "PatchApplyError": "gitapply",
        "PatchResult": "results",
        "CarryError": "made",
        "made_on": "made",
        "postimage_mismatches": "records",
        "preimage_mismatches": "records",
    },
)

__all__ = [
    "Carried",
    "CarryError",
    "exact_prefix",
    "PatchApplyError",
    "PatchResult",
    "apply_series",
    "apply_text",
    "carry_patch",
    "made_on",
    "postimage_mismatches",
    "preimage_mismatches",
    "upstream_commit",
]
