"""Sanity of a new MLX pin for ``overlay rebase --onto``.

A pin must be an upstream MLX commit: one that an upstream branch or tag
contains. The fork commit (reachable in a mirror through ``refs/pull/*``) or a
commit only on the fork is refused unless ``--force``. Moving the pin backwards
is allowed, but the patches whose ``LOCAL_FIXES.md`` retarget entries cite an
upstream commit the new pin lacks are named: they follow API the new pin does
not have. A fork commit for ``overlay sync`` must not hold upstream commits the
pin lacks (shared case 18).
"""

import os
from collections.abc import Callable
from typing import NamedTuple

from overlay import layout
from overlay.digests import sha256
from overlay.errors import GitError, OverlayError, PatchFormatError, UnsafePath
from overlay.git.fetch import UPSTREAM_SCOPES
from overlay.git.store import Store, is_sha
from overlay.lazy import lazy_pattern
from overlay.records import fixes
from overlay.records.series import load_series

#: An abbreviated or full commit name in prose (8 to 40 hex digits, whole word).
_SHA_RE = lazy_pattern(r"(?<![0-9A-Za-z])[0-9a-f]{8,40}(?![0-9A-Za-z])")


class Citation(NamedTuple):
    """A retarget entry citing an upstream commit that the new pin lacks.

    Attributes:
        entry: the ``LOCAL_FIXES.md`` entry number.
        patches: the series patches with ``Local-Fix: <entry>`` (may be empty:
            an entry for resolutions only).
        commits: the cited names (as written) the new pin lacks, in text order.
    """

    entry: int
    patches: tuple[str, ...]
    commits: tuple[str, ...]

    def describe(self, pin: str = "the new pin") -> str:
        """One line: who follows which commits ``pin`` (as the line names it) lacks."""
        who = (
            ", ".join(self.patches) + f" (LOCAL_FIXES entry {self.entry})"
            if self.patches
            else f"LOCAL_FIXES entry {self.entry} (no patch)"
        )
        return f"{who} follows upstream {', '.join(self.commits)}, which {pin} lacks"


def _ancestor(store: Store, a: str, b: str) -> bool:
    """Whether commit ``a`` is an ancestor of ``b``."""
    return store.is_ancestor(a, b)


def upstream_contains(store: Store, sha: str, *, fetch: bool = True) -> bool | None:
    """Whether an upstream branch or tag of the git store contains ``sha``.

    The branches are asked first, the tags only when no branch contains it: a pin on
    upstream's history is on a branch (most often ``main``), and git's walk from the
    branch tips alone costs half of the walk from every tag as well.

    Args:
        store: git store with an ``upstream`` remote.
        sha: full commit name (in the store).
        fetch: refresh ``refs/remotes/upstream/*`` and the tags from ``upstream``
            first (skipped when the store is offline).
    Returns:
        ``True`` or ``False``; ``None`` when the store holds no upstream branch and no
        tag at all (nothing to check against, e.g. offline before any fetch).
    """
    if fetch:
        store.refresh_upstream_refs()
    tips = store.listed_upstream_tips()
    if tips is not None:
        # Listed by this process since its last fetch (a pin bump's plan lists them):
        # a tip, as ``main`` is for a bump to it, is contained, and no tip at all is
        # nothing to check against, without a process.
        if sha in tips:
            return True
        if not tips:
            return None
    for scope in UPSTREAM_SCOPES:
        if store.git(
            "for-each-ref", "--count=1", "--format=%(refname)", "--contains", sha, scope
        ).stdout.strip():
            return True
    if tips:
        return False  # upstream refs there are (listed above), and none contains it
    # No ref contains it: tell "none at all" from "none of them" (one more process,
    # only on this way).
    if not store.git(
        "for-each-ref", "--count=1", "--format=%(refname)", *UPSTREAM_SCOPES
    ).stdout.strip():
        return None
    return False


