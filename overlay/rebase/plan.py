"""Where a rebase or sync goes, before it starts; where the last one started from.

The rules a run must pass before :class:`overlay.rebase.run.Rebase` starts it:

* a sync's fork commit descends from the current one (``--force`` accepts a
  rewritten fork, or a move backwards on purpose);
* the fork commit holds no upstream commit the (new) pin lacks, for a sync and a
  rebase alike (``--allow-fork-ahead`` accepts it);
* the merge base is an ancestor of the pin (``--force`` accepts it);
* a pin that does not descend from the current one is said (a warning);
* no run is in progress; a new pin is an upstream commit (``--force`` turns the
  refusal into a warning), and on a move backwards or sideways the retarget entries citing
  commits the new pin lacks are named.

And what the last completed run left in ``.overlay/last-rebase.json``: the pin it
started from, the old end of the range ``drift`` and ``build`` attribute errors over.
"""

from typing import TYPE_CHECKING

from overlay import layout
from overlay.checks.pins import (
    backwards_citations,
    check_new_pin,
    fork_ahead,
    refuse_broken_ancestry,
    refuse_fork_ahead,
)
from overlay.errors import OverlayError
from overlay.git.fetch import FORK_HEADS
from overlay.git.run import is_sha
from overlay.rebase.report import last_rebase_pin, last_run_pins
from overlay.rebase.state import Bases, Fields

if TYPE_CHECKING:
    from overlay.git.store import Store
    from overlay.workspace import Workspace


class RunPlan(Fields):
    """A run that passed the rules, ready to start.

    Attributes:
        old: the manifest's commits now.
        new: the commits the run goes to (``new == old``: nothing to do).
        warnings: lines for the user, in the order they were found.
        fork_branch: the ``[fork] branch`` the run records (a sync to another fork
            branch, :func:`_sync_branch`); ``None`` keeps the manifest's.
    """

    __slots__ = ("old", "new", "warnings", "fork_branch")
    old: Bases
    new: Bases
    warnings: list[str]
    fork_branch: str | None

    def __init__(
        self,
        old: Bases,
        new: Bases,
        warnings: list[str] | None = None,
        fork_branch: str | None = None,
    ) -> None:
        self.old, self.new = old, new
        self.warnings = [] if warnings is None else warnings
        self.fork_branch = fork_branch

    @property
    def nothing_to_do(self) -> bool:
        """True when the run would move nothing."""
        return self.new == self.old


def plan_run(
    ws: "Workspace",
    kind: str,
    *,
    pin: str | None = None,
    fork: str | None = None,
    merge_base: str | None = None,
    force: bool = False,
    allow_fork_ahead: bool = False,
) -> RunPlan:
    """The commits a ``rebase`` (new ``pin``) or ``sync`` (new ``fork``) goes to.

    The manifest's three commits are fetched when missing; ``pin``, ``fork`` and
    ``merge_base`` are refs resolved in the store.

    Args:
        ws: the workspace (manifest, store with its remotes).
        kind: ``"rebase"`` or ``"sync"``.
        pin, fork, merge_base: the new commits (``None``: keep, or for a sync's merge
            base, compute it against the pin).
        force: accept a fork or merge base that breaks ancestry.
        allow_fork_ahead: accept a fork that merged upstream commits newer than the pin.
    Returns:
        :class:`RunPlan`; its warnings say a pin moving backwards or sideways.
    Raises:
        OverlayError: an ancestry rule is broken; the hint names the option that
            accepts it (exit 2).
        GitError, OfflineMiss: a commit is missing and cannot be fetched (exit 2).
    """
    manifest, store = ws.manifest, ws.store
    old = Bases(manifest.pin, manifest.fork_commit, manifest.merge_base)
    for sha, remotes in (
        (old.pin, ["upstream", "fork"]),
        (old.fork, ["fork"]),
        (old.merge_base, ["fork", "upstream"]),
    ):
        store.ensure_commit(sha, remotes)
    # An empty ref given is resolved, and refused there, not taken for none given.
    new_pin = store.resolve(pin, ["upstream"]) if pin is not None else old.pin
    new_fork = store.resolve(fork, ["fork"]) if fork is not None else old.fork
    if kind == "sync":
        new_base = _sync_base(store, old, new_pin, new_fork, merge_base)
        if not force:
            # The fork-ahead check below walks from the new fork commit to the pin:
            # walked first, the walk also shows the old fork commit below the new one
            # (where the check needs no walk, this one replaces that merge-base).
            store.commits_beyond(new_fork, new_pin)
            _refuse_fork_not_descending(store, old.fork, new_fork)
    else:
        new_base = old.merge_base
        if not force:
            refuse_broken_ancestry(store, new_base, new_fork)
    if new_pin != old.pin:
        # One walk of history answers whether the old pin and the merge base are both
        # below the new pin: the questions below about them then start no process.
        store.ancestors_of(new_pin, [old.pin, new_base])
    ahead_note = None
    if (new_fork, new_pin) != (old.fork, old.pin) and not _clear_forward(
        store, old, new_fork, new_pin
    ):
        # A rebase asks it too: a pin moved below what the fork merged carries those
        # upstream commits as fork delta just as a sync to such a fork does.
        ahead_note = _fork_ahead_note(store, new_fork, new_pin, allow_fork_ahead)
    if not force and not store.is_ancestor(new_base, new_pin):
        raise OverlayError(
            f"merge base {new_base[:12]} is not an ancestor of pin {new_pin[:12]}",
            hint="pass --force to accept it, or give --merge-base",
        )
    plan = RunPlan(old, Bases(new_pin, new_fork, new_base))
    if ahead_note:
        plan.warnings.append(ahead_note)
    if kind == "sync" and fork and new_fork != old.fork:
        plan.fork_branch, branch_note = _sync_branch(
            store, manifest.fork_branch, fork, new_fork
        )
        if branch_note:
            plan.warnings.append(branch_note)
    if new_pin != old.pin and not store.is_ancestor(old.pin, new_pin):
        plan.warnings.append(
            f"pin {new_pin[:12]} does not descend from the current pin {old.pin[:12]} "
            "(moving backwards or sideways)"
        )
    return plan


