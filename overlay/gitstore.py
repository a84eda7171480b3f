"""The one git layer: sanitized environment, ``-z`` parsing, the git store.

Every git process overlay starts goes through :func:`run_git`, which

* strips stray ``GIT_*`` variables (a hook or an outer ``git rebase`` must not
  redirect us to another repository), keeping only transport helpers;
* passes determinism flags with ``-c`` (no CRLF conversion, no quoting of
  paths, no automatic gc) and ``LC_ALL=C`` so messages can be parsed;
* raises :class:`~overlay.errors.GitError` with git's own first error line.

The *git store* is a bare repository (default ``~/.cache/overlay/store.git``)
holding every object the layers need. Its remotes ``upstream`` and ``fork``
come from the manifest; commits are fetched on demand by SHA and kept alive by
refs under ``refs/overlay/keep/``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence

from overlay.errors import GitError, OfflineMiss
from overlay.fsutil import flocked, scratch_dir
from overlay.locate import default_store_dir  # noqa: F401 - re-exported: the store's default place

#: ``-c`` options passed to every git call (DESIGN 10: determinism flags).
GIT_FLAGS: tuple[str, ...] = (
    "-c",
    "core.autocrlf=false",
    "-c",
    "core.safecrlf=false",
    "-c",
    "core.quotepath=false",
    "-c",
    "core.precomposeunicode=false",
    "-c",
    "gc.auto=0",
    "-c",
    "maintenance.auto=false",
    "-c",
    "apply.whitespace=nowarn",
    "-c",
    "merge.conflictstyle=merge",
    "-c",
    "diff.noprefix=false",
    "-c",
    "diff.mnemonicprefix=false",
    "-c",
    "init.defaultBranch=main",
    "-c",
    "advice.detachedHead=false",
)

#: Environment variables kept from the caller (credentials and transport only).
_KEEP_GIT_VARS = frozenset(
    {
        "GIT_SSH",
        "GIT_SSH_COMMAND",
        "GIT_ASKPASS",
        "GIT_TERMINAL_PROMPT",
        "GIT_SSL_CAINFO",
        "GIT_SSL_NO_VERIFY",
        "GIT_HTTP_PROXY",
        "GIT_EXEC_PATH",
    }
)

#: Fixed identity and dates for the synthetic commits the layers are merged from,
#: so the same inputs give the same object names.
SYNTHETIC_IDENTITY = {
    "GIT_AUTHOR_NAME": "overlay",
    "GIT_AUTHOR_EMAIL": "overlay@localhost",
    "GIT_AUTHOR_DATE": "1700000000 +0000",
    "GIT_COMMITTER_NAME": "overlay",
    "GIT_COMMITTER_EMAIL": "overlay@localhost",
    "GIT_COMMITTER_DATE": "1700000000 +0000",
}

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
NULL_OID = "0" * 40
_SHA_RE = re.compile(r"^[0-9a-f]{40}$")


def is_sha(value: str) -> bool:
    """True when ``value`` is a full 40-hex lowercase object name."""
    return bool(_SHA_RE.match(value))


#: git commands that talk to a remote: they keep the user's global configuration
#: (credential helpers, proxies, ``url.<base>.insteadOf``); nothing they do changes a
#: tree, a diff or a merge result.
_TRANSPORT_COMMANDS = frozenset({"fetch", "ls-remote"})


def git_env(
    extra: dict[str, str] | None = None, *, user_config: bool = False
) -> dict[str, str]:
    """The environment for a git child: ours minus stray ``GIT_*``, plus ``extra``.

    The system and global configuration files are hidden (``GIT_CONFIG_NOSYSTEM``,
    ``GIT_CONFIG_GLOBAL=/dev/null``): a ``~/.gitconfig`` with ``diff.renameLimit=1``,
    ``diff.algorithm=patience`` or ``merge.conflictStyle=zdiff3`` must not change a
    refreshed patch or a merge (issue 12, item 11).

    Args:
        extra: variables to set on top (``GIT_DIR``, ``GIT_INDEX_FILE``, ...).
        user_config: keep the user's global configuration (transport commands only).
    Returns:
        A new dict; ``os.environ`` is not modified.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GIT_") or k in _KEEP_GIT_VARS
    }
    env["LC_ALL"] = "C"
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    if not user_config:
        env["GIT_CONFIG_GLOBAL"] = os.devnull
    env.setdefault("GIT_TERMINAL_PROMPT", "0")
    if extra:
        env.update(extra)
    return env


