"""How overlay runs git: the sanitized environment, the determinism flags, ``-z`` parsing.

Every git process overlay starts goes through :func:`run_git` (or, for the
long-lived readers of :mod:`overlay.git.objects`, :func:`git_env` and
:data:`GIT_FLAGS`), which

* strips stray ``GIT_*`` variables (a hook or an outer ``git rebase`` must not
  redirect us to another repository), keeping only transport helpers;
* passes determinism flags with ``-c`` (no CRLF conversion, no quoting of
  paths, no automatic gc) and ``LC_ALL=C`` so messages can be parsed;
* raises :class:`~overlay.errors.GitError` with git's own first error line.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

from overlay.errors import GitError
from overlay.fs.atomic import temp_dir
from overlay.fs.locks import flocked
from overlay.git.env import git_env

#: ``-c`` options passed to every git call (docs/design.md §10: determinism flags).
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
_HEX = "0123456789abcdef"


def is_sha(value: str) -> bool:
    """True when ``value`` is a full 40-hex lowercase object name (nothing before or
    after it; string operations: a pattern compiled in every process cost more than
    the questions it answered)."""
    return len(value) == 40 and not value.strip(_HEX)


#: git commands that talk to a remote: they keep the user's global configuration
#: (credential helpers, proxies, ``url.<base>.insteadOf``); nothing they do changes a
#: tree, a diff or a merge result.
_TRANSPORT_COMMANDS = frozenset({"fetch", "ls-remote"})


_WHICH: dict[str, str | None] = {}


def git_executable() -> str:
    """Path of ``git`` on PATH (looked up once per PATH value).

    Raises:
        GitError: git is not installed (exit 2).
    """
    key = os.environ.get("PATH", os.defpath)
    if key not in _WHICH:
        # shutil.which's lookup on POSIX, written out: importing shutil (which imports
        # bz2 and lzma) would cost every command more than the lookup itself.
        dirs = key.split(os.pathsep) if key else []  # an empty PATH finds nothing
        found = (os.path.join(d or os.curdir, "git") for d in dirs)
        _WHICH[key] = next(
            (p for p in found if os.access(p, os.X_OK) and not os.path.isdir(p)),
            None,
        )
    path = _WHICH[key]
    if path is None:
        raise GitError("git not found on PATH", hint="install git 2.38 or newer")
    return path


def neutral_cwd() -> str:
    """A working directory for a git child that has no repository of its own: the temp
    directory (:func:`overlay.fs.atomic.temp_dir`), never the user's current
    directory, where a repository's configuration would apply."""
    return temp_dir()


