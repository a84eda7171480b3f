"""Cross-checks of ``LOCAL_FIXES.md`` against the series and the trees (docs/design.md §8):
patch trailers and the entries they name (FIX017..FIX021, FIX024), the
Dropped section against the fork's uncarried changes (FIX022, FIX025) and the
retarget entries against the resolution files (FIX023).

The inputs are plain: :class:`~overlay.records.fixes.model.PatchRecord` tuples and sets of
paths, so ``overlay verify`` feeds them from git and tests from literals.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence

from overlay import layout
from overlay.checks.findings import Finding
from overlay.fs.paths import glob_match
from overlay.records.fixes.model import (
    BACKEND_PREFIX,
    MLX_PREFIX,
    POLICY_SECTIONS,
    Document,
    Entry,
    PatchRecord,
    finding,
)

#: Extensions of the files a source tree holds (sources, headers, build and config files,
#: docs). For FIX021 a backticked name is a repository path only with one of these:
#: ``state.mutex``, ``blockIdx.y``, ``event.o`` and a model id are not.
SOURCE_EXTENSIONS = frozenset(
    {
        "c",
        "cc",
        "cpp",
        "cxx",
        "c++",
        "h",
        "hh",
        "hpp",
        "hxx",
        "h++",
        "inc",
        "inl",
        "ipp",
        "tpp",
        "cu",
        "cuh",
        "hip",
        "metal",
        "m",
        "mm",
        "s",
        "asm",
        "cmake",
        "txt",
        "in",
        "py",
        "pyi",
        "pyx",
        "sh",
        "bash",
        "ps1",
        "bat",
        "toml",
        "json",
        "yml",
        "yaml",
        "cfg",
        "ini",
        "md",
        "rst",
        "rs",
        "go",
        "java",
        "swift",
        "patch",
        "diff",
        "j2",
        "mk",
    }
)
#: Directories only a build holds: a name under one is an artefact, not a repository path.
ARTEFACT_DIRS = frozenset({"_deps", "CMakeFiles", "build"})


def _basenames(paths: Iterable[str]) -> dict[str, list[str]]:
    """``{base name: [paths with it]}``."""
    out: dict[str, list[str]] = {}
    for p in paths:
        out.setdefault(p.rsplit("/", 1)[-1], []).append(p)
    return out


def resolve_name(
    name: str, paths: set | frozenset, basenames: dict | None = None
) -> list[str]:
    """The tree paths a name from an entry can mean.

    Rules (docs/design.md §7): a full path names itself; a path with a ``/`` is
    also tried relative to ``mlx/backend/rocm/``, then relative to ``mlx/``; a bare
    file name names every path with that base name (it counts as naming a file
    only when exactly one).

    Args:
        name: the backticked token.
        paths: the set of tree paths to resolve against.
        basenames: optional precomputed ``{base name: [paths]}`` for ``paths``.

    Returns:
        Candidate paths (empty when none).
    """
    if name.startswith("./"):
        name = name[2:]
    if name in paths:
        return [name]
    if "/" in name:
        for cand in (BACKEND_PREFIX + name, MLX_PREFIX + name):
            if cand in paths:
                return [cand]
        return []
    if basenames is None:
        basenames = _basenames(paths)
    return list(basenames.get(name, []))


def _dir_exists(name: str, paths: Iterable[str]) -> bool:
    """Whether some path lies under directory ``name`` (full or backend/mlx-relative)."""
    prefix = name if name.endswith("/") else name + "/"
    alts = (prefix, BACKEND_PREFIX + prefix, MLX_PREFIX + prefix)
    return any(p.startswith(alts) for p in paths)


def names_repository_path(name: str, outside_tree: Sequence[str] = ()) -> bool:
    """Whether a backticked name counts as a repository path that must exist (FIX021).

    It counts when it has a directory part and a known source extension
    (:data:`SOURCE_EXTENSIONS`), or ends in ``/`` (a directory). It does not count
    when it is a bare file name (one that resolves is found anyway, and one that does
    not is prose: ``rocvirtual.cpp``, ``.hip``), an expression (``state.mutex``), a
    build artefact (``event.o``, anything under ``_deps/``, ``CMakeFiles/``,
    ``build/``), or when it matches a ``[policy] outside-tree`` glob (the team's own
    repository paths, third-party sources).

    Args:
        name: the backticked token.
        outside_tree: the manifest's ``[policy] outside-tree`` globs.
    Returns:
        True when FIX021 should look the name up.
    """
    name = name.removeprefix("./")
    if any(
        glob_match(name, g) or glob_match(name.rstrip("/"), g) for g in outside_tree
    ):
        return False
    parts = name.rstrip("/").split("/")
    if any(part in ARTEFACT_DIRS for part in parts):
        return False
    if name.endswith("/"):
        return True
    base = parts[-1]
    ext = base.rsplit(".", 1)[1].lower() if "." in base.lstrip(".") else ""
    return len(parts) > 1 and ext in SOURCE_EXTENSIONS


def patch_trailers(text: str) -> dict[str, tuple[str, int]]:
    """Trailers of a format-patch message: ``{name: (value, 1-based line)}``.

    Only lines before the first ``---`` separator count; the last occurrence wins.
    Also records ``"---"`` -> ``("", line)`` for the separator when present.
    """
    out: dict[str, tuple[str, int]] = {}
    for i, ln in enumerate(text.splitlines(), 1):
        if ln == "---" or ln.startswith("diff --git "):
            out["---"] = ("", i)
            break
        m = re.match(r"^([A-Za-z][A-Za-z0-9-]*):\s*(.*)$", ln)
        if m and m.group(1) in ("Local-Fix", "Forwarded"):
            out[m.group(1)] = (m.group(2).strip(), i)
    return out


def check_patch_entries(
    doc: Document,
    patches: Iterable[PatchRecord | tuple],
    patched_paths: Iterable[str],
    *,
    repo_paths: Iterable[str] = (),
    unparsed: Iterable[int] = (),
    outside_tree: Sequence[str] = (),
) -> list[Finding]:
    """Patches and entries agree (docs/design.md §8).

    For each patch: it has ``Local-Fix:`` and ``Forwarded:`` trailers; ``N`` is an
    entry; that entry names every file the patch touches (full path, path relative
    to ``mlx/backend/rocm/`` or to ``mlx/`` with a directory, or a bare file name
    unambiguous among all paths of the patched tree plus deleted paths). A patch
    may carry several ``Local-Fix:`` trailers (a file several entries change, as
    ``overlay import whole-file`` writes it): each is checked, and each entry counts
    as having a patch. For each entry: every name that counts as a repository path
    (:func:`names_repository_path`) exists in the patched tree, is deleted by one of
    its patches, or is a repo path (``repo_paths``, e.g.
    ``patches-rocm/resolved/...``); a directory name ending in ``/`` exists when some
    path is under it. Entries of the kernels/build/API sections that no patch points
    at get a warning.

    Args:
        doc: parsed document.
        patches: :class:`PatchRecord` or 5-tuples ``(path, local_fix, forwarded,
            touched, deleted)`` for every patch in the series; ``local_fix`` may be a
            list or tuple of the values of several ``Local-Fix:`` trailers.
        patched_paths: every path of the ``patched`` tree.
        repo_paths: overlay repository paths that entries may also name.
        unparsed: ``Local-Fix`` numbers of series patches whose diff does not parse
            (SER004 reports them): their entries do have a patch, so no FIX024.
        outside_tree: ``[policy] outside-tree`` globs: names FIX021 never reports.

    Returns:
        FIX017 (no ``Local-Fix`` or not a number), FIX018 (no ``Forwarded``),
        FIX019 (``N`` is not an entry), FIX020 (entry does not name a touched
        file), FIX021 (entry names a file that does not exist), FIX024 (warning:
        policy-section entry with no patch). Patch findings carry the patch path.
    """
    patched = set(patched_paths)
    records = [
        PatchRecord(*p) if not isinstance(p, PatchRecord) else p for p in patches
    ]
    all_deleted = set().union(*[set(p.deleted) for p in records]) if records else set()
    universe = patched | all_deleted
    base_u = _basenames(universe)
    entries: dict[int, Entry] = {}
    for e in doc.entries():
        entries.setdefault(e.number, e)
    by_entry: dict[int, list[PatchRecord]] = {}
    # An entry's names resolved once, however many patches cite it.
    resolved: dict[int, tuple[set[str], dict[str, list[str]]]] = {}
    out: list[Finding] = []
    for p in records:
        # Findings and named entries in trailer order, so the report order is kept.
        for item in _check_trailers(p, entries):
            if isinstance(item, Finding):
                out.append(item)
                continue
            by_entry.setdefault(item.number, []).append(p)
            if item.number not in resolved:
                resolved[item.number] = _named_paths(item, universe, base_u)
            out += _unnamed_touched(doc, item, p, *resolved[item.number])
    repo = set(repo_paths)
    skip_fix024 = set(unparsed)
    for e in doc.entries():
        own = by_entry.get(e.number, [])
        own_deleted = set().union(*[set(p.deleted) for p in own]) if own else set()
        out += _missing_names(doc, e, patched | own_deleted, repo, outside_tree)
        if (
            e.section in POLICY_SECTIONS
            and e.number not in by_entry
            and e.number not in skip_fix024
        ):
            out.append(
                finding(
                    doc,
                    "FIX024",
                    e.line,
                    f"entry {e.number} has no patch in the series",
                    "add 'Local-Fix: N' to its patch, or remove the entry",
                    severity="warning",
                )
            )
    return out


def _check_trailers(
    p: PatchRecord, entries: dict[int, Entry]
) -> Iterator[Finding | Entry]:
    """Yield, in trailer order, FIX017/018/019 for a patch and the entries its
    ``Local-Fix:`` trailers name."""
    tr = patch_trailers(p.text) if p.text else {}
    sep_line = tr.get("---", ("", 1))[1]
    lf_line = tr.get("Local-Fix", ("", sep_line))[1]
    fw_line = tr.get("Forwarded", ("", sep_line))[1]
    if p.forwarded is None or not str(p.forwarded).strip():
        yield finding(
            p.path,
            "FIX018",
            fw_line,
            "patch has no 'Forwarded:' trailer",
            "add 'Forwarded: not-needed' above the '---' line",
        )
    given: list[int | str | None] = (
        list(p.local_fix) if isinstance(p.local_fix, (list, tuple)) else [p.local_fix]
    )
    values = [v for v in given if v is not None and str(v).strip()]
    if not values:
        yield finding(
            p.path,
            "FIX017",
            lf_line,
            "patch has no 'Local-Fix:' trailer",
            "add 'Local-Fix: N' naming its LOCAL_FIXES.md entry",
        )
    for value in values:
        try:
            n = int(str(value).strip())
        except ValueError:
            yield finding(
                p.path,
                "FIX017",
                lf_line,
                f"'Local-Fix: {str(value)[:40]}' is not an entry number",
                "use 'Local-Fix: N' with N a LOCAL_FIXES.md entry number",
            )
            continue
        entry = entries.get(n)
        if entry is None:
            yield finding(
                p.path,
                "FIX019",
                lf_line,
                f"'Local-Fix: {n}' names no LOCAL_FIXES.md entry",
                "add the entry (overlay fix new) or fix the number",
            )
            continue
        yield entry


def _missing_names(
    doc: Document,
    e: Entry,
    exists_in: set[str],
    repo: set[str],
    outside_tree: Sequence[str],
) -> list[Finding]:
    """FIX021 for each repository path entry ``e`` names that is in neither tree nor repo.

    ``exists_in`` is the patched tree plus the paths the entry's own patches delete.
    """
    out = []
    base_e = _basenames(exists_in)
    for name in e.files:
        if not names_repository_path(name, outside_tree):
            continue
        if resolve_name(name, exists_in, base_e) or name in repo:
            continue
        if _dir_exists(name, exists_in) or _dir_exists(name, repo):
            continue
        out.append(
            finding(
                doc,
                "FIX021",
                e.file_lines.get(name, e.line),
                f"entry {e.number} names `{name}`, which is not in the patched tree",
                "fix the path, or drop it if the file is gone; a name outside the MLX "
                "tree by design goes in [policy] outside-tree",
            )
        )
    return out


def _named_paths(
    e: Entry, universe: set[str], base_u: dict[str, list[str]]
) -> tuple[set[str], dict[str, list[str]]]:
    """The paths entry ``e`` names (:func:`resolve_name` against ``universe``, with
    its base names ``base_u``).

    Returns:
        ``(named, ambiguous)``: the paths a name of the entry means and nothing else,
        and ``{path: the entry's names that mean it among other paths}``.
    """
    named: set[str] = set()
    ambiguous: dict[str, list[str]] = {}
    for name in e.files:
        cands = resolve_name(name, universe, base_u)
        if len(cands) == 1:
            named.add(cands[0])
        elif len(cands) > 1:
            for c in cands:
                ambiguous.setdefault(c, []).append(name)
    return named, ambiguous


def _unnamed_touched(
    doc: Document,
    e: Entry,
    p: PatchRecord,
    named: set[str],
    ambiguous: dict[str, list[str]],
) -> list[Finding]:
    """FIX020 for each path ``p`` touches that entry ``e`` does not name (``named``
    and ``ambiguous`` from :func:`_named_paths`)."""
    out = []
    for t in sorted(p.touched):
        if t in named:
            continue
        if t in ambiguous:
            msg = (
                f"entry {e.number} names {ambiguous[t][0]!r}, ambiguous in the tree, "
                f"not {t} which {p.path} touches"
            )
        else:
            msg = f"entry {e.number} does not name {t}, which {p.path} touches"
        rel = t[len(BACKEND_PREFIX) :] if t.startswith(BACKEND_PREFIX) else ""
        out.append(
            finding(
                doc,
                "FIX020",
                e.line,
                msg,
                f"name it in backticks: `{t}` (or `{rel}`)"
                if "/" in rel
                else f"name it in backticks: `{t}`",
            )
        )
    return out


def _covers(name: str, path: str) -> bool:
    """Whether a Dropped name (a path, or a directory ending in ``/``) covers ``path``."""
    if name.endswith("/"):
        return path.startswith(name)
    return path == name


def check_dropped(
    doc: Document, fork_changed_not_carried: Iterable[str]
) -> list[Finding]:
    """Every fork-changed path the manifest does not carry is listed under Dropped.

    A path is listed when a Dropped bullet starts with it in backticks, or with a
    directory prefix ending in ``/`` that covers it.

    Args:
        doc: parsed document.
        fork_changed_not_carried: paths changed by the fork delta (merge base ..
            fork commit) that the manifest's carry globs exclude.

    Returns:
        FIX022 per unlisted path (at the Dropped heading, or line 1 when the
        section is absent); FIX025 (warning) per bullet name that covers none of
        the paths (stale).
    """
    paths = sorted(set(fork_changed_not_carried))
    sec = doc.section("dropped")
    bullets = list(sec.bullets) if sec else []
    names = [(n, b) for b in bullets for n in b.names]
    out = []
    line = sec.line if sec else 1
    for p in paths:
        if not any(_covers(n, p) for n, _ in names):
            out.append(
                finding(
                    doc,
                    "FIX022",
                    line,
                    f"fork-changed path {p} is not carried and not listed as dropped",
                    f"add under '## Dropped from the vendored set': - `{p}`: <why>",
                )
            )
    for n, b in names:
        if not any(_covers(n, p) for p in paths):
            out.append(
                finding(
                    doc,
                    "FIX025",
                    b.line,
                    f"dropped `{n}` matches no fork-changed path left uncarried",
                    "remove the stale name (the fork no longer changes it, or it is now carried)",
                    severity="warning",
                )
            )
    return out


def check_resolutions(doc: Document, resolved_paths: Iterable[str]) -> list[Finding]:
    """Each ``patches-rocm/resolved/<path>`` file is named by an entry of the retarget section.

    An entry names a resolution when it names ``<path>`` or
    ``patches-rocm/resolved/<path>`` (full, backend-relative, or an unambiguous bare
    name among the resolutions).

    Args:
        doc: parsed document.
        resolved_paths: the resolution files, as ``patches-rocm/resolved/<path>`` or ``<path>``.

    Returns:
        FIX023 per resolution no retarget entry names (at the retarget heading, or
        line 1 when the section is absent).
    """
    prefix = f"{layout.RESOLVED_DIR}/"
    targets = {}
    for rp in resolved_paths:
        t = rp[len(prefix) :] if rp.startswith(prefix) else rp
        targets[t] = rp if rp.startswith(prefix) else prefix + rp
    sec = doc.section("retarget")
    tset = set(targets)
    base = _basenames(tset)
    named: set[str] = set()
    for s in doc.sections:
        if s.key != "retarget":
            continue
        for e in s.entries:
            for name in e.files:
                if name.startswith(prefix):
                    name = name[len(prefix) :]
                cands = resolve_name(name, tset, base)
                if len(cands) == 1:
                    named.add(cands[0])
    line = sec.line if sec else 1
    return [
        finding(
            doc,
            "FIX023",
            line,
            f"resolution {targets[t]} is named by no retarget entry",
            f"add a retarget entry naming `{t}`",
        )
        for t in sorted(tset - named)
    ]