def _clear_forward(store: "Store", old: Bases, new_fork: str, new_pin: str) -> bool:
    """True when the pin moves forward with the same fork and the old pin had nothing
    of the fork's ahead of it: the new pin holds all the old one held, so nothing can
    be ahead of it either, and the common bump needs no walk of history (the old
    pin's answer is the one ``verify`` keeps, :func:`overlay.checks.pins.fork_ahead`)."""
    return (
        new_fork == old.fork
        and store.is_ancestor(old.pin, new_pin)
        and not fork_ahead(store, old.fork, old.pin)
    )


def _fork_ahead_note(
    store: "Store", fork: str, pin: str, allow_fork_ahead: bool
) -> str | None:
    """Refuse a fork that holds upstream commits the pin lacks; with
    ``allow_fork_ahead``, the warning that says what verify will report instead.

    Raises:
        OverlayError: the fork is ahead and it was not allowed (exit 2).
    """
    if not allow_fork_ahead:
        refuse_fork_ahead(store, fork, pin)
        return None
    store.refresh_upstream_refs()
    ahead = fork_ahead(store, fork, pin)
    if not ahead:
        return None
    return (
        f"--allow-fork-ahead: {len(ahead)} upstream commit(s) the pin lacks are "
        "carried as fork delta; verify reports them (MAN004) until the pin holds "
        "them (`--skip MAN004` where that is deliberate)"
    )


def _sync_branch(
    store: "Store", branch: str, ref: str, new_fork: str
) -> tuple[str | None, str | None]:
    """The ``[fork] branch`` a sync to ``new_fork`` records, and what to say about it.

    ``--fork`` that names a fork branch (``NAME`` or ``fork/NAME``, as the store has
    it) records that branch. A SHA is placed on the fork's branches as they are now
    (online: one fetch of the fork's branches first; offline: as the store last
    fetched them): one on the manifest's branch (its tip or an ancestor of it) keeps
    the branch, as does one the store cannot place (it holds no ``fork/BRANCH``). A
    commit off that branch takes the one fork branch that holds it (``git
    for-each-ref --contains``, only on this way); with none or several the branch is
    kept and the note says so.

    Args:
        store: the git store; branch: the manifest's ``[fork] branch``; ref: what
            ``--fork`` gave; new_fork: the commit it resolved to.
    Returns:
        ``(new branch or None to keep it, note or None)``.
    """
    if is_sha(ref):
        # Which branches hold it is what the fork says now (online; a name was
        # resolved after the same fetch). Offline, the store's last fetch answers.
        store.refresh_fork_refs()
    heads = store.fork_heads()
    named = ref.removeprefix("fork/")
    if not is_sha(ref) and heads.get(named) == new_fork:
        if named == branch:
            return None, None
        return named, f"[fork] branch: {branch} -> {named} (--fork named it)"
    tip = heads.get(branch)
    if tip is None or tip == new_fork or store.is_ancestor(new_fork, tip):
        return None, None
    holding = (
        store.git(
            "for-each-ref",
            "--format=%(refname)",
            "--contains",
            new_fork,
            FORK_HEADS,
        )
        .stdout.decode("utf-8", "surrogateescape")
        .split()
    )
    names = sorted(r.removeprefix(FORK_HEADS) for r in holding)
    off = (
        f"fork commit {new_fork[:12]} is not on {branch} (fork/{branch} is {tip[:12]})"
    )
    if len(names) == 1:
        return names[0], f"[fork] branch: {branch} -> {names[0]}: {off}"
    held = (
        f"the fork branches {', '.join(names)} hold it"
        if names
        else "no fork branch holds it"
    )
    return None, (
        f"{off} and {held}: [fork] branch still says {branch}; "
        "sync with --fork BRANCH to record another"
    )


