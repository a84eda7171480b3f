"""The git store: the bare repository holding every object the layers need.

The *git store* is a bare repository (default ``~/.cache/overlay/store.git``)
holding every object the layers need. Its remotes ``upstream`` and ``fork``
come from the manifest; commits are fetched on demand by SHA and kept alive by
refs under ``refs/overlay/keep/``.

How git is run (the sanitized environment, the determinism flags, ``-z``
parsing) lives in :mod:`overlay.git.run`; the ``cat-file --batch`` readers and the
parsing of git's tree output in :mod:`overlay.git.objects`. Both are re-exported
here, so ``from overlay.git.store import Store, TreeEntry, run_git, git_env`` is
the one import a caller needs.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator, Mapping, Sequence

from overlay.checks.locate import default_store_dir
from overlay.digests import sha256
from overlay.errors import GitError
from overlay.fs.atomic import atomic_write, scratch_dir
from overlay.fs.locks import flocked
from overlay.git import objects
from overlay.git.ancestry import RememberedAncestry
from overlay.git.fetch import Fetching
from overlay.git.loose import loose_kind, write_typed
from overlay.git.objects import (
    CatFile,
    DiffRow,
    MergeResult,
    ObjectReader,
    OverBudget,
    TreeEntry,
    parse_diff_tree,
    parse_ls_tree,
    parse_merge_tree,
    read_objects,
    synthetic_commits,
    tree_changes,
)
from overlay.git.run import (
    EMPTY_TREE,
    GIT_FLAGS,
    NULL_OID,
    SYNTHETIC_IDENTITY,
    create_bare_repo,
    first_error_line,
    git_env,
    git_executable,
    is_sha,
    run_git,
    zsplit,
)

__all__ = [
    "EMPTY_TREE",
    "GIT_FLAGS",
    "NULL_OID",
    "SYNTHETIC_IDENTITY",
    "CatFile",
    "MergeResult",
    "Store",
    "TreeEntry",
    "default_store_dir",
    "first_error_line",
    "git_env",
    "git_executable",
    "is_sha",
    "run_git",
    "zsplit",
]


#: The store's directory of tree changes kept for the next command (:meth:`Store.keep_diff`).
DIFF_CACHE = "overlay-diffs"


def _diff_key(old: str, new: str) -> str:
    """The key of the changes between ``old`` and ``new`` in :data:`DIFF_CACHE`."""
    return sha256(f"diff-tree {old} {new}".encode()).hexdigest()


class Store(Fetching, RememberedAncestry):
    """The bare git store holding every object the layers are made of.

    Args:
        git_dir: path of the bare repository; created on first use.
        offline: when true, a missing object raises :class:`OfflineMiss`
            instead of being fetched.
    """

    def __init__(self, git_dir: str | None = None, *, offline: bool = False):
        self.git_dir = os.path.abspath(git_dir or default_store_dir())
        self.offline = offline
        self._remote_urls: dict[str, str] = {}
        self._config_urls: dict[str, str] | None = (
            None  # remote -> URL in the config, read once
        )
        self._known: dict | None = (
            None  # remembered ancestry answers (overlay-ancestry.json)
        )
        self._walks = {}  # commits_beyond's walks of this process
        self._lock_depth = 0
        self._reader: ObjectReader | None = None  # inside reading() only
        if not os.path.isfile(os.path.join(self.git_dir, "HEAD")):
            create_bare_repo(self.git_dir)

    # -- plumbing ---------------------------------------------------------------
    def git(
        self,
        *args: str,
        input: bytes | None = None,
        env: dict[str, str] | None = None,
        check: bool = True,
        pass_fds: Sequence[int] = (),
    ) -> subprocess.CompletedProcess:
        """Run git against the store (see :func:`run_git`)."""
        return run_git(
            args,
            git_dir=self.git_dir,
            input=input,
            env=env,
            check=check,
            pass_fds=pass_fds,
        )

    def out(
        self, *args: str, input: bytes | None = None, env: dict[str, str] | None = None
    ) -> str:
        """Run git against the store and return stripped stdout as text."""
        return (
            self.git(*args, input=input, env=env)
            .stdout.decode("utf-8", "surrogateescape")
            .strip()
        )

    def cat_file(self) -> CatFile:
        """A persistent blob reader on the store (close it, or use ``with``)."""
        return CatFile(self.git_dir)

    @contextlib.contextmanager
    def reading(self) -> Iterator[ObjectReader]:
        """One persistent ``cat-file --batch-command`` answers :meth:`has_object`,
        :meth:`tree_of` and the yielded reader's blob reads in the block (started on the
        first question, stopped when the block ends); re-entrant."""
        if self._reader is not None:
            yield self._reader
            return
        self._reader = ObjectReader(self.git_dir)
        try:
            yield self._reader
        finally:
            self._reader.close()
            self._reader = None

    @property
    def reader(self) -> ObjectReader | None:
        """The reader of the enclosing :meth:`reading` block, or ``None`` outside one."""
        return self._reader

    def read_objects(self, oids: Sequence[str]) -> Iterator[tuple[str, bytes]]:
        """Read many objects known in advance, streamed, with one
        ``git cat-file --batch --buffer`` (:func:`overlay.git.objects.read_objects`).

        Args:
            oids: object names (40 or 64 hex).
        Yields:
            ``(type, content)`` per name, in order.
        Raises:
            GitError: an object is missing.
        """
        return read_objects(self.git_dir, oids)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the store's writer lock (:func:`overlay.fs.atomic.flocked` on
        ``overlay.lock``); re-entrant."""
        if self._lock_depth:
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
            return
        with flocked(os.path.join(self.git_dir, "overlay.lock")):
            self._lock_depth = 1
            try:
                yield
            finally:
                self._lock_depth = 0

    # -- remotes and objects ----------------------------------------------------
    def set_remote(self, name: str, url: str) -> None:
        """Point remote ``name`` at ``url`` for the fetches of this store (the manifest's
        URL, or its override). The store's configuration is written when a fetch
        first needs it (:meth:`point_remotes`): a command that fetches nothing starts
        no git for its remotes.

        Args:
            name: ``"upstream"`` or ``"fork"``.
            url: URL or local path (a mirror works).
        """
        self._remote_urls[name] = url

    def set_remotes(self, urls: Mapping[str, str]) -> None:
        """Point the remotes at ``urls`` (``{"upstream": url, "fork": url}``: a manifest's
        ``remote_urls()``, or :func:`overlay.records.manifest.override_urls`): every remote
        overlay fetches from is set here (see :meth:`set_remote`).
        """
        for name, url in urls.items():
            self.set_remote(name, url)

    def point_remotes(self) -> None:
        """Write the remotes set so far into the store's configuration where it differs
        (``remote.<name>.url``): called by every fetch before git runs. The
        configuration is read once per store, and written only for a remote whose URL
        changed (the manifest's, or an override).

        Raises:
            GitError: the configuration cannot be written (exit 2).
        """
        if self._config_urls is None:
            self._config_urls = self._read_remote_urls()
        for name, url in self._remote_urls.items():
            if self._config_urls.get(name, "") != url:
                with self.lock():
                    self.git("config", f"remote.{name}.url", url)
                self._config_urls[name] = url

    def _read_remote_urls(self) -> dict[str, str]:
        """Every ``remote.<name>.url`` of the store's configuration, from one ``git config``
        (read once per :class:`Store`: a command sets both remotes, often twice, and each
        ``git config --get`` would be a process). The last value of a key wins, as
        with ``--get``."""
        proc = self.git(
            "config", "-z", "--get-regexp", r"^remote\..*\.url$", check=False
        )
        urls = {}
        for rec in zsplit(proc.stdout):
            key, _, value = rec.partition("\n")
            urls[key[len("remote.") : -len(".url")]] = value.strip()
        return urls

    def has_object(self, oid: str, kind: str = "commit") -> bool:
        """True when ``oid`` names an object of type ``kind`` in the store (or one that
        peels to it, as git's ``oid^{kind}``): a loose object of that type from its
        file's header, anything else from git (the run's reader, else ``cat-file -e``)."""
        if loose_kind(self.git_dir, oid) == kind:
            return True
        if self._reader is not None:
            return self._reader.info(f"{oid}^{{{kind}}}") is not None
        return (
            self.git("cat-file", "-e", f"{oid}^{{{kind}}}", check=False).returncode == 0
        )

    def missing_objects(self, oids: Sequence[str]) -> list[str]:
        """The names among ``oids`` the store has no object for, in order
        (:meth:`object_sizes`).

        Args:
            oids: full object names (40 or 64 hex).
        Returns:
            The missing ones; empty when the store has every object.
        """
        sizes = self.object_sizes(oids)
        return [oid for oid, size in zip(oids, sizes, strict=True) if size is None]

    def object_sizes(self, oids: Sequence[str]) -> list[int | None]:
        """The size in bytes of each object of ``oids``, ``None`` for one the store
        lacks, in order.

        Inside :meth:`reading` the reader is asked, one round trip per 500 names
        (:meth:`ObjectReader.sizes`); outside, one ``git cat-file --batch-check``
        answers for all of them.

        Args:
            oids: full object names (40 or 64 hex).
        """
        if not oids:
            return []
        if self._reader is not None:
            return self._reader.sizes(oids)
        proc = self.git(
            "cat-file", "--batch-check", input=("\n".join(oids) + "\n").encode()
        )
        rows = [line.split() for line in proc.stdout.splitlines()]
        return [None if row[1] == b"missing" else int(row[2]) for row in rows]

    def resolve_blobs(self, names: Sequence[str]) -> dict[str, str]:
        """The full name of each abbreviated blob name that names exactly one blob here.

        docs/engine.md, the truth model: an abbreviated ``index`` name (``git
        format-patch`` writes 7 hex by default) is the blob it abbreviates when the
        store holds exactly one blob it can name; a name of no blob, or of several
        (``core.disambiguate=blob``: commits and trees do not count), stays unresolved.
        One ``git cat-file --batch-check`` answers for every name.

        Args:
            names: abbreviated hex names (4 to 39 digits).
        Returns:
            ``{name: full name}`` for the names that resolved; the others are absent.
        """
        if not names:
            return {}
        proc = self.git(
            "-c",
            "core.disambiguate=blob",
            "cat-file",
            "--batch-check=%(objectname) %(objecttype)",
            input=("\n".join(names) + "\n").encode(),
            check=False,
        )
        out = {}
        for name, line in zip(names, proc.stdout.splitlines(), strict=False):
            full, _, kind = line.decode("ascii", "replace").partition(" ")
            if kind == "blob" and full.startswith(name):
                out[name] = full
        return out

    # -- what overlay computed, kept beside the objects -------------------------
    def _record_path(self, kind: str, key: str) -> str:
        return os.path.join(self.git_dir, kind, key[:2], key[2:] + ".json")

    def cache_read(self, kind: str, key: str) -> dict | None:
        """A record overlay kept in the store (:meth:`cache_write`), or ``None`` when it
        is absent or unreadable (the caller then computes it again).

        Args:
            kind: the directory of the store it lives in (``overlay-layers``, ...).
            key: 64-hex key of everything the record depends on.
        """
        try:
            with open(self._record_path(kind, key), encoding="utf-8") as fh:
                record = json.load(fh)
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None

    def cache_write(self, kind: str, key: str, record: dict) -> None:
        """Keep ``record`` (JSON) under ``<store>/<kind>/<key[:2]>/<key[2:]>.json``,
        replaced atomically; a failure is ignored (a record that cannot be kept only
        costs time)."""
        path = self._record_path(kind, key)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            atomic_write(path, json.dumps(record).encode(), durable=False)
        except OSError:
            pass

    # -- trees ------------------------------------------------------------------
    def tree_of(self, commit: str) -> str:
        """The tree object name of ``commit``."""
        found = self._reader.info(f"{commit}^{{tree}}") if self._reader else None
        if found is not None:
            return found[0]
        # Outside reading(), or for a bad name: git's own answer (and error).
        return self.out("rev-parse", f"{commit}^{{tree}}")

    def ls_tree(self, tree: str) -> list[tuple[str, str, str, str]]:
        """Every entry of ``tree``, recursively.

        Returns:
            ``[(mode, type, oid, path), ...]`` in git's order.
        """
        out = self.git("ls-tree", "-r", "-z", "--full-tree", tree).stdout
        return list(parse_ls_tree(out))

    def entries(self, tree: str, paths: Sequence[str]) -> dict[str, TreeEntry]:
        """The entries of ``tree`` at exactly ``paths`` (one ``ls-tree`` for all of them;
        inside :meth:`reading`, none: :meth:`ObjectReader.entries`).

        Args:
            tree: tree SHA.
            paths: repository paths; a path absent from the tree is absent from the result.
        Returns:
            path -> :class:`TreeEntry` (a gitlink has ``kind == "commit"``).
        """
        if not paths:
            return {}
        if self._reader is not None:
            return self._reader.entries(tree, paths)
        wanted = set(paths)
        out: dict[str, TreeEntry] = {}
        # ``-r -t`` lists the trees on the way, so a directory (or a gitlink) standing
        # where a file was is seen too.
        proc = self.git(
            "ls-tree",
            "-r",
            "-t",
            "-z",
            "--full-tree",
            tree,
            "--",
            *sorted(wanted),
            check=False,
        )
        for mode, kind, oid, path in parse_ls_tree(proc.stdout):
            if path in wanted:
                out[path] = TreeEntry(mode, kind, oid, path)
        return out

    @contextlib.contextmanager
    def scratch_index(self, tree: str | None = None) -> Iterator[dict[str, str]]:
        """A private index file for the duration of a ``with`` block.

        Args:
            tree: read this tree into it first (``git read-tree``).
        Yields:
            The environment to pass to :meth:`git` (``{"GIT_INDEX_FILE": path}``).
            The file and its directory are removed when the block ends, however it ends.
        """
        with scratch_dir("idx") as tmp:
            env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
            if tree is not None:
                self.git("read-tree", tree, env=env)
            yield env

    def merge_trees(
        self,
        base: str,
        ours: str,
        theirs: str,
        *,
        labels: tuple[str, str, str] = ("base", "ours", "theirs"),
    ) -> MergeResult:
        """3-way merge of three trees by merge-ort (``git merge-tree --write-tree``).

        git 2.39's merge-tree has no ``--merge-base``, so the trees become synthetic
        commits (fixed identity and date) with ``base`` as the parent of the other two.
        Renames are followed, and modify/delete, add/add, rename/delete, file/directory,
        submodule, mode and binary conflicts are named with git's own types.

        Args:
            base, ours, theirs: tree SHAs.
            labels: commit messages of the synthetic commits (they show in git's messages).
        Returns:
            :class:`MergeResult`.
        Raises:
            GitError: git failed for another reason than a conflict.
        """
        c_base, c_ours, c_theirs = self.commit_chain(
            [(base, [], labels[0]), (ours, [0], labels[1]), (theirs, [0], labels[2])]
        )
        proc = self.git(
            "merge-tree", "--write-tree", "-z", c_ours, c_theirs, check=False
        )
        if proc.returncode not in (0, 1):
            raise GitError(f"git merge-tree failed: {first_error_line(proc.stderr)}")
        return parse_merge_tree(proc.stdout, proc.returncode == 0)

    def diff_tree(self, old: str, new: str, *paths: str) -> list[DiffRow]:
        """Changed entries between two trees, no rename detection.

        ``old`` and ``new`` are trees or commits (their trees compared). Inside a
        reading block (:meth:`reading`), for SHA-1 names and no ``paths``, the run's
        reader reads the trees that differ (:func:`overlay.git.objects.tree_changes`,
        at most :data:`~overlay.git.objects.TREE_WALK_TREES` of them): an export after
        a record compares two trees that differ in one file, and a sync the fork
        commits it moves between, without a ``diff-tree`` process.

        Returns:
            ``[(old_mode, new_mode, old_oid, new_oid, status, path), ...]`` in git's
            order; ``status`` is one of ``A``, ``D``, ``M``, ``T``.
        Raises:
            GitError: a tree is missing.
        """
        if not paths and is_sha(old) and is_sha(new):
            kept = self.kept_diff(old, new)
            if kept is not None:
                return kept
        if self._reader is not None and not paths and len(old) == len(new) == 40:
            try:
                return tree_changes(
                    self._reader.tree,
                    self.tree_of(old),
                    self.tree_of(new),
                    objects.TREE_WALK_TREES,
                )
            except OverBudget:
                pass  # many directories differ: git's one process is cheaper
        args = ["diff-tree", "-r", "-z", "--no-renames", "--full-index", old, new]
        if paths:
            args += ["--", *paths]
        return parse_diff_tree(self.git(*args).stdout)

    def keep_diff(self, old: str, new: str) -> None:
        """Keep the changes between trees ``old`` and ``new`` (:meth:`diff_tree`) in the
        store for the next command that compares them (:meth:`kept_diff`): ``overlay
        record`` keeps the layer it replaced against the one it wrote, so that the
        ``export`` after it needs neither the old layer's trees (packed, read by a
        ``cat-file`` process) nor a ``diff-tree``. Best effort: nothing is kept where
        the trees cannot be compared.

        Args:
            old, new: full tree names.
        """
        with contextlib.suppress(GitError):
            rows = self.diff_tree(old, new)
            self.cache_write(DIFF_CACHE, _diff_key(old, new), {"rows": rows})

    def kept_diff(self, old: str, new: str) -> list[DiffRow] | None:
        """The changes between trees ``old`` and ``new`` as :meth:`keep_diff` kept them
        (a tree's name is the hash of its content: kept rows never go stale), or
        ``None`` when none were kept or what was kept is not rows.

        Args:
            old, new: full tree names.
        """
        rec = self.cache_read(DIFF_CACHE, _diff_key(old, new))
        rows = rec.get("rows") if rec is not None else None
        if not isinstance(rows, list) or not all(
            isinstance(r, list) and len(r) == 6 and all(isinstance(f, str) for f in r)
            for r in rows
        ):
            return None
        return [tuple(r) for r in rows]

    def hash_blob(self, data: bytes) -> str:
        """Write ``data`` as a blob into the store; return its name."""
        return self.out("hash-object", "-w", "--stdin", "--no-filters", input=data)

    def edit_tree(self, tree: str, changes: dict[str, tuple[str, str] | None]) -> str:
        """A new tree: ``tree`` with ``changes`` applied, through a private index.

        Args:
            tree: starting tree.
            changes: path -> ``(mode, oid)`` to set, or ``None`` to delete.
        Returns:
            The new tree's name.
        """
        if not changes:
            return tree
        with self.scratch_index(tree) as env:
            return self.edit_tree_in(env, changes)

    def edit_tree_in(
        self, env: dict[str, str], changes: dict[str, tuple[str, str] | None]
    ) -> str:
        """Apply ``changes`` to the index named by ``env`` and write it as a tree.

        Args:
            env: from :meth:`scratch_index`.
            changes: path -> ``(mode, oid)`` to set, or ``None`` to delete.
        Returns:
            The tree SHA of the index afterwards.
        """
        lines = [
            f"0 {NULL_OID}\t{path}"
            if entry is None
            else f"{entry[0]} {entry[1]}\t{path}"
            for path, entry in changes.items()
        ]
        if lines:
            self.git(
                "update-index",
                "-z",
                "--index-info",
                input=("\0".join(lines) + "\0").encode("utf-8", "surrogateescape"),
                env=env,
            )
        return self.out("write-tree", env=env)

    def commit_chain(
        self, specs: Sequence[tuple[str, Sequence[str | int], str]]
    ) -> list[str]:
        """Write several synthetic commits (fewer than
        :data:`~overlay.git.loose.LOOSE_LIMIT`: without a git process).

        Each commit has the fixed identity and date of :data:`SYNTHETIC_IDENTITY`, so
        its name is the same as :meth:`commit_tree` would give. The bodies and names are
        computed here and written by :func:`overlay.git.loose.write_typed` (loose
        files below its limit, else one pack): no scratch files.

        Args:
            specs: ``[(tree, parents, message), ...]``; a parent is a SHA, or the int
                index of an earlier spec.
        Returns:
            The commit SHAs, in order.
        Raises:
            GitError: git refused the pack (a store of another object format).
        """

        made = synthetic_commits(specs)
        write_typed(self.git_dir, {sha: ("commit", body) for sha, body in made})
        return [sha for sha, _body in made]

    def commit_tree(
        self, tree: str, parents: Sequence[str] = (), message: str = "overlay"
    ) -> str:
        """A synthetic commit with the fixed identity and date (deterministic name)."""
        args = ["commit-tree", tree]
        for p in parents:
            args += ["-p", p]
        return self.out(*args, "-m", message, env=dict(SYNTHETIC_IDENTITY))
