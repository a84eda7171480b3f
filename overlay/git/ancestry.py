"""The git store's remembered ancestry answers (``overlay-ancestry.json``): a mixin of
:class:`overlay.git.store.Store`, kept apart so that module stays a readable size."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence

from overlay.fs.atomic import atomic_write
from overlay.git.run import is_sha


class RememberedAncestry:
    """``merge-base`` questions whose answers never change, remembered in the store.

    Needs ``git_dir``, ``git(...)`` and ``_known`` (``None`` until read) of the store.
    """

    git_dir: str
    _known: dict | None
    #: ``(tip, exclude) -> (commits, their set)`` of :meth:`commits_beyond`, for this
    #: process only (a long fork's list is not worth a file).
    _walks: dict[tuple[str, str], tuple[list[str], frozenset[str]]]

    def git(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """Run git against the store (:meth:`overlay.git.store.Store.git`)."""
        raise NotImplementedError

    # -- ancestry, remembered -------------------------------------------------
    def is_ancestor(self, a: str, b: str) -> bool:
        """Whether ``a`` is an ancestor of ``b``, remembered in the store for full commit
        names: there one ``git merge-base a b`` answers it and the question the other way
        round (a rebase asks both of the old and the new pin); for other names, ``git
        merge-base --is-ancestor a b``.

        The answer for two commits never changes, and it is a walk of history each time
        (a noticeable part of every uncached verify, docs/engine.md).
        An answer git could not give (a missing object) is not remembered.

        Returns:
            True when ``a`` is an ancestor of (or equal to) ``b``.
        """
        key = f"is-ancestor {a} {b}"
        known = self._ancestry().get(key)
        if known is not None:
            return bool(known)
        if any(tip == b and a in seen for (tip, _), (_, seen) in self._walks.items()):
            return True  # a walk from b listed a (commits_beyond)
        if is_sha(a) and is_sha(b):
            # One walk answers both directions: a is an ancestor of b exactly when it is
            # their merge base (then the only one), and b of a when b is.
            base = self._ask_merge_base(a, b)
            if base is not None:
                self._remember_all(
                    {
                        f"merge-base {a} {b}": base,
                        key: base == a,
                        f"is-ancestor {b} {a}": base == b,
                    }
                )
                return base == a
        code = self.git("merge-base", "--is-ancestor", a, b, check=False).returncode
        return code == 0

    def ancestors_of(self, tip: str, commits: Sequence[str]) -> bool:
        """Whether every one of ``commits`` is an ancestor of (or equal to) ``tip``, asked
        of git once for all of them (``git merge-base --independent``: of the set with
        ``tip``, only ``tip`` is left exactly when each is reachable from it).

        A yes is remembered for each commit as :meth:`is_ancestor` remembers it, both
        ways round, so that its questions about them cost no process. A no is not
        remembered (git does not say which commit is not); ask :meth:`is_ancestor`
        for each then. Full commit names only; anything else is asked one by one.

        Returns:
            True when each of ``commits`` is an ancestor of ``tip``.
        """
        if not (is_sha(tip) and all(is_sha(c) for c in commits)):
            return all(self.is_ancestor(c, tip) for c in commits)
        known = [self._ancestry().get(f"is-ancestor {c} {tip}") for c in commits]
        if False in known:
            return False
        asked = [c for c, answer in zip(commits, known, strict=True) if answer is None]
        if not asked:
            return True
        proc = self.git("merge-base", "--independent", tip, *asked, check=False)
        if proc.returncode != 0 or proc.stdout.split() != [tip.encode()]:
            return False
        answers: dict[str, bool | str] = {}
        for c in asked:
            answers[f"is-ancestor {c} {tip}"] = True
            answers[f"is-ancestor {tip} {c}"] = c == tip
            answers[f"merge-base {c} {tip}"] = c
        self._remember_all(answers)
        return True

    def commits_beyond(self, tip: str, exclude: str) -> list[str]:
        """The commits ``tip``'s history holds and ``exclude``'s does not (``git
        rev-list tip ^exclude``), newest first; asked of git once per process and pair.

        Each listed commit is an ancestor of ``tip``, and :meth:`is_ancestor` answers
        from the list without a process: a sync walks from the new fork commit to the
        pin once, for the fork-ahead check, and that walk also says that the old fork
        commit is below the new one. (A commit that is not listed may still be an
        ancestor, through ``exclude``'s history: that is asked of git. The list says
        nothing certain about the merge base: git's walk behind ``^exclude`` trusts
        commit dates, ``git merge-base`` does not.)

        Args:
            tip, exclude: commit names.
        Returns:
            Full commit names, in ``git rev-list`` order.
        Raises:
            GitError: git refused the walk (a missing commit).
        """
        walked = self._walks.get((tip, exclude))
        if walked is None:
            ours = self.git("rev-list", tip, f"^{exclude}").stdout.decode().split()
            walked = self._walks[(tip, exclude)] = (ours, frozenset(ours))
        return walked[0]

    def merge_base(self, a: str, b: str) -> str | None:
        """``git merge-base a b`` (the best common ancestor), remembered like :meth:`is_ancestor`,
        with what it says of ancestry: the base is an ancestor of both.

        Returns:
            Its name, or ``None`` when the two have no common ancestor.
        """
        key = f"merge-base {a} {b}"
        known = self._ancestry().get(key)
        if known is not None:
            return known or None
        base = self._ask_merge_base(a, b)
        if base is not None and is_sha(a) and is_sha(b):
            answers: dict[str, bool | str] = {key: base}
            if base:
                answers[f"is-ancestor {base} {a}"] = True
                answers[f"is-ancestor {base} {b}"] = True
            self._remember_all(answers)
        return base or None

    def _ask_merge_base(self, a: str, b: str) -> str | None:
        """``git merge-base a b``: the base, ``""`` when the two have none, ``None`` when
        git could not answer (a missing object: nothing to remember)."""
        proc = self.git("merge-base", a, b, check=False)
        return proc.stdout.decode().strip() if proc.returncode in (0, 1) else None

    def remembered(self, key: str) -> bool | str | None:
        """An answer :meth:`remember` kept for ``key`` (``None``: none is kept)."""
        return self._ancestry().get(key)

    def remember(self, key: str, value: bool | str) -> None:
        """Keep the answer ``value`` for ``key``: only for questions whose answer never
        changes for the same key (the key must name every input, commits in full)."""
        self._remember(key, value)

    _ANCESTRY = "overlay-ancestry.json"
    _ANCESTRY_MAX = 2000

    def _ancestry(self) -> dict:
        """The remembered ancestry answers, read from the store once."""
        if self._known is None:
            try:
                with open(
                    os.path.join(self.git_dir, self._ANCESTRY), encoding="utf-8"
                ) as fh:
                    data = json.load(fh)
                self._known = data if isinstance(data, dict) else {}
            except (OSError, ValueError):
                self._known = {}
        return self._known

    def _remember(self, key: str, value: bool | str) -> None:
        """Remember one ancestry answer in the store (best effort)."""
        self._remember_all({key: value})

    def _remember_all(self, answers: dict[str, bool | str]) -> None:
        """Remember ancestry answers in the store with one write (best effort)."""
        known = self._ancestry()
        if len(known) + len(answers) > self._ANCESTRY_MAX:
            known.clear()  # upstream tips move with every fetch: keep the file small, not complete
        known.update(answers)
        try:
            atomic_write(
                os.path.join(self.git_dir, self._ANCESTRY),
                json.dumps(known).encode(),
                durable=False,
            )
        except OSError:
            pass  # only costs the walk next time
