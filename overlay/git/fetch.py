"""Fetching into the git store: a mixin of :class:`overlay.git.store.Store`, kept apart so
that module stays a readable size (the remotes themselves are set there)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Sequence
from typing import TYPE_CHECKING

from overlay.errors import GitError, OfflineMiss
from overlay.git.packs import tidy_packs
from overlay.git.run import is_sha, missing_commit
from overlay.report.progress import LiveProgress

if TYPE_CHECKING:
    from overlay.git.objects import ObjectReader

#: Every fetch leaves the store's commit-graph up to date (git's ``fetch.writeCommitGraph``,
#: set for the fetch only, through git's ``GIT_CONFIG_*`` variables; git writes it
#: incrementally, as a chain under ``objects/info/commit-graphs/``): git's file of the
#: commits with their generation numbers, which ancestry questions walk instead of
#: parsing commits, such as whether a new pin is on an upstream branch or tag
#: (``for-each-ref --contains`` over every upstream ref; docs/engine.md has the cost).
COMMIT_GRAPH_ENV = {
    "GIT_CONFIG_COUNT": "1",
    "GIT_CONFIG_KEY_0": "fetch.writeCommitGraph",
    "GIT_CONFIG_VALUE_0": "true",
}


#: The refs of the git store that say what upstream holds: its branches as fetched and
#: the tags (tags come from ``upstream`` only: the fork's fetches take none, see
#: :func:`_tags_option`). With the pin's history, the one definition of "an upstream
#: commit" (:func:`overlay.checks.pins.fork_ahead`,
#: :func:`overlay.checks.pins.check_new_pin`, MAN004; docs/engine.md).
UPSTREAM_SCOPES = ("refs/remotes/upstream/", "refs/tags/")
#: Where the store keeps the fork's branches (``git fetch fork`` of a ref by name).
FORK_HEADS = "refs/remotes/fork/"


class Fetching:
    """Commits fetched on demand by SHA, user-given refs resolved.

    Needs ``offline``, ``_remote_urls``, ``git(...)``, ``lock()`` and ``has_object`` of
    the store.
    """

    offline: bool
    git_dir: str
    _remote_urls: dict[str, str]
    #: :meth:`upstream_tips` as last listed; ``None`` until then and after a fetch.
    _tips: list[str] | None = None
    #: :meth:`fork_heads` as last listed, with :attr:`_tips`.
    _fork_heads: dict[str, str] | None = None

    def upstream_tips(self) -> list[str]:
        """The commits that upstream's branches and tags in the store point at
        (:data:`UPSTREAM_SCOPES`), sorted, each once.

        Listed by one ``for-each-ref`` the first time a process asks (with
        :meth:`fork_heads`), and kept until overlay fetches into the store: a pin bump's
        plan asks it (whether the fork is ahead of the old pin) and its pin check reads
        it again (whether the new pin is a tip, as a bump to upstream's ``main`` is),
        for one process.

        Returns:
            Full commit names; empty when the store holds no upstream branch or tag.
        """
        if self._tips is None:
            self._list_refs()
        assert self._tips is not None
        return self._tips

    def fork_heads(self) -> dict[str, str]:
        """The fork's branches as the store last fetched them: ``{branch: commit}``
        (``refs/remotes/fork/*``, the branch names without that prefix); listed with
        :meth:`upstream_tips`, by the same process."""
        if self._fork_heads is None:
            self._list_refs()
        assert self._fork_heads is not None
        return self._fork_heads

    def _list_refs(self) -> None:
        """One ``for-each-ref`` over upstream's scopes and the fork's branches."""
        out = self.git(
            "for-each-ref",
            "--format=%(objectname) %(refname)",
            *UPSTREAM_SCOPES,
            FORK_HEADS,
        ).stdout.decode("utf-8", "surrogateescape")
        tips, heads = set(), {}
        for line in out.splitlines():
            oid, _, ref = line.partition(" ")
            if ref.startswith(FORK_HEADS):
                heads[ref[len(FORK_HEADS) :]] = oid
            else:
                tips.add(oid)
        self._tips, self._fork_heads = sorted(tips), heads

    def listed_upstream_tips(self) -> list[str] | None:
        """:meth:`upstream_tips` when this process listed them since its last fetch,
        else ``None`` (listing them costs a git process; this costs none)."""
        return self._tips

    def _fetch(self, *args: str) -> int:
        """``git fetch ARGS`` into the store (the commit-graph kept up to date, the
        packs rolled up past git's limit: :func:`overlay.git.packs.tidy_packs`); its
        exit status. The upstream tips listed before are forgotten: the fetch may
        have moved them (and the fork's branches)."""
        self._tips = self._fork_heads = None
        code = self.git("fetch", *args, env=COMMIT_GRAPH_ENV, check=False).returncode
        # A fetch leaves a pack: past git's limit, the store's packs are rolled up
        # (git's own `maintenance --auto` is off in overlay's children).
        tidy_packs(self.git_dir)
        return code

    def git(
        self, *args: str, env: dict[str, str] | None = None, check: bool = True
    ) -> subprocess.CompletedProcess:
        """Run git against the store (:meth:`overlay.git.store.Store.git`)."""
        raise NotImplementedError

    def lock(self) -> contextlib.AbstractContextManager[None]:
        """The store's writer lock (:meth:`overlay.git.store.Store.lock`)."""
        raise NotImplementedError

    def has_object(self, oid: str, kind: str = "commit") -> bool:
        """:meth:`overlay.git.store.Store.has_object`."""
        raise NotImplementedError

    @property
    def reader(self) -> ObjectReader | None:
        """:attr:`overlay.git.store.Store.reader`."""
        raise NotImplementedError

    def point_remotes(self) -> None:
        """:meth:`overlay.git.store.Store.point_remotes`."""
        raise NotImplementedError

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
        self.point_remotes()
        answered = []  # the remotes whose branches could be fetched
        # A first fetch of a large mirror takes minutes: say what, from where, how long.
        with self.lock(), LiveProgress("fetch") as live:
            for remote in remotes:
                keep = f"refs/overlay/keep/{sha}"
                live.show(
                    f"commit {sha[:12]} from {remote} ({self._remote_urls.get(remote, '?')})"
                )
                if self._fetch(
                    "-q", "--no-tags", remote, f"{sha}:{keep}"
                ) == 0 and self.has_object(sha):
                    return
            for remote in remotes:
                live.show(
                    f"every branch of {remote} ({self._remote_urls.get(remote, '?')}), "
                    f"looking for {sha[:12]}"
                )
                if (
                    self._fetch(
                        "-q",
                        _tags_option(remote),
                        remote,
                        f"+refs/heads/*:refs/remotes/{remote}/*",
                    )
                    == 0
                ):
                    answered.append(remote)
                if self.has_object(sha):
                    self.git("update-ref", f"refs/overlay/keep/{sha}", sha)
                    return
        raise missing_commit(sha, remotes, answered, where)

    def refresh_upstream_refs(self) -> None:
        """Refresh ``refs/remotes/upstream/*`` and the tags from ``upstream``, pruning
        what upstream deleted, with a progress line (a first fetch of every branch of
        a large mirror takes seconds to minutes). Online only; a failed fetch is quiet:
        the checks that want the refs then use what the store holds."""
        self._refresh_refs("upstream", "every branch and tag")

    def refresh_fork_refs(self) -> None:
        """Refresh ``refs/remotes/fork/*`` from ``fork`` (no tags), pruning what the fork
        deleted, as :meth:`refresh_upstream_refs` does upstream's: where a sync asks
        which fork branch holds its commit. Online only; a failed fetch is quiet."""
        self._refresh_refs("fork", "every branch")

    def _refresh_refs(self, remote: str, what: str) -> None:
        """``git fetch --prune REMOTE +refs/heads/*:refs/remotes/REMOTE/*`` (and tags as
        :func:`_tags_option` says), with a progress line; nothing offline."""
        if self.offline:
            return
        url = self._remote_urls.get(remote, "?")
        self.point_remotes()
        with self.lock(), LiveProgress("fetch") as live:
            live.show(f"{what} of {remote} ({url})")
            self._fetch(
                "-q",
                _tags_option(remote),
                "--prune",
                remote,
                f"+refs/heads/*:refs/remotes/{remote}/*",
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
            if not self.has_object(ref):
                self._refuse_other_kind(ref)
            self.ensure_commit(ref, remotes)
            return ref
        if not self.offline:
            # A name (branch, tag) means what the remote says now: refresh first.
            self.point_remotes()
            with self.lock(), LiveProgress("fetch") as live:
                for remote in remotes:
                    live.show(f"branches of {remote} to resolve {ref!r}")
                    self._fetch(
                        "-q",
                        _tags_option(remote),
                        "--prune",
                        remote,
                        f"+refs/heads/*:refs/remotes/{remote}/*",
                    )
        sha = self._rev_parse_any(ref, remotes)
        if sha is None:
            self._refuse_ambiguous(ref)
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

    def _refuse_ambiguous(self, ref: str) -> None:
        """Refuse a short SHA several commits start with, naming them (git's own
        answer, asked only once ``ref`` named nothing: an ambiguous name is no answer
        to ``rev-parse --quiet``, nor to the reader).

        Raises:
            GitError: ``ref`` is an ambiguous short SHA (exit 2).
        """
        if len(ref) < 4 or ref.strip("0123456789abcdefABCDEF"):
            return
        if self.reader is not None and not self.reader.ambiguous(ref):
            return  # the run's reader says so without a process
        err = self.git(
            "rev-parse",
            "--verify",
            "--end-of-options",
            f"{ref}^{{commit}}",
            check=False,
        ).stderr.decode("utf-8", "replace")
        if "is ambiguous" not in err:
            return
        # git's hint lines: "hint:   <sha> commit <date> - <subject>"
        commits = [
            line.split()[1]
            for line in err.splitlines()
            if line.startswith("hint: ") and line.split()[2:3] == ["commit"]
        ]
        raise GitError(
            f"ambiguous ref {ref!r}: "
            + (
                f"commits {', '.join(commits)} start with it"
                if commits
                else "more than one object's name starts with it"
            ),
            hint="give more characters of the SHA",
        )

    def _refuse_other_kind(self, sha: str) -> None:
        """Refuse a full SHA the store holds as a tree, a blob or a tag of no commit:
        fetching it as a commit would only end in "no branch or tag holds it".

        Raises:
            GitError: naming what the object is (exit 2).
        """
        if self.reader is not None:
            found = self.reader.info(sha)
            kind = found[1] if found is not None else ""
        else:
            proc = self.git("cat-file", "-t", sha, check=False)
            kind = proc.stdout.decode().strip() if proc.returncode == 0 else ""
        if kind and kind != "commit":
            raise GitError(
                f"{sha} is a {kind} in the git store, not a commit",
                hint="give a commit: its SHA, a tag or an upstream branch",
            )

    def _rev_parse_any(self, ref: str, remotes: Sequence[str]) -> str | None:
        """The commit ``ref`` names as a remote branch, a tag, or as given; ``None``.

        Inside a reading block (:meth:`overlay.git.store.Store.reading`) the run's
        ``cat-file --batch-command`` answers (``info NAME^{commit}``: git's own name
        lookup, as ``rev-parse --verify`` does it; an ambiguous short name is no
        answer in both): a pin bump to a short SHA asked three ``rev-parse`` processes
        before it found it as given. A name with white space or a control character
        would not fit the reader's one line, so git is asked as before.
        """
        candidates = (
            *(f"refs/remotes/{r}/{ref}" for r in remotes),
            f"refs/tags/{ref}",
            ref,
        )
        reader = self.reader
        if (
            reader is not None
            and ref.isprintable()
            and not any(c.isspace() for c in ref)
        ):
            for candidate in candidates:
                found = reader.info(f"{candidate}^{{commit}}")
                if found is not None and found[1] == "commit":
                    return found[0]
            return None
        for candidate in candidates:
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


def _tags_option(remote: str) -> str:
    """``--tags`` for the upstream remote, ``--no-tags`` for any other: the store's
    tags are upstream's (:data:`UPSTREAM_SCOPES`), and a fork's tag of a
    fork-only commit must not make that commit "upstream"."""
    return "--tags" if remote == "upstream" else "--no-tags"
