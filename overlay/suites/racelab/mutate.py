"""The mutation check of the local fixes (docs/race-lab.md, "The mutation table").

Each named part of a fix is a *mutant* in ``patches-rocm/suites/mutants.toml``:
text edits that revert that part, and only that part, in one file of the patched
layer. For each mutant the check exports the patched layer once, writes a
scratch copy of it with the mutant's file edited (every other file a hard link
of the export), builds the race lab's child that compiles that file against the
scratch layer, and runs every race-lab suite that proves the fix (``proves =
N`` in ``suites.toml``) ``runs`` times. A baseline row runs the same suites on
the unmutated layer: a suite that fails there proves nothing about a mutant.
The table says, per part, how many runs of each suite failed.

A part no edit can express, or one no suite can reach, is listed in the file
under ``[[uncaught]]`` with its reason, and printed as such: never silently.
Everything here runs on the host model; nothing is a GPU result.
"""

import dataclasses
import functools
import hashlib
import os
import shutil
import tomllib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from overlay import layout
from overlay.errors import EXIT_USAGE, OverlayError
from overlay.parallel import run_parallel
from overlay.suites import runner as _runner
from overlay.suites.config import Suite
from overlay.suites.racelab.builder import build_tree
from overlay.suites.racelab.lab import CHILDREN, MODEL, LabChild

if TYPE_CHECKING:
    from overlay.workspace import Workspace


class MutantError(OverlayError):
    """The mutants' file is invalid, or a mutant's edit does not match its file (exit 2)."""

    def __init__(self, message: str, **kw) -> None:
        kw.setdefault("exit_code", EXIT_USAGE)
        super().__init__(message, **kw)


@dataclasses.dataclass(frozen=True)
class Edit:
    """One text replacement of a mutant.

    Attributes:
        find: the exact text in the patched file.
        replace: what it becomes.
        count: how many times ``find`` must occur (0: at least once, all replaced).
    """

    find: str
    replace: str
    count: int = 1


@dataclasses.dataclass(frozen=True)
class Mutant:
    """One named part of a fix, reverted.

    Attributes:
        id: a short name (safe as a directory name).
        fix: the ``LOCAL_FIXES.md`` entry number.
        part: the part, as the entry names it.
        file: the file of the layer the edits apply to.
        edits: the replacements, applied in order.
        why: what the mutant restores (the defect the part removed).
    """

    id: str
    fix: int
    part: str
    file: str
    edits: tuple[Edit, ...]
    why: str = ""


@dataclasses.dataclass(frozen=True)
class Uncaught:
    """A part of a fix that is not mutated, or that no suite can catch, and why.

    Attributes:
        fix: the entry number.
        part: the part.
        reason: why no mutant of it is run or can be caught.
    """

    fix: int
    part: str
    reason: str


@dataclasses.dataclass
class Cell:
    """One suite's runs against one mutant (or the baseline).

    Attributes:
        suite: the suite's name.
        failed: runs that failed.
        runs: runs made (0 when the suite was skipped).
        kinds: report kinds seen in failed runs, kind -> runs showing it.
        skip_reason: why it was skipped, else ``""``.
    """

    suite: str
    failed: int = 0
    runs: int = 0
    kinds: dict = dataclasses.field(default_factory=dict)
    skip_reason: str = ""


@dataclasses.dataclass
class Row:
    """One line of the table: a mutant (or the baseline, ``mutant`` None) and its cells."""

    fix: int
    part: str
    mutant: Mutant | None
    cells: list[Cell]

    @property
    def best(self) -> Cell | None:
        """The cell with the most failed runs (None when no suite ran)."""
        ran = [c for c in self.cells if c.runs]
        return max(ran, key=lambda c: (c.failed / c.runs, c.failed)) if ran else None


def _str(table: Mapping, key: str, where: str, default: str | None = None) -> str:
    """``table[key]`` as a non-empty string (or ``default`` when given and absent)."""
    value = table.get(key, default)
    if not isinstance(value, str) or (not value and default is None):
        raise MutantError(f"{where}: `{key}` must be a non-empty string")
    return value