def run_git(
    args: Sequence[str],
    *,
    git_dir: str | None = None,
    cwd: str | None = None,
    input: bytes | None = None,
    env: dict[str, str] | None = None,
    check: bool = True,
    pass_fds: Sequence[int] = (),
) -> subprocess.CompletedProcess:
    """Run one git command with the sanitized environment and determinism flags.

    Args:
        args: git arguments after the global options, e.g. ``["ls-tree", "-z", sha]``.
        git_dir: repository to act on (sets ``GIT_DIR``).
        cwd: working directory of the child; default: ``git_dir`` (or the temporary
            directory). Never the caller's: ``git apply --3way`` and friends write
            conflicted files relative to their cwd.
        input: bytes for stdin.
        env: extra variables (see :func:`git_env`).
        check: raise on a nonzero exit.
        pass_fds: descriptors the child inherits (a lock it must hold while it
            runs, even when overlay is killed first).
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
            cwd = neutral_cwd()
    proc = subprocess.run(
        cmd,
        input=input,
        cwd=cwd,
        env=git_env(extra, user_config=bool(args) and args[0] in _TRANSPORT_COMMANDS),
        capture_output=True,
        pass_fds=tuple(pass_fds),
    )
    if check and proc.returncode != 0:
        raise GitError(f"git {args[0]} failed: {first_error_line(proc.stderr)}")
    return proc


def missing_commit(
    sha: str, remotes: Sequence[str], answered: Sequence[str], where: str
) -> GitError:
    """The error for a commit that no remote gave when fetched by SHA.

    A network hint only where a remote did not answer: a mirror that answered without
    the commit means a wrong SHA, not a missing network.

    Args:
        sha: the commit asked for.
        remotes: the remotes tried, in order.
        answered: those whose branches and tags could be fetched.
        where: the remotes with their URLs, as the message shows them.
    Returns:
        The error to raise (exit 2).
    """
    silent = [r for r in remotes if r not in answered]
    if not silent:
        return GitError(
            f"commit {sha} is not in {' or '.join(remotes)}: {where} answered, "
            "and no branch or tag there holds it",
            hint="check the SHA (a typo, or a commit of another repository?); "
            "`git ls-remote URL` lists what a remote has",
        )
    return GitError(
        f"commit {sha} not found: {', '.join(silent)} could not be reached ({where})",
        hint="check that the remotes are reachable (`overlay doctor`); on a machine "
        "without network set OVERLAY_UPSTREAM_URL / OVERLAY_FORK_URL to local mirrors",
    )


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


def create_bare_repo(git_dir: str) -> None:
    """Make the bare repository ``git_dir`` (the git store), safe against another
    process making it at the same moment (two repositories' first commands on one
    new store).

    Two ``git init`` in one directory race on its ``config`` (``could not lock config
    file``, ``File exists``); so the store is made beside its place, under a name of
    this process's own, and renamed into place whole. The loser of the rename finds
    the winner's store and throws its own away. An empty directory at ``git_dir`` (a
    user's ``mkdir``) is replaced by the rename; a non-empty one that is not a
    repository is initialised in place, as git would.

    Args:
        git_dir: the repository's path (absolute).
    Raises:
        GitError: git cannot make the repository.
        OSError: the parent directory cannot be made.
    """
    parent = os.path.dirname(git_dir)
    os.makedirs(parent, exist_ok=True)
    import tempfile  # only where a store is made

    with tempfile.TemporaryDirectory(
        prefix=f".{os.path.basename(git_dir)}.init-{os.getpid()}-", dir=parent
    ) as scratch:
        made = os.path.join(scratch, "store.git")
        run_git(["init", "-q", "--bare", made])
        try:
            os.rename(made, git_dir)
            return
        except OSError:
            if os.path.isfile(os.path.join(git_dir, "HEAD")):
                return  # another process made it meanwhile
    # A non-empty directory that is not a repository: initialised in place, under a
    # lock of its own so that two such inits do not race either.
    with flocked(os.path.join(parent, f".{os.path.basename(git_dir)}.init.lock")):
        if not os.path.isfile(os.path.join(git_dir, "HEAD")):
            run_git(["init", "-q", "--bare", git_dir])


def git_ignored(root: str | os.PathLike, rels: Sequence[str]) -> set[str]:
    """The paths among ``rels`` that git's ignore rules exclude in the work tree at ``root``.

    One ``git -C ROOT check-ignore --stdin -z`` for all of them, so ``.gitignore``
    files, ``.git/info/exclude`` and the user's ``core.excludesFile`` all count (a
    ``.DS_Store`` is usually ignored by the last). A tracked file is never ignored
    (git applies ignore rules to untracked files only).

    Args:
        root: a directory inside a git work tree; the paths are relative to it.
        rels: slash-separated paths.
    Returns:
        The ignored subset; empty when ``root`` is in no work tree, git is missing
        or fails (then nothing is ignored, as without git).
    """
    if not rels:
        return set()
    try:
        exe = git_executable()
    except GitError:
        return set()
    # The user's configuration stays visible (user_config): core.excludesFile lives there.
    proc = subprocess.run(
        [exe, "-C", os.fspath(root), "check-ignore", "--stdin", "-z"],
        input=("\0".join(rels) + "\0").encode("utf-8", "surrogateescape"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        # `-C` moves git into the repository before it looks for one, so where the
        # process starts is never read: the file system's root, always there.
        cwd=os.sep,
        env=git_env(user_config=True),
        check=False,
    )
    if proc.returncode not in (0, 1):
        return set()
    return set(zsplit(proc.stdout)) & set(rels)


def user_identity(repo: str) -> str | None:
    """``Name <email>`` from ``git config user.name``/``user.email`` as the user's git
    reads them in ``repo`` (its own config, then the global one), the identity ``git
    format-patch`` writes; ``None`` when either is unset or git cannot say.

    Args:
        repo: a directory (the overlay repository; it need not be a git checkout).
    """
    values = []
    for key in ("user.name", "user.email"):
        try:
            proc = subprocess.run(
                [git_executable(), "-C", repo, "config", "--get", key],
                cwd=neutral_cwd(),
                env=git_env(user_config=True),
                capture_output=True,
            )
        except (OSError, GitError):
            return None
        value = proc.stdout.decode("utf-8", "replace").strip()
        if proc.returncode != 0 or not value or "\n" in value:
            return None
        values.append(value)
    return f"{values[0]} <{values[1]}>"


def git_version() -> str | None:
    """``git --version`` (``"git version 2.39.5"``), or ``None`` when git cannot be run."""
    try:
        proc = subprocess.run(
            [git_executable(), "--version"],
            capture_output=True,
            cwd=neutral_cwd(),
            env=git_env(),
            timeout=10.0,
        )
    except (OSError, GitError, subprocess.TimeoutExpired):
        return None
    return (
        proc.stdout.decode("utf-8", "replace").strip() if proc.returncode == 0 else None
    )


def remote_reachable(url: str, *, timeout: float = 10.0) -> bool:
    """Whether ``git ls-remote --heads URL`` answers within ``timeout`` seconds (the
    user's configuration kept, as for every transport command: credentials, proxies)."""
    try:
        proc = subprocess.run(
            [git_executable(), "ls-remote", "--heads", "--end-of-options", url],
            capture_output=True,
            cwd=neutral_cwd(),
            env=git_env(user_config=True),
            timeout=timeout,
        )
    except (OSError, GitError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0