def check_new_pin(
    store: Store,
    new_pin: str,
    *,
    fork_commits: tuple[str, ...] = (),
    old_pin: str | None = None,
    force: bool = False,
    fetch: bool = True,
) -> list[str]:
    """Refuse a new pin that is not an upstream commit, unless ``force``.

    An upstream commit is one the old pin's history holds, or one that an upstream
    branch or tag of the store contains (:data:`UPSTREAM_SCOPES`, the definition
    :func:`fork_ahead` uses too).

    Args:
        store: git store with ``upstream`` and ``fork`` remotes.
        new_pin: full commit name of the proposed pin (in the store).
        fork_commits: the fork commits in play (current and new); the pin may not be one.
        old_pin: the current pin, whose history is upstream's.
        force: accept anyway (the refusal becomes a warning).
        fetch: see :func:`upstream_contains`.
    Returns:
        Warning lines for the user (empty when the pin is sound).
    Raises:
        OverlayError: the pin equals a fork commit, or no upstream branch or tag
        contains it; the message says why, the hint names ``--force`` (exit 2).
    """
    problem = None
    warnings: list[str] = []
    if new_pin in fork_commits:
        problem = (
            "it is the fork commit, not an upstream MLX commit "
            "(the fork delta would be carried onto itself)"
        )
    elif old_pin is not None and store.is_ancestor(new_pin, old_pin):
        pass  # the pin's own history is upstream's
    else:
        contained = upstream_contains(store, new_pin, fetch=fetch)
        if contained is None:
            warnings.append(
                f"cannot check that pin {new_pin[:12]} is on an upstream branch or tag: the git "
                "store has none (offline?)"
            )
        elif not contained:
            problem = (
                "no upstream branch or tag contains it (looked in refs/remotes/upstream/* "
                "and the tags of the git store): a fork-only commit or an unmerged pull "
                "request?"
            )
    if problem is None:
        return warnings
    if force:
        return warnings + [
            f"pin {new_pin[:12]}: {problem}; accepted because of --force"
        ]
    raise OverlayError(
        f"refusing pin {new_pin[:12]}: {problem}", hint="pass --force to use it anyway"
    )


def backwards_citations(
    store: Store, root: str, old_pin: str, new_pin: str
) -> list[Citation]:
    """For a pin moved backwards or sideways: the retarget entries citing upstream
    commits the new pin lacks.

    An entry of the retarget section of ``LOCAL_FIXES.md`` cites a commit by an 8 to
    40 hex word in its title or text; a cited commit counts when it resolves in the
    git store, the old pin contains it and the new pin does not. Names that resolve
    to nothing (another object, unknown offline) are ignored. A pin moved sideways
    (to an upstream branch) lacks such commits as a pin moved back does, and verify
    reports them all the same (FIX027): the run says so when it starts.

    Args:
        store: git store.
        root: overlay repository.
        old_pin, new_pin: full commit names.
    Returns:
        One :class:`Citation` per entry with such commits, in entry order; empty when
        the new pin descends from the old one (then it holds all the old one holds)
        or there is no LOCAL_FIXES.md.
    """
    if new_pin == old_pin or _ancestor(store, old_pin, new_pin):
        return []
    return _citations(
        store,
        root,
        lambda full: (
            _ancestor(store, full, old_pin) and not _ancestor(store, full, new_pin)
        ),
    )


def pin_lacks_citations(
    store: Store, root: str, pin: str, fork: str
) -> list[tuple[int, Citation]]:
    """The retarget entries citing an upstream commit that the pin's history lacks
    (verify's FIX027): the run's backwards warning, kept while it holds.

    A cited commit counts when it resolves in the git store, is not an ancestor of
    the pin, and is an upstream commit: an upstream branch or tag of the store
    contains it, or (a store with none of those) the fork commit does not (a fork
    commit cited for its own reasons is not upstream API the pin lacks).

    Args:
        store: git store.
        root: overlay repository.
        pin, fork: the manifest's pin and fork commit (full names).
    Returns:
        ``(line of the entry, citation)`` per entry with such commits, in entry order.
    """
    lines: dict[int, int] = {}

    def lacks(full: str) -> bool:
        if _ancestor(store, full, pin):
            return False
        contained = upstream_contains(store, full, fetch=False)
        return contained if contained is not None else not _ancestor(store, full, fork)

    found = _citations(store, root, lacks, lines)
    return [(lines.get(c.entry, 0), c) for c in found]