def _int(table: Mapping, key: str, where: str) -> int:
    """``table[key]`` as a positive integer."""
    value = table.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise MutantError(f"{where}: `{key}` must be an integer >= 1")
    return value


def parse_mutants(
    text: str, where: str = layout.MUTANTS_TOML
) -> tuple[list[Mutant], list[Uncaught]]:
    """Parse the mutants' file.

    Args:
        text: the TOML text.
        where: its name, for messages.
    Returns:
        ``(mutants, uncaught parts)``, in file order.
    Raises:
        MutantError: invalid TOML, a missing or mistyped key, or a duplicate id.
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MutantError(f"{where}: {exc}") from None
    mutants: list[Mutant] = []
    seen: set[str] = set()
    for i, m in enumerate(data.get("mutants", [])):
        at = f"{where}: mutants[{i}]"
        if not isinstance(m, dict):
            raise MutantError(f"{at}: must be a table")
        mid = _str(m, "id", at)
        if mid in seen or not mid.replace("-", "").replace("_", "").isalnum():
            raise MutantError(f"{at}: id {mid!r} is repeated or not a plain name")
        seen.add(mid)
        edits = []
        for j, e in enumerate(m.get("edits", [])):
            eat = f"{at}.edits[{j}]"
            if not isinstance(e, dict):
                raise MutantError(f"{eat}: must be a table")
            count = e.get("count", 1)
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise MutantError(f"{eat}: `count` must be an integer >= 0")
            edits.append(Edit(_str(e, "find", eat), _str(e, "replace", eat, ""), count))
        if not edits:
            raise MutantError(f"{at}: has no edits")
        mutants.append(
            Mutant(
                id=mid,
                fix=_int(m, "fix", at),
                part=_str(m, "part", at),
                file=_str(m, "file", at),
                edits=tuple(edits),
                why=_str(m, "why", at, ""),
            )
        )
    uncaught = []
    for i, u in enumerate(data.get("uncaught", [])):
        at = f"{where}: uncaught[{i}]"
        if not isinstance(u, dict):
            raise MutantError(f"{at}: must be a table")
        uncaught.append(
            Uncaught(_int(u, "fix", at), _str(u, "part", at), _str(u, "reason", at))
        )
    return mutants, uncaught


def load_mutants(root: str) -> tuple[list[Mutant], list[Uncaught]]:
    """Read ``patches-rocm/suites/mutants.toml`` of the repository at ``root``.

    Raises:
        MutantError: the file is missing or invalid.
    """
    path = layout.under(root, layout.MUTANTS_TOML)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise MutantError(f"{layout.MUTANTS_TOML}: {exc.strerror}") from None
    return parse_mutants(text, layout.MUTANTS_TOML)


def apply_mutant(text: str, mutant: Mutant) -> str:
    """``text`` (the patched file) with the mutant's edits applied in order.

    Raises:
        MutantError: an edit's ``find`` occurs other than ``count`` times (the
            patch moved on: the mutant must be updated with it, not skipped).
    """
    for n, edit in enumerate(mutant.edits):
        found = text.count(edit.find)
        if found == 0 or (edit.count and found != edit.count):
            want = "at least once" if edit.count == 0 else f"{edit.count} time(s)"
            raise MutantError(
                f"mutant {mutant.id}: edit {n + 1} occurs {found} time(s) in "
                f"{mutant.file}, expected {want}",
                hint=f"update {layout.MUTANTS_TOML} to the patched file as it is now",
            )
        text = text.replace(edit.find, edit.replace)
    return text


def child_for(file: str, children: Sequence[LabChild] = CHILDREN) -> LabChild:
    """The lab child that compiles ``file`` of the layer.

    Raises:
        MutantError: no child compiles it.
    """
    for child in children:
        if file in child.tree_sources:
            return child
    raise MutantError(f"no race-lab child compiles {file}")


def covering_suites(
    suites: Mapping[str, Suite], fix: int, child: LabChild
) -> list[Suite]:
    """The race-lab suites that prove ``fix`` and run ``child`` (any sanitizer)."""
    return [
        s
        for s in suites.values()
        if s.model == MODEL
        and s.proves == fix
        and os.path.basename(s.child[0]).rsplit("_", 1)[0] == child.name
    ]


def scratch_layer(export_dir: str, dest: str, mutant: Mutant) -> str:
    """Write a scratch copy of the exported layer with the mutant applied.

    Every file is a hard link into ``export_dir`` except the mutant's file,
    written anew, so the copy costs no space and the export stays intact.

    Args:
        export_dir: the exported patched layer.
        dest: the scratch directory (replaced).
        mutant: the mutant.
    Returns:
        The digest of the mutated file's text (part of its objects' keys).
    Raises:
        MutantError: the file is not in the layer, or an edit does not match.
    """
    src = os.path.join(export_dir, mutant.file)
    try:
        with open(src, encoding="utf-8") as fh:
            mutated = apply_mutant(fh.read(), mutant)
    except FileNotFoundError:
        raise MutantError(
            f"mutant {mutant.id}: {mutant.file} is not in the layer"
        ) from None
    if os.path.isdir(dest):
        shutil.rmtree(dest)
    shutil.copytree(export_dir, dest, copy_function=os.link, symlinks=True)
    target = os.path.join(dest, mutant.file)
    os.unlink(target)  # a hard link: writing through it would change the export
    with open(target, "w", encoding="utf-8") as fh:
        fh.write(mutated)
    return hashlib.sha256(mutated.encode()).hexdigest()


#: ``(suite, child_dir, runs, label) -> Cell``: runs one suite against one build.
SuiteRunner = Callable[[Suite, str, int, str], Cell]


def run_cells(
    jobs: Sequence[tuple[Suite, str, str]],
    runs: int,
    runner: SuiteRunner,
    parallel: int = 1,
) -> list[Cell]:
    """Run each ``(suite, child_dir, label)`` ``runs`` times; the cells in order.

    Args:
        jobs: what to run.
        runs: runs per suite.
        runner: runs one suite (see :func:`suite_runner`).
        parallel: suites run at once (each run is its own process).
    Raises:
        KeyboardInterrupt: on Ctrl-C (Terminated on a SIGTERM or SIGHUP): the
            running suites' runs are killed and their results written as
            interrupted; no suite starts after it (:func:`overlay.parallel.run_parallel`).
    """
    cells: list[Cell | None] = [None] * len(jobs)

    def one(i: int) -> None:
        suite, child_dir, label = jobs[i]
        cells[i] = runner(suite, child_dir, runs, label)

    run_parallel(parallel, [functools.partial(one, i) for i in range(len(jobs))])
    done = [cell for cell in cells if cell is not None]
    assert len(done) == len(jobs)  # run_parallel returned: every suite ran
    return done


def suite_runner(results_dir: str, base_dir: str) -> SuiteRunner:
    """A :data:`SuiteRunner` over :func:`overlay.suites.runner.run_suite`.

    Args:
        results_dir: results root; each cell's runs go to a new directory under it.
        base_dir: the suites file's directory (relative child paths).
    """

    def run(suite: Suite, child_dir: str, runs: int, label: str) -> Cell:
        result = _runner.run_suite(
            suite,
            results_dir,
            child_dir=child_dir,
            base_dir=base_dir,
            runs=runs,
            label=label,
        )
        if result.skipped:
            return Cell(suite.name, skip_reason=result.skip_reason)
        kinds: dict[str, int] = {}
        for r in result.runs:
            if r.failed:
                for kind in r.reports:
                    kinds[kind] = kinds.get(kind, 0) + 1
                if r.marker_failures:
                    kinds["marker"] = kinds.get("marker", 0) + 1
        return Cell(suite.name, failed=result.failed, runs=result.n, kinds=kinds)

    return run


def caught(row: Row, runs: int, need: int) -> bool:
    """True when some suite failed at least ``need`` of ``runs`` runs of the mutant."""
    best = row.best
    return best is not None and best.runs >= runs and best.failed >= need


def render_table(
    rows: Sequence[Row], uncaught: Sequence[Uncaught], runs: int, need: int
) -> str:
    """The Markdown table of the check (docs/race-lab.md).

    One line per part: the suites that ran with runs failed / runs each, and the
    verdict (caught when some suite failed ``need`` of ``runs``); the baseline
    lines first; then the parts listed as uncaught, with their reasons.
    """
    out = [
        "| fix | part | runs failed / runs, per suite | verdict |",
        "|---|---|---|---|",
    ]
    for row in rows:
        cells = ", ".join(
            f"`{c.suite}` {c.failed}/{c.runs}"
            if c.runs
            else f"`{c.suite}` skipped ({c.skip_reason})"
            for c in row.cells
        )
        if row.mutant is None:
            clean = all(c.failed == 0 for c in row.cells if c.runs)
            verdict = (
                "baseline: clean" if clean else "baseline: FAILS (no verdict holds)"
            )
        elif caught(row, runs, need):
            best = row.best
            assert best is not None
            verdict = f"caught ({best.failed}/{best.runs}, `{best.suite}`)"
        else:
            verdict = f"**not caught** (fewer than {need}/{runs} in every suite)"
        out.append(f"| {row.fix} | {row.part} | {cells} | {verdict} |")
    for u in uncaught:
        out.append(f"| {u.fix} | {u.part} | not run | **uncaught**: {u.reason} |")
    return "\n".join(out) + "\n"


@dataclasses.dataclass
class CheckResult:
    """What :func:`run_check` found.

    Attributes:
        rows: the baseline rows (one per child) then one per mutant.
        uncaught: the parts listed as uncaught in the mutants' file.
        runs: runs per suite.
        need: failed runs that make a part caught.
        tree: the patched layer's tree SHA.
    """

    rows: list[Row]
    uncaught: list[Uncaught]
    runs: int
    need: int
    tree: str

    @property
    def missed(self) -> list[Row]:
        """Mutant rows no suite caught."""
        return [
            r
            for r in self.rows
            if r.mutant is not None and not caught(r, self.runs, self.need)
        ]

    @property
    def baseline_failed(self) -> bool:
        """True when a suite failed on the unmutated layer."""
        return any(c.failed for r in self.rows if r.mutant is None for c in r.cells)

    def markdown(self) -> str:
        """The table (:func:`render_table`) with its heading line."""
        return (
            f"Patched layer {self.tree[:12]}, {self.runs} runs per suite, caught at "
            f">= {self.need} of {self.runs}; host model, not a GPU result.\n\n"
            + render_table(self.rows, self.uncaught, self.runs, self.need)
        )


def run_check(
    ws: "Workspace",
    suites: Mapping[str, Suite],
    *,
    runs: int = 20,
    need: int = 19,
    fixes: Sequence[int] = (),
    only: Sequence[str] = (),
    suite_names: Sequence[str] = (),
    parallel: int = 1,
    results_dir: str | None = None,
    out_root: str | None = None,
    runner: SuiteRunner | None = None,
    builder: Callable[..., object] | None = None,
    progress: Callable[[str], None] | None = None,
) -> CheckResult:
    """The mutation check: build each mutant, run the suites that cover its fix.

    Args:
        ws: the workspace: its root (``mutants.toml``, the default directories), its
            store and its patched layer (:meth:`Workspace.layers`).
        suites: the suites by name (``suites.toml``).
        runs: runs per suite and mutant (and for the baseline).
        need: failed runs of some suite for a part to count as caught.
        fixes: only these fixes' mutants (default: all).
        only: only the mutants with these ids (default: all).
        suite_names: only these of the covering suites (default: every one).
        parallel: suites run at once.
        results_dir: results root (default ``build/suite-results/mutants``).
        out_root: where the export, the scratch layers and the builds go
            (default ``build/race-lab/mutants``).
        runner: runs one suite (default :func:`suite_runner`).
        builder: :func:`overlay.suites.racelab.build_tree` or a stand-in.
        progress: called with one line per step.
    Returns:
        A :class:`CheckResult`.
    Raises:
        MutantError: the mutants' file or an edit is invalid, an id in ``only``
            is unknown, or a fix has no covering suite.
        LabError: the lab does not build (no toolchain: exit 2).
        ManifestError, GitError, OfflineMiss, LayerError: there is no overlay
            repository, or its patched layer cannot be computed.
    """
    # export: only a mutation run (and the tests replace it)
    from overlay.export import export_tree

    build = builder or build_tree
    if suite_names:
        missing = sorted(set(suite_names) - set(suites))
        if missing:
            raise MutantError(f"unknown suite(s): {', '.join(missing)}")
        suites = {k: v for k, v in suites.items() if k in suite_names}
    root = ws.root
    say = progress or (lambda _line: None)
    mutants, uncaught = load_mutants(root)
    unknown = sorted(set(only) - {m.id for m in mutants})
    if unknown:
        raise MutantError(
            f"unknown mutant id(s): {', '.join(unknown)}",
            hint="ids: " + ", ".join(m.id for m in mutants),
        )
    chosen = [
        m
        for m in mutants
        if (not fixes or m.fix in fixes) and (not only or m.id in only)
    ]
    # With --mutant, only the chosen mutants' fixes: the table is about them.
    shown = {m.fix for m in chosen} if only else set(fixes)
    uncaught = [u for u in uncaught if not shown or u.fix in shown]
    lab_root = out_root or layout.under(root, f"{layout.RACE_LAB_BUILDS}/mutants")
    results = results_dir or layout.under(root, f"{layout.SUITE_RESULTS_DIR}/mutants")
    run_one = runner or suite_runner(
        results, os.path.dirname(layout.under(root, layout.SUITES_TOML))
    )
    tree = ws.layers().patched
    export_dir = os.path.join(lab_root, "patched-src")
    export_tree(ws.store, tree, export_dir)

    plans: list[tuple[int, str, Mutant | None, LabChild, str, list[Suite]]] = []
    base_children: dict[str, tuple[LabChild, list[int]]] = {}
    for m in chosen:
        child = child_for(m.file)
        cover = covering_suites(suites, m.fix, child)
        if not cover:
            raise MutantError(
                f"mutant {m.id}: no race-lab suite proves fix {m.fix} with {child.name}"
            )
        entry = base_children.setdefault(child.name, (child, []))
        if m.fix not in entry[1]:
            entry[1].append(m.fix)
    for name, (child, fix_list) in base_children.items():
        cover = [s for f in fix_list for s in covering_suites(suites, f, child)]
        say(f"building the baseline {name}")
        out = os.path.join(lab_root, f"baseline-{name}")
        build(
            root,
            export_dir,
            out,
            tree=tree,
            label=f"baseline-{name}",
            children=[child],
            sanitizers=_sanitizers(cover),
        )
        plans.append(
            (fix_list[0], f"baseline (patched, {name})", None, child, out, cover)
        )
    for m in chosen:
        child = child_for(m.file)
        cover = covering_suites(suites, m.fix, child)
        src = os.path.join(lab_root, m.id, "src")
        digest = scratch_layer(export_dir, src, m)
        say(f"building mutant {m.id}")
        out = os.path.join(lab_root, m.id)
        build(
            root,
            src,
            out,
            tree=f"{tree}+{m.id}+{digest[:16]}",
            label=f"mutant-{m.id}",
            children=[child],
            sanitizers=_sanitizers(cover),
        )
        plans.append((m.fix, m.part, m, child, out, cover))

    # Run directories are labelled by the build (baseline-<child> or mutant-<id>).
    jobs = [
        (s, out, f"mutant-{m.id}" if m else f"baseline-{c.name}")
        for (_f, _p, m, c, out, cover) in plans
        for s in cover
    ]
    say(f"running {len(jobs)} suite(s) x {runs} runs")
    cells = run_cells(jobs, runs, run_one, parallel)
    rows: list[Row] = []
    i = 0
    for fix, part, mutant, _child, _out, cover in plans:
        rows.append(Row(fix, part, mutant, cells[i : i + len(cover)]))
        i += len(cover)
    return CheckResult(rows=rows, uncaught=uncaught, runs=runs, need=need, tree=tree)


def _sanitizers(cover: Sequence[Suite]) -> list[str]:
    """The sanitizers the suites' children need (``..._tsan`` -> ``tsan``), in a fixed order."""
    wanted = {os.path.basename(s.child[0]).rsplit("_", 1)[1] for s in cover}
    return [s for s in ("tsan", "asan") if s in wanted]
