"""The fix-removed column of an A/B run: the overlay built with one patch left out.

``overlay suite ab NAME --without PATCH`` computes the layers with ``PATCH`` removed
from the series, builds that tree (:func:`overlay.build.build`, suite children
included) under ``build/without-<patch stem>/``, and runs the suite's child from
there as the "fix removed" column (seed 000: run the test without the fix and say
how often it failed).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from overlay import layout
from overlay.engine import PatchApplyError
from overlay.engine.layers import Layers
from overlay.errors import EXIT_USAGE, OverlayError
from overlay.records.series import load_series

if TYPE_CHECKING:
    from overlay.workspace import Workspace

#: ``(layers, build_root) -> child_dir``: builds the tree and returns where its children are.
Builder = Callable[[Layers, str], str]


def without_dir(root: str, patch: str) -> str:
    """``<root>/build/without-<patch stem>``: where the fix-removed tree is built."""
    stem = patch[: -len(".patch")] if patch.endswith(".patch") else patch
    return layout.under(root, f"{layout.BUILD_DIR}/without-{stem}")


def layers_without(ws: Workspace, patch: str) -> Layers:
    """The layers of the workspace's overlay with ``patch`` left out of the series, each
    patch's tree kept (:meth:`Workspace.layers` of the rest of the series).

    Raises:
        ManifestError: there is no overlay repository (exit 2).
        OverlayError: ``patch`` is not in the series (exit 2).
        PatchApplyError: a later patch needs the one left out (exit 2, a usage error:
            the message names it, the hint the comparisons that work).
    """
    series = load_series(ws.root)
    names = [p.name for p in series]
    if patch not in names:
        raise OverlayError(
            f"{patch} is not in {layout.SERIES}", hint="names: " + ", ".join(names)
        )
    kept = [p for p in series if p.name != patch]
    try:
        return ws.layers(series=kept, stepwise=True)
    except PatchApplyError as exc:
        raise _needs_the_patch(exc, patch) from None


def _needs_the_patch(exc: PatchApplyError, patch: str) -> PatchApplyError:
    """``exc`` (a later patch that does not apply without ``patch``) as a usage error
    whose hint names the comparisons that work; the series itself is fine."""
    err = PatchApplyError(
        exc.patch,
        exc.file,
        exc.hunk,
        f"{exc.reason} (it depends on {patch}, left out)",
        hint=f"{exc.patch} depends on {patch}, so the series cannot drop {patch} "
        "alone (--without takes one patch); compare against the fork's layer, no "
        "local fix at all: `overlay suite ab NAME --without-layer forked` (`overlay "
        "suite build --layer forked`), or give a fix-removed child with "
        "--without-child. The series is fine: no refresh or rebase is needed",
    )
    err.exit_code = EXIT_USAGE
    return err


def layers_forked(ws: Workspace) -> Layers:
    """The layers of the workspace's overlay with no patch at all: ``patched`` is the
    fork's layer (each patch's tree kept, none).

    Raises:
        ManifestError, GitError, OfflineMiss, LayerError: see :meth:`Workspace.layers`.
    """
    return ws.layers(empty_series=True, stepwise=True)


def real_builder(ws: Workspace, backend: str, arch: str | None = None) -> Builder:
    """A :data:`Builder` that runs :func:`overlay.build.build` and returns its suite
    children dir.

    Args:
        ws: the command's workspace: its store (``--git-dir``, ``--offline``) holds the
            layers' objects, and nothing else may be fetched; its manifest gives the
            CMake option.
        backend: ``rocm``, ``cpu`` or ``cuda``.
        arch: GPU architectures (default: the manifest's).
    Raises (when called):
        ToolchainError: no toolchain for ``backend`` (exit 2).
        OverlayError: the fix-removed tree did not build (exit 1).
    """

    def build(layers: Layers, build_root: str) -> str:
        # the build package: only the real builder; the race lab uses layers_without
        from overlay import build as _build

        toolchain = _build.find_toolchain(backend, None, repo_root=ws.root)
        options = _build.BuildOptions(
            backend, toolchain, arch=arch, build_root=build_root
        )
        result = _build.build(ws, options, layers=layers)
        if not result.ok:
            raise OverlayError(
                f"the tree without the patch does not build; log: {result.log}",
                exit_code=1,
            )
        return os.path.join(
            build_root, backend, layout.BACKEND_SUITES
        )  # where build puts them

    return build


def build_without(ws: Workspace, patch: str, builder: Builder) -> str:
    """Build the overlay without ``patch``; return the directory holding its suite children.

    Args:
        ws: the workspace (:func:`layers_without`).
        patch: a name listed in ``patches-rocm/series``.
        builder: builds the given layers under a build root (see :func:`real_builder`).
    Returns:
        The fix-removed build's child directory, under :func:`without_dir`.
    Raises:
        OverlayError, PatchApplyError: see :func:`layers_without`; what ``builder``
            raises.
    """
    layers = layers_without(ws, patch)
    return builder(layers, without_dir(ws.root, patch))


def build_forked(ws: Workspace, builder: Builder) -> str:
    """Build the fork's layer (the series left out); return the directory holding its
    suite children.

    The tree is built under ``<root>/build/without-forked`` (``overlay suite ab
    --without-layer forked``).

    Raises:
        see :func:`layers_forked`; what ``builder`` raises.
    """
    return builder(layers_forked(ws), without_dir(ws.root, "forked"))