def _citations(
    store: Store,
    root: str,
    lacks: Callable[[str], bool],
    lines: dict[int, int] | None = None,
) -> list[Citation]:
    """The retarget entries of ``root``'s ``LOCAL_FIXES.md`` citing a commit that
    ``lacks`` (given its full name) picks; ``lines`` gets each entry's line."""
    path = os.path.join(root, layout.LOCAL_FIXES)
    if not os.path.isfile(path):
        return []
    section = fixes.load(path).section("retarget")
    if section is None:
        return []
    found: list[tuple[int, tuple[str, ...]]] = []
    for entry in section.entries:
        lacking = [
            word
            for word in dict.fromkeys(_SHA_RE.findall(f"{entry.title} {entry.text}"))
            if (full := _commit_named(store, word)) is not None and lacks(full)
        ]
        if lacking:
            if lines is not None:
                lines[entry.number] = entry.line
            found.append((entry.number, tuple(lacking)))
    if not found:
        # The series names each citing entry's patches: it is read (every patch parsed)
        # only when an entry cites what the pin lacks, not on every verify and bump.
        return []
    try:
        series = load_series(root)
    except (OverlayError, PatchFormatError, UnsafePath, OSError):
        series = []
    by_fix: dict[int, list[str]] = {}
    for patch in series:
        try:
            number = int(str(patch.local_fix))
        except (TypeError, ValueError):
            continue
        by_fix.setdefault(number, []).append(patch.name)
    return [
        Citation(number, tuple(by_fix.get(number, ())), lacking)
        for number, lacking in found
    ]


def _commit_named(store: Store, word: str) -> str | None:
    """The full name of the commit ``word`` names in the store, else ``None``."""
    try:
        proc = store.git(
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            f"{word}^{{commit}}",
            check=False,
        )
    except GitError:
        return None
    full = proc.stdout.decode().strip()
    return full if proc.returncode == 0 and full else None


def fork_ahead(store: Store, fork: str, pin: str) -> list[str]:
    """The upstream commits that the fork's history holds and the pin's does not.

    An upstream commit is one that an upstream branch or tag of the store contains
    (:data:`UPSTREAM_SCOPES`, any branch, not only ``main``) or that the pin's history
    holds: the one definition every command uses. The fork delta is ``merge-base..fork``;
    a fork that merged upstream commits newer than the pin would carry them as if they
    were its own (shared case 18).

    Args:
        store: git store (its upstream refs fetched by
            :meth:`overlay.git.fetch.Fetching.refresh_upstream_refs`).
        fork: the fork commit whose history is asked; pin: the pin.
    Returns:
        ``["<sha12> <subject>", ...]``, newest first; empty when there is none, or when
        the store holds no upstream branch or tag (nothing to tell upstream by). Four git
        processes at most.
    """
    tips = store.upstream_tips()
    if not tips:
        return []
    # The answer depends on the two commits and upstream's tips only: kept in the
    # store, a later question about the same three costs the one for-each-ref above.
    digest = sha256("\n".join(tips).encode()).hexdigest()
    key = f"fork-ahead {fork} {pin} {digest}"
    known = store.remembered(key)
    if isinstance(known, str):
        return known.splitlines()
    ahead = _fork_ahead_of(store, fork, pin, tips)
    if is_sha(fork) and is_sha(pin):
        store.remember(key, "\n".join(ahead))
    return ahead


#: The most commits of :func:`_upstream_beyond` kept in the store (about 41 bytes
#: each): a pin years behind upstream's branches is asked of git each time instead.
UPSTREAM_BEYOND_MAX = 20_000


def _fork_ahead_of(store: Store, fork: str, pin: str, tips: list[str]) -> list[str]:
    """:func:`fork_ahead` asked of git: the fork's commits the pin lacks that an
    upstream tip of ``tips`` holds."""
    ours = store.commits_beyond(fork, pin)
    if not ours:
        return []
    upstream = _upstream_beyond(store, pin, tips)
    ahead = [c for c in ours if c in upstream]
    if not ahead:
        return []
    return store.out(
        "log",
        "--no-walk=unsorted",
        "--stdin",
        "--format=%h %s",
        "--abbrev=12",
        input=("\n".join(ahead) + "\n").encode(),
    ).splitlines()


