"""One command's view of the overlay: root, git store, manifest, layers, paths.

A :class:`Workspace` is made once per command, from the global options
(``-C``, ``--git-dir``, ``--offline``, ``--debug``), and is the click context
object of the ``overlay`` group and of its ``suite`` and ``import`` subgroups.
Everything in it is found or computed on first use and kept for the rest of the
command:

* :attr:`Workspace.root` -- the overlay repository, found upwards from the start
  directory as git finds its root;
* :attr:`Workspace.manifest` -- ``patches-rocm/overlay.toml``, validated;
* :attr:`Workspace.store` -- the git store; its ``upstream`` and ``fork`` remotes
  point at the manifest's URLs as soon as both are known
  (:meth:`overlay.git.store.Store.set_remotes`, the one place remotes are set);
* :meth:`Workspace.layers` -- the three layers, computed on demand and cached per
  set of options;
* :meth:`Workspace.path` -- a record or state path (:mod:`overlay.layout`) under
  the root.

Domain entry points (the functions a command calls: ``verify``, ``run_ci``,
``build``, ``start_edit``, ``Rebase``...) take the workspace, the way pre-commit passes
its ``Store``, and get the manifest, the store and the layers from it: the manifest
is read once per command and the layers are computed through one cache. They never
build a store of their own; helpers below them may take the store and root.

Importing this module costs nothing: the git store, the manifest and the layers
are imported when first used (start-up is the floor every command pays).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from overlay import layout
from overlay.errors import ManifestError, OverlayError

if TYPE_CHECKING:
    from overlay.engine.layers import Layers
    from overlay.git.store import Store
    from overlay.records.manifest import Manifest
    from overlay.records.series import Patch


class Workspace:
    """The overlay repository, git store, manifest and layers one command works on.

    Args:
        start: where root discovery begins: the current directory, or ``-C DIR``.
        git_dir: the git store (``--git-dir``); ``None`` for the default store.
        offline: never fetch; a missing object is an error (``--offline``).
        debug: show tracebacks for expected errors (``--debug``).

    Raises:
        OverlayError: ``start`` is relative and the current directory is gone (a
            shell left in a work tree that was removed; exit 2).

    Attributes:
        start: ``start``, absolute.
        git_dir, offline, debug: as given.
        started: when the command began (``time.time()``), for interrupt notes.
        suites_toml: the suites file ``overlay suite --suites`` names, or ``None``
            for the repository's (see :attr:`suites_path`).
    """

    def __init__(
        self,
        start: str = ".",
        git_dir: str | None = None,
        offline: bool = False,
        debug: bool = False,
    ):
        try:
            self.start = os.path.abspath(start)
        except FileNotFoundError:  # os.getcwd() of a directory deleted meanwhile
            raise OverlayError(
                "the current directory is gone (removed since the shell entered it)",
                hint="cd into the overlay repository again, or name it with -C DIR",
            ) from None
        self.git_dir = git_dir
        self.offline = offline
        self.debug = debug
        self.started = time.time()
        self.suites_toml: str | None = None
        self._root: str | None = None
        self._manifest: Manifest | None = None
        self._store: Store | None = None
        self._layers: dict[tuple, Layers] = {}

    @classmethod
    def of(cls, root: str, store: Store) -> Workspace:
        """A workspace on a known overlay repository with an open store: the records an
        import has just written, or a test's fixture repository and store.

        Args:
            root: the overlay repository (no search upwards; made absolute).
            store: the git store to use (its ``offline`` and ``git_dir`` are taken).
        Returns:
            The :class:`Workspace`; nothing is read until first used.
        """
        ws = cls(root, git_dir=store.git_dir, offline=store.offline)
        ws._root = ws.start
        ws._store = store
        return ws

    # -- where ------------------------------------------------------------------
    @property
    def root(self) -> str:
        """The overlay repository: the nearest of ``start`` and its parents holding
        ``patches-rocm/overlay.toml`` (found on first use, as git finds its root).

        Raises:
            ManifestError: there is none; the message names where it looked (exit 2).
        """
        if self._root is None:
            # on first use: importing the CLI loads no domain module
            from overlay.checks.locate import find_root

            self._root = find_root(self.start)
        return self._root

    @property
    def found(self) -> str | None:
        """The overlay repository, or ``None`` where there is none (for commands that
        also run outside one, such as ``doctor`` and ``suite``)."""
        try:
            return self.root
        except ManifestError:
            return None

    @property
    def base(self) -> str:
        """The overlay repository when there is one, else the start directory (where
        ``doctor`` and ``suite`` look for their files)."""
        return self.found or self.start

    def path(self, rel: str) -> str:
        """``rel`` (an :mod:`overlay.layout` path) under the repository root.

        Raises:
            ManifestError: there is no repository (see :attr:`root`).
        """
        return layout.under(self.root, rel)

    @property
    def suites_path(self) -> str:
        """The suites file: ``--suites`` when given, else ``patches-rocm/suites/suites.toml``
        under :attr:`base`; absolute."""
        return os.path.abspath(
            self.suites_toml or layout.under(self.base, layout.SUITES_TOML)
        )

    # -- what ---------------------------------------------------------------------
    @property
    def manifest(self) -> Manifest:
        """The validated manifest, read once.

        Raises:
            ManifestError: there is no repository, or the manifest is invalid (exit 2).
        """
        if self._manifest is None:
            # the manifest's reader (tomllib): only a command that reads it
            from overlay.records.manifest import load_manifest

            self._manifest = load_manifest(self.root)
            if self._store is not None:
                self._store.set_remotes(self._manifest.remote_urls())
        return self._manifest

    @property
    def store(self) -> Store:
        """The git store (``--git-dir``, ``--offline``), opened once; its remotes point
        at the manifest's URLs once the manifest is read.

        Raises:
            GitError: the store cannot be created or git is missing (exit 2).
        """
        if self._store is None:
            # the git layer: only a command that uses the store
            from overlay.git.store import Store

            self._store = Store(self.git_dir, offline=self.offline)
            if self._manifest is not None:
                self._store.set_remotes(self._manifest.remote_urls())
        return self._store

    def forget_records(self) -> None:
        """Drop the manifest and the layers read so far: the command has just written
        the records (a completed rebase, a record), so a later use reads them again."""
        self._manifest = None
        self._layers.clear()

    def layers(
        self,
        *,
        pin: str | None = None,
        fork: str | None = None,
        stepwise: bool = False,
        empty_series: bool = False,
        series: Sequence[Patch] | None = None,
    ) -> Layers:
        """The layers, computed on first use for these options and kept.

        Args:
            pin: preview on another MLX commit (a ref resolved against ``upstream``).
            fork: preview with another fork commit (resolved against ``fork``).
            stepwise: keep each patch's tree (see :func:`overlay.engine.apply.apply_series`).
            empty_series: leave the series out (``patched`` is then ``forked``).
            series: the patches to apply, in order, instead of reading ``series``: the
                series as the caller just read it
                (:func:`overlay.records.series.load_series`), so it is not read and parsed a
                second time, or a part of it (the patches that parsed, the series without
                one patch). Layers are kept per name and bytes of these patches.
        Returns:
            :class:`overlay.engine.layers.Layers`.
        Raises:
            ManifestError, GitError, OfflineMiss, LayerError: see
            :func:`overlay.engine.layers.compute_layers`.
        """
        patches = [] if empty_series else series
        key = (pin, fork, stepwise, _series_key(patches))
        if key not in self._layers:
            # layers and the engine: only a command that computes them
            from overlay.engine.layers import compute_layers

            manifest = self.manifest
            store = self.store
            layers = compute_layers(
                store,
                manifest,
                self.root,
                pin=store.resolve(pin, ["upstream"]) if pin is not None else None,
                fork=store.resolve(fork, ["fork"]) if fork is not None else None,
                stepwise=stepwise,
                patches=patches,
            )
            self._layers[key] = layers
            if patches is None:
                # The series read here is the one a caller passing it would have read.
                read = _series_key([r.patch for r in layers.patches])
                self._layers.setdefault((pin, fork, stepwise, read), layers)
        return self._layers[key]


def _series_key(patches: Sequence[Patch] | None) -> tuple | None:
    """What the layers of :meth:`Workspace.layers` depend on in ``patches``: each name
    and its bytes (``None``: the series as read from the repository)."""
    if patches is None:
        return None
    return tuple((p.name, p.data) for p in patches)
