"""The environment of a git child: the caller's, without stray ``GIT_*`` variables.

Its own module, with nothing but :mod:`os` to import, so that the cached ``overlay
verify`` (:mod:`overlay.checks.cache`) starts its one git process (:func:`ls_files_z`)
without :mod:`subprocess`, with the environment every other git child of overlay gets
(:func:`overlay.git.run.run_git`).
"""

from __future__ import annotations

import os

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


def git_env(
    extra: dict[str, str] | None = None, *, user_config: bool = False
) -> dict[str, str]:
    """The environment for a git child: ours minus stray ``GIT_*``, plus ``extra``.

    The system and global configuration files are hidden (``GIT_CONFIG_NOSYSTEM``,
    ``GIT_CONFIG_GLOBAL=/dev/null``): a ``~/.gitconfig`` with ``diff.renameLimit=1``,
    ``diff.algorithm=patience`` or ``merge.conflictStyle=zdiff3`` must not change a
    refreshed patch or a merge.

    Args:
        extra: variables to set on top (``GIT_DIR``, ``GIT_INDEX_FILE``, ...).
        user_config: keep the user's global configuration: for transport commands
            (credentials, proxies) and for questions about the user's own repository
            (its ignore rules may live in ``core.excludesFile``).
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


def ls_files_z(root: str) -> bytes:
    """stdout of ``git -C root ls-files -z --cached --others --exclude-standard``; empty when
    git fails or cannot be started. Started with ``os.posix_spawnp``, not
    :mod:`subprocess` (a cached ``verify`` loads nothing it need not); ``-C``
    moves it into ``root`` before git reads anything. The environment is every git
    child's (:func:`git_env`, the user's configuration kept for its ignore rules):
    a ``GIT_DIR`` or ``GIT_INDEX_FILE`` of a hook that runs overlay must not make git
    list another repository's files."""
    read_fd, write_fd = os.pipe()
    try:
        pid = os.posix_spawnp(
            "git",
            [
                "git",
                "-C",
                root,
                "ls-files",
                "-z",
                "--cached",
                "--others",
                "--exclude-standard",
            ],
            git_env(user_config=True),
            file_actions=[
                (os.POSIX_SPAWN_DUP2, write_fd, 1),
                (os.POSIX_SPAWN_CLOSE, read_fd),
                (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            ],
        )
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        return b""
    os.close(write_fd)
    chunks = []
    with os.fdopen(read_fd, "rb") as pipe:
        while True:
            chunk = pipe.read(1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    _pid, status = os.waitpid(pid, 0)
    return b"".join(chunks) if os.waitstatus_to_exitcode(status) == 0 else b""