def _sync_base(
    store: "Store", old: Bases, new_pin: str, new_fork: str, merge_base: str | None
) -> str:
    """A sync's merge base: ``--merge-base`` resolved, else git's merge base of the new
    fork commit and the pin."""
    if merge_base is not None:
        return store.resolve(merge_base, ["fork", "upstream"])
    base = store.merge_base(new_fork, new_pin)
    if base is None:
        raise OverlayError(
            f"fork commit {new_fork[:12]} and pin {new_pin[:12]} have no common ancestor",
            hint="give --merge-base",
        )
    return base


def _refuse_fork_not_descending(store: "Store", old_fork: str, new_fork: str) -> None:
    """Refuse a sync to a fork commit that does not descend from the current one: a
    move backwards says how far back, a rewrite says so.

    Raises:
        OverlayError: the hint names ``--force`` (exit 2).
    """
    if store.is_ancestor(old_fork, new_fork):
        return
    if store.is_ancestor(new_fork, old_fork):
        behind = store.out("rev-list", "--count", f"{new_fork}..{old_fork}")
        raise OverlayError(
            f"fork commit {new_fork[:12]} is {behind} commit(s) older than the current "
            f"{old_fork[:12]}: the sync would move the fork backwards",
            hint="pass --force to go back to it on purpose",
        )
    raise OverlayError(
        f"fork commit {new_fork[:12]} does not descend from {old_fork[:12]}",
        hint="pass --force if the fork was rewritten on purpose",
    )


def start_checks(ws: "Workspace", kind: str, plan: RunPlan, force: bool) -> list[str]:
    """The checks right before a run starts (and before "nothing to do").

    For a rebase to a new pin, refuse one that is not an upstream commit unless
    ``force``, and on a move backwards or sideways name the retarget entries citing
    commits the new pin lacks. (A run in progress and an open edit are refused before the plan,
    by the command: ``overlay.cli.runs``.)

    Args:
        ws: the workspace.
        kind: ``"rebase"`` or ``"sync"``.
        plan: from :func:`plan_run`.
        force: ``--force``.
    Returns:
        Warning lines for the user.
    Raises:
        OverlayError: the pin is refused (exit 2).
    """
    old, new = plan.old, plan.new
    if kind != "rebase" or new.pin == old.pin:
        return []
    warnings = check_new_pin(
        ws.store,
        new.pin,
        fork_commits=(old.fork, new.fork),
        old_pin=old.pin,
        force=force,
    )
    warnings += [
        citation.describe() + " (verify says so as FIX027 while it holds)"
        for citation in backwards_citations(ws.store, ws.root, old.pin, new.pin)
    ]
    return warnings


def last_run_start(root: str) -> str:
    """The pin the last completed rebase or sync started from (``pins.before.pin`` of
    ``.overlay/last-rebase.json``), whatever the manifest says now.

    Raises:
        OverlayError: no such report, or it does not say (exit 2).
    """
    before = (last_run_pins(root) or {}).get("before")
    if isinstance(before, dict) and "pin" in before:
        return str(before["pin"])
    raise OverlayError(
        f"no --from given and no {layout.LAST_REBASE_JSON} to take the old pin from"
    )


def drift_range(ws: "Workspace", drift_from: str | None) -> tuple[str, str] | None:
    """``(old pin, manifest pin)`` for drift attribution in ``build`` and ``ci``:
    ``drift_from`` resolved, else the pin the last rebase started from when it moved
    to the manifest's pin, else ``None``.

    Raises:
        GitError, OfflineMiss: ``drift_from`` does not resolve (exit 2).
    """
    pin = ws.manifest.pin
    if drift_from is None:
        drift_from = last_rebase_pin(ws.root, pin)
        if drift_from is None:
            return None
    return ws.store.resolve(drift_from, ["upstream"]), pin