def _upstream_beyond(store: Store, pin: str, tips: list[str]) -> set[str]:
    """The commits upstream's tips hold and the pin does not (``git rev-list TIPS
    ^PIN``), kept in the store by the pin and the tips (``overlay-ahead``): the answer
    never changes for them, and every command with the same pin since the last fetch
    (the verify before a sync, the sync, the verify after) asks the same."""
    key = sha256("\n".join([pin, *tips]).encode()).hexdigest() if is_sha(pin) else ""
    kept = store.cache_read("overlay-ahead", key) if key else None
    commits = kept.get("commits") if kept else None
    if isinstance(commits, list) and all(isinstance(c, str) for c in commits):
        return set(commits)
    found = store.out(
        "rev-list", "--stdin", input=("\n".join([*tips, f"^{pin}"]) + "\n").encode()
    ).split()
    if key and len(found) <= UPSTREAM_BEYOND_MAX:
        store.cache_write("overlay-ahead", key, {"commits": found})
    return set(found)


def refuse_fork_ahead(store: Store, fork: str, pin: str) -> None:
    """Raise when the fork holds upstream commits newer than the pin (see :func:`fork_ahead`).

    Raises:
        OverlayError: naming the first few such commits and ``--allow-fork-ahead`` (exit 2).
    """
    store.refresh_upstream_refs()
    ahead = fork_ahead(store, fork, pin)
    if ahead:
        shown = "; ".join(ahead[:3]) + (
            f"; and {len(ahead) - 3} more" if len(ahead) > 3 else ""
        )
        raise OverlayError(
            f"fork commit {fork[:12]} has merged {len(ahead)} upstream commit(s) that pin "
            f"{pin[:12]} lacks ({shown}): they would be carried as fork delta",
            hint="rebase onto a pin that holds them first (`overlay rebase --onto`), or pass "
            "--allow-fork-ahead to carry them anyway",
        )


def refuse_broken_ancestry(store: Store, merge_base: str, fork: str) -> None:
    """Refuse to rewrite records on a manifest whose merge base is not an ancestor of
    its fork commit (MAN003): the fork delta from it undoes upstream work, and a patch
    carried onto that layer would be recorded against it.

    Args:
        store: git store holding both commits.
        merge_base, fork: the manifest's ``[fork] merge-base`` and ``commit``.
    Raises:
        OverlayError: naming both commits and ``overlay sync`` (exit 2).
    """
    if not store.is_ancestor(merge_base, fork):
        raise OverlayError(
            f"merge-base {merge_base[:12]} is not an ancestor of fork commit "
            f"{fork[:12]} (MAN003): no patch is rewritten on top of it",
            hint="run `overlay sync --fork "
            f"{fork[:12]}` to recompute the merge base, or correct [fork] merge-base",
        )


def uncarried_changes(
    store: Store, carry: Callable[[str], bool], old: str, new: str
) -> list[tuple[str, list[str]]]:
    """The paths the fork changed from ``old`` to ``new`` that the overlay does not
    carry (``[carry]``: excluded, or never included), each with the fork commits that
    changed it: what a sync does not take, which a team must see.

    Args:
        store: git store holding both commits.
        carry: the manifest's carried-path predicate (``Manifest.carry``).
        old, new: fork commits; where ``old`` is no ancestor of ``new`` (a sync
            sideways or back), a commit only ``old`` holds is named too, marked
            ``(only in the old fork commit)``: the new one drops its change.
    Returns:
        ``[(path, ["<sha12> <subject>", ...]), ...]`` sorted by path, commits newest
        first; two git processes when there is anything to say, one inside the
        store's reading block (:meth:`overlay.git.store.Store.diff_tree`).
    """
    if old == new:
        return []
    # Inside the run's reader (a sync's commit), the trees that differ are read through
    # it: a few reads instead of a git process.
    paths = sorted(row[5] for row in store.diff_tree(old, new) if not carry(row[5]))
    if not paths:
        return []
    log = store.git(
        "log",
        "-z",
        "--name-only",
        "--no-renames",
        "--format=%x01%m%h %s",
        "--abbrev=12",
        "--left-right",
        f"{old}...{new}",
        "--",
        *paths,
        check=False,
    ).stdout.decode("utf-8", "surrogateescape")
    by_path: dict[str, list[str]] = {p: [] for p in paths}
    # "\x01<side><sha> <subject>\0\n<path>\0<path>\0" per commit; the side is "<"
    # for a commit of old's history only (none where old is an ancestor of new).
    for record in log.split("\x01")[1:]:
        head, _, names = record.partition("\0")
        side, head = head[:1], head[1:]
        if side == "<":
            head += " (only in the old fork commit)"
        for name in names.lstrip("\n").split("\0"):
            if name in by_path:
                by_path[name].append(head)
    return [(p, by_path[p]) for p in paths]