_WHICH: dict[str, str | None] = {}


def git_executable() -> str:
    """Path of ``git`` on PATH (looked up once per PATH value).

    Raises:
        GitError: git is not installed (exit 2).
    """
    key = os.environ.get("PATH", "")
    if key not in _WHICH:
        import shutil  # here, not at the top: start-up is the floor of every command (issue 14)

        _WHICH[key] = shutil.which("git")
    path = _WHICH[key]
    if path is None:
        raise GitError("git not found on PATH", hint="install git 2.38 or newer")
    return path


def run_git(
    args: Sequence[str],
    *,
    git_dir: str | None = None,
    cwd: str | None = None,
    input: bytes | None = None,
    env: dict[str, str] | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess:
    """Run one git command with the sanitized environment and determinism flags.

    Args:
        args: git arguments after the global options, e.g. ``["ls-tree", "-z", sha]``.
        git_dir: repository to act on (sets ``GIT_DIR``).
        cwd: working directory of the child; default: ``git_dir`` (or the temporary
            directory). Never the caller's: ``git apply --3way`` and friends write
            conflicted files relative to their cwd (issue 12).
        input: bytes for stdin.
        env: extra variables (see :func:`git_env`).
        check: raise on a nonzero exit.
    Returns:
        The completed process with ``stdout``/``stderr`` as bytes.
    Raises:
        GitError: git is missing, or it exited nonzero and ``check`` is true; the
        message is git's first ``error:``/``fatal:`` line.
    """
    extra = dict(env or {})
    if git_dir is not None:
        extra["GIT_DIR"] = git_dir
    cmd = [git_executable(), *GIT_FLAGS, *args]
    if cwd is None:
        if git_dir is not None and os.path.isdir(git_dir):
            cwd = git_dir
        else:
            import tempfile

            cwd = tempfile.gettempdir()
    proc = subprocess.run(
        cmd,
        input=input,
        cwd=cwd,
        env=git_env(extra, user_config=bool(args) and args[0] in _TRANSPORT_COMMANDS),
        capture_output=True,
    )
    if check and proc.returncode != 0:
        raise GitError(f"git {args[0]} failed: {first_error_line(proc.stderr)}")
    return proc


def first_error_line(stderr: bytes) -> str:
    """The most telling line of git's stderr (``fatal:``/``error:`` first)."""
    lines = [
        ln.strip()
        for ln in stderr.decode("utf-8", "replace").splitlines()
        if ln.strip()
    ]
    for ln in lines:
        if ln.startswith(("fatal:", "error:")):
            return ln.split(":", 1)[1].strip()
    return lines[0] if lines else "no message"


def zsplit(data: bytes) -> list[str]:
    """Split ``-z`` output into strings, dropping the trailing empty field."""
    parts = data.decode("utf-8", "surrogateescape").split("\0")
    if parts and parts[-1] == "":
        parts.pop()
    return parts


class CatFile:
    """One persistent ``git cat-file --batch`` process for blob reads.

    Use as a context manager; :meth:`read` returns ``(type, data)``. Starting
    one process per blob would dominate an export of a thousand files.
    """

    def __init__(self, git_dir: str):
        self._proc = subprocess.Popen(
            [git_executable(), *GIT_FLAGS, "cat-file", "--batch"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=git_dir,
            env=git_env({"GIT_DIR": git_dir}),
        )

    def read(self, oid: str) -> tuple[str, bytes]:
        """Read one object.

        Args:
            oid: 40-hex object name.
        Returns:
            ``(type, content)``, e.g. ``("blob", b"...")``.
        Raises:
            GitError: the object is missing.
        """
        assert self._proc.stdin and self._proc.stdout
        self._proc.stdin.write(oid.encode() + b"\n")
        self._proc.stdin.flush()
        header = self._proc.stdout.readline()
        fields = header.split()
        if len(fields) != 3:
            raise GitError(f"object {oid} is missing from the git store")
        size = int(fields[2])
        data = self._proc.stdout.read(size)
        self._proc.stdout.read(1)  # trailing LF
        return fields[1].decode(), data

    def close(self) -> None:
        """Stop the child process; never blocks for long.

        Closes git's stdout first (a child blocked writing a blob nobody reads,
        e.g. after a Ctrl-C inside :meth:`read`, gets EPIPE and exits), then its
        stdin, waits a few seconds and kills it if it is still running. Safe to
        call more than once.
        """
        for pipe in (self._proc.stdout, self._proc.stdin):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def __enter__(self) -> CatFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclasses.dataclass(frozen=True)
class TreeEntry:
    """One row of ``git ls-tree``: ``mode`` (``100644``, ``160000`` ...), ``kind``
    (``blob``, ``tree``, ``commit`` for a gitlink), ``oid`` and ``path``."""

    mode: str
    kind: str
    oid: str
    path: str


@dataclasses.dataclass
class MergeResult:
    """What ``git merge-tree --write-tree`` (merge-ort) made of three trees.

    Attributes:
        tree: the merged tree; a conflicted text file holds git's markers, and a
            modify/delete conflict leaves the modified side in it.
        clean: true when git reported no conflict.
        stages: conflicted path -> ``{stage: (mode, oid)}``; stage 1 is the merge
            base, 2 "ours", 3 "theirs"; a missing stage means that side lacks the path.
        messages: ``(paths, type, message)`` for each of git's informational
            messages, e.g. ``(["f"], "CONFLICT (modify/delete)", "CONFLICT ...")``;
            ``type`` is git's stable short description.
    """

    tree: str
    clean: bool
    stages: dict[str, dict[int, tuple[str, str]]]
    messages: list[tuple[list[str], str, str]]

    def conflict_types(self, path: str) -> list[str]:
        """git's conflict types that name ``path`` (``["CONFLICT (modify/delete)"]``)."""
        return [
            kind
            for paths, kind, _ in self.messages
            if path in paths and kind.startswith("CONFLICT")
        ]


class Store:
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
        self._lock_depth = 0
        if not os.path.isfile(os.path.join(self.git_dir, "HEAD")):
            os.makedirs(self.git_dir, exist_ok=True)
            run_git(["init", "-q", "--bare", self.git_dir])

    # -- plumbing ---------------------------------------------------------------
    def git(
        self,
        *args: str,
        input: bytes | None = None,
        env: dict[str, str] | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess:
        """Run git against the store (see :func:`run_git`)."""
        return run_git(args, git_dir=self.git_dir, input=input, env=env, check=check)

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

    def read_objects(self, oids: Sequence[str]) -> Iterator[tuple[str, bytes]]:
        """Read many objects known in advance, streamed, with one ``git cat-file --batch --buffer``.

        The names are handed to git in a file, so git writes its answers with normal
        buffering instead of one flush per object, and there is no round trip per
        object (an export reads a thousand blobs this way); only one object is held at a
        time, so reading the whole tree never holds the tree (issue 14: peak memory).

        Args:
            oids: object names (40 or 64 hex).
        Yields:
            ``(type, content)`` per name, in order.
        Raises:
            GitError: an object is missing.
        """
        import tempfile

        if not oids:
            return
        with tempfile.TemporaryFile() as names:
            names.write("".join(f"{oid}\n" for oid in oids).encode())
            names.seek(0)
            proc = subprocess.Popen(
                [git_executable(), *GIT_FLAGS, "cat-file", "--batch", "--buffer"],
                stdin=names,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                cwd=self.git_dir,
                env=git_env({"GIT_DIR": self.git_dir}),
                bufsize=1 << 20,
            )
        assert proc.stdout is not None
        try:
            for oid in oids:
                fields = proc.stdout.readline().split()
                if len(fields) != 3:
                    raise GitError(f"object {oid} is missing from the git store")
                data = proc.stdout.read(int(fields[2]))
                proc.stdout.read(1)  # trailing LF
                yield fields[1].decode(), data
        finally:
            proc.stdout.close()  # git stops (EPIPE) if the reader gave up early (a Ctrl-C)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the store's writer lock (:func:`overlay.fsutil.flocked` on ``overlay.lock``); re-entrant."""
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
    def set_remote(self, name: str, url: str) -> str | None:
        """Point remote ``name`` at ``url``; update it when the manifest changed.

        Args:
            name: ``"upstream"`` or ``"fork"``.
            url: URL or local path (a mirror works).
        Returns:
            The previous URL when it was changed, else ``None``.
        """
        self._remote_urls[name] = url
        if self._config_urls is None:
            self._config_urls = self._read_remote_urls()
        old = self._config_urls.get(name, "")
        if old == url:
            return None
        with self.lock():
            self.git("config", f"remote.{name}.url", url)
        self._config_urls[name] = url
        return old or None

    def _read_remote_urls(self) -> dict[str, str]:
        """Every ``remote.<name>.url`` of the store's configuration, from one ``git config``
        (read once per :class:`Store`: a command sets both remotes, often twice, and each
        ``git config --get`` was a process; issue 14). The last value of a key wins, as
        with ``--get``."""
        proc = self.git(
            "config", "-z", "--get-regexp", r"^remote\..*\.url$", check=False
        )
        urls = {}
        for rec in zsplit(proc.stdout):
            key, _, value = rec.partition("\n")
            urls[key[len("remote.") : -len(".url")]] = value.strip()
        return urls

    # -- ancestry, remembered -------------------------------------------------
    def is_ancestor(self, a: str, b: str) -> bool:
        """``git merge-base --is-ancestor a b``, remembered in the store for full commit names.

        The answer for two commits never changes, and it is a walk of history each time
        (12 ms of every uncached verify of the real overlay for MAN003 alone; issue 14).
        An answer git could not give (a missing object) is not remembered.

        Returns:
            True when ``a`` is an ancestor of (or equal to) ``b``.
        """
        key = f"is-ancestor {a} {b}"
        known = self._ancestry().get(key)
        if known is not None:
            return bool(known)
        code = self.git("merge-base", "--is-ancestor", a, b, check=False).returncode
        if code in (0, 1) and is_sha(a) and is_sha(b):
            self._remember(key, code == 0)
        return code == 0

    def merge_base(self, a: str, b: str) -> str | None:
        """``git merge-base a b`` (the best common ancestor), remembered like :meth:`is_ancestor`.

        Returns:
            Its name, or ``None`` when the two have no common ancestor.
        """
        key = f"merge-base {a} {b}"
        known = self._ancestry().get(key)
        if known is not None:
            return known or None
        proc = self.git("merge-base", a, b, check=False)
        base = proc.stdout.decode().strip()
        if proc.returncode in (0, 1) and is_sha(a) and is_sha(b):
            self._remember(key, base)
        return base or None

    _ANCESTRY = "overlay-ancestry.json"
    _ANCESTRY_MAX = 2000

    def _ancestry(self) -> dict:
        if self._known is None:
            import json

            try:
                with open(
                    os.path.join(self.git_dir, self._ANCESTRY), encoding="utf-8"
                ) as fh:
                    data = json.load(fh)
                self._known = data if isinstance(data, dict) else {}
            except (OSError, ValueError):
                self._known = {}
        return self._known

    def _remember(self, key: str, value) -> None:
        import json

        from overlay.fsutil import atomic_write

        known = self._ancestry()
        if len(known) >= self._ANCESTRY_MAX:
            known.clear()  # upstream tips move with every fetch: keep the file small, not complete
        known[key] = value
        try:
            atomic_write(
                os.path.join(self.git_dir, self._ANCESTRY),
                json.dumps(known).encode(),
                durable=False,
            )
        except OSError:
            pass  # only costs the walk next time

    def has_object(self, oid: str, kind: str = "commit") -> bool:
        """True when ``oid`` names an object of type ``kind`` in the store."""
        return (
            self.git("cat-file", "-e", f"{oid}^{{{kind}}}", check=False).returncode == 0
        )

    def ensure_commit(self, sha: str, remotes: Sequence[str]) -> None:
        """Make sure commit ``sha`` is in the store, fetching it by SHA if needed.

        Tries each remote in order: a fetch of the exact SHA first, then (for
        servers that refuse unadvertised SHAs) all branches and tags.

        Args:
            sha: full 40-hex commit name.
            remotes: remote names to try, e.g. ``["fork", "upstream"]``.
        Raises:
            OfflineMiss: the commit is missing and the store is offline.
            GitError: no remote has the commit.
        """
        if self.has_object(sha):
            return
        where = ", ".join(f"{r} ({self._remote_urls.get(r, '?')})" for r in remotes)
        if self.offline:
            raise OfflineMiss(
                f"commit {sha} is not in the git store and --offline forbids fetching",
                hint=f"run once online to fetch it from {where}",
            )
        if sys.stderr.isatty():
            print(
                f"overlay: fetching {sha[:12]} from {where} ...",
                file=sys.stderr,
                flush=True,
            )
        with self.lock():
            for remote in remotes:
                keep = f"refs/overlay/keep/{sha}"
                if self.git(
                    "fetch", "-q", "--no-tags", remote, f"{sha}:{keep}", check=False
                ).returncode == 0 and self.has_object(sha):
                    return
            for remote in remotes:
                self.git(
                    "fetch",
                    "-q",
                    "--tags",
                    remote,
                    f"+refs/heads/*:refs/remotes/{remote}/*",
                    check=False,
                )
                if self.has_object(sha):
                    self.git("update-ref", f"refs/overlay/keep/{sha}", sha)
                    return
        raise GitError(
            f"commit {sha} not found in {where}",
            hint="check that the remotes are reachable (`overlay doctor`); on a machine without "
            "network set OVERLAY_UPSTREAM_URL / OVERLAY_FORK_URL to local mirrors",
        )

    def resolve(self, ref: str, remotes: Sequence[str] = ("upstream", "fork")) -> str:
        """Resolve a user-given ref (SHA, tag, ``remote/branch``) to a commit SHA.

        Args:
            ref: what the user typed; must not start with ``-``.
            remotes: where to fetch a missing full SHA from.
        Returns:
            The 40-hex commit name.
        Raises:
            GitError: the ref starts with ``-``, or names no commit.
        """
        if not ref or ref.startswith("-"):
            raise GitError(
                f"refusing ref {ref!r}: a ref may not be empty or start with '-'"
            )
        if is_sha(ref):
            self.ensure_commit(ref, remotes)
            return ref
        if not self.offline:
            # A name (branch, tag) means what the remote says now: refresh first.
            with self.lock():
                for remote in remotes:
                    self.git(
                        "fetch",
                        "-q",
                        "--tags",
                        "--prune",
                        remote,
                        f"+refs/heads/*:refs/remotes/{remote}/*",
                        check=False,
                    )
        sha = self._rev_parse_any(ref, remotes)
        if sha is None:
            raise GitError(
                f"unknown ref {ref!r}: no such commit, tag or branch in "
                + " or ".join(remotes)
                + (
                    " (offline: only the git store was searched)"
                    if self.offline
                    else ""
                )
            )
        return sha

    def _rev_parse_any(self, ref: str, remotes: Sequence[str]) -> str | None:
        for candidate in (
            *(f"refs/remotes/{r}/{ref}" for r in remotes),
            f"refs/tags/{ref}",
            ref,
        ):
            proc = self.git(
                "rev-parse",
                "--verify",
                "--quiet",
                "--end-of-options",
                f"{candidate}^{{commit}}",
                check=False,
            )
            if proc.returncode == 0:
                return proc.stdout.decode().strip()
        return None

    # -- trees ------------------------------------------------------------------
    def tree_of(self, commit: str) -> str:
        """The tree object name of ``commit``."""
        return self.out("rev-parse", f"{commit}^{{tree}}")

    def ls_tree(self, tree: str) -> list[tuple[str, str, str, str]]:
        """Every entry of ``tree``, recursively.

        Returns:
            ``[(mode, type, oid, path), ...]`` in git's order.
        """
        entries = []
        for rec in zsplit(self.git("ls-tree", "-r", "-z", "--full-tree", tree).stdout):
            meta, path = rec.split("\t", 1)
            mode, kind, oid = meta.split()
            entries.append((mode, kind, oid, path))
        return entries

    def entries(self, tree: str, paths: Sequence[str]) -> dict[str, TreeEntry]:
        """The entries of ``tree`` at exactly ``paths`` (one ``ls-tree`` for all of them).

        Args:
            tree: tree SHA.
            paths: repository paths; a path absent from the tree is absent from the result.
        Returns:
            path -> :class:`TreeEntry` (a gitlink has ``kind == "commit"``).
        """
        if not paths:
            return {}
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
        for rec in zsplit(proc.stdout):
            meta, path = rec.split("\t", 1)
            if path in wanted:
                mode, kind, oid = meta.split()
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
        head, _, tail = proc.stdout.partition(b"\0\0")
        fields = zsplit(head)
        stages: dict[str, dict[int, tuple[str, str]]] = {}
        for rec in fields[1:]:
            meta, path = rec.split("\t", 1)
            mode, oid, stage = meta.split()
            stages.setdefault(path, {})[int(stage)] = (mode, oid)
        messages: list[tuple[list[str], str, str]] = []
        rest = zsplit(tail)
        i = 0
        while i < len(rest):
            try:
                count = int(rest[i])
            except ValueError:
                break
            paths = rest[i + 1 : i + 1 + count]
            kind, text = rest[i + 1 + count], rest[i + 2 + count]
            messages.append((paths, kind, text))
            i += count + 3
        return MergeResult(fields[0], proc.returncode == 0, stages, messages)

    def diff_tree(
        self, old: str, new: str, *paths: str
    ) -> list[tuple[str, str, str, str, str, str]]:
        """Changed entries between two trees, no rename detection.

        Returns:
            ``[(old_mode, new_mode, old_oid, new_oid, status, path), ...]``;
            ``status`` is one of ``A``, ``D``, ``M``, ``T``.
        """
        args = ["diff-tree", "-r", "-z", "--no-renames", "--full-index", old, new]
        if paths:
            args += ["--", *paths]
        fields = zsplit(self.git(*args).stdout)
        out = []
        for i in range(0, len(fields), 2):
            meta = fields[i].lstrip(":").split()
            out.append((meta[0], meta[1], meta[2], meta[3], meta[4][0], fields[i + 1]))
        return out

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
        """Write several synthetic commits with one git process.

        Each commit has the fixed identity and date of :data:`SYNTHETIC_IDENTITY`, so
        its name is the same as :meth:`commit_tree` would give.

        Args:
            specs: ``[(tree, parents, message), ...]``; a parent is a SHA, or the int
                index of an earlier spec.
        Returns:
            The commit SHAs, in order.
        """
        import hashlib

        ident = (
            f"{SYNTHETIC_IDENTITY['GIT_AUTHOR_NAME']} <{SYNTHETIC_IDENTITY['GIT_AUTHOR_EMAIL']}> "
            f"{SYNTHETIC_IDENTITY['GIT_AUTHOR_DATE']}"
        )
        shas: list[str] = []
        bodies: list[bytes] = []
        for tree, parents, message in specs:
            lines = [f"tree {tree}"]
            lines += [f"parent {shas[p] if isinstance(p, int) else p}" for p in parents]
            lines += [f"author {ident}", f"committer {ident}", "", message]
            body = ("\n".join(lines) + "\n").encode()
            shas.append(hashlib.sha1(b"commit %d\0" % len(body) + body).hexdigest())
            bodies.append(body)
        with scratch_dir("commits") as tmp:
            paths = []
            for i, body in enumerate(bodies):
                path = os.path.join(tmp, str(i))
                with open(path, "wb") as fh:
                    fh.write(body)
                paths.append(path)
            written = self.out(
                "hash-object",
                "-t",
                "commit",
                "-w",
                "--stdin-paths",
                input=("\n".join(paths) + "\n").encode(),
            ).split()
        if written != shas:
            raise GitError(
                "git wrote other commit names than expected for the synthetic commits"
            )
        return shas

    def commit_tree(
        self, tree: str, parents: Sequence[str] = (), message: str = "overlay"
    ) -> str:
        """A synthetic commit with the fixed identity and date (deterministic name)."""
        args = ["commit-tree", tree]
        for p in parents:
            args += ["-p", p]
        return self.out(*args, "-m", message, env=dict(SYNTHETIC_IDENTITY))
