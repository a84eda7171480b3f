"""Who wrote a line of the patched tree: upstream, the fork, or a patch's hunk.

A synthetic commit chain is made in the git store from the layers (same
inputs, same commit names; see :meth:`overlay.git.store.Store.commit_tree`)::

    C0 = pin tree                      -> "from upstream"
    C1 = forked tree      (parent C0)  -> "from the fork"
    Ck+1 = tree after patch k (parent Ck) -> "patch <name> hunk #h"

``git blame --porcelain`` on the tip (one process per file, several ``-L``
ranges) names the commit that last wrote each line and that line's number in
that commit's version of the file. For a patch commit the hunk is the one of
that patch (``patch.changes[*].hunks``) whose post-image range
(``target_start``, ``target_length``) holds that line number (the engine
applies every hunk at its stated line), and for a 3-way merged patch, whose
ranges moved, the nearest hunk (marked ``approximate``).
"""

import dataclasses
from collections.abc import Iterable, Sequence

from overlay.engine import PatchResult
from overlay.engine.layers import Layers
from overlay.errors import OverlayError
from overlay.git.store import Store
from overlay.records.series import Hunk

UPSTREAM = "upstream"
FORK = "fork"
PATCH = "patch"


@dataclasses.dataclass(frozen=True)
class Origin:
    """Where one line of the patched tree came from.

    Attributes:
        layer: ``"upstream"``, ``"fork"`` or ``"patch"``.
        commit: the synthetic commit git blame named (40 hex).
        path: the file's path in that commit (differs after a rename).
        line: the line's number in that commit's version of the file (1-based).
        patch: the patch file name (``layer == "patch"`` only).
        hunk: 1-based hunk number within that patch's changes to ``path``, or
            ``None`` when no hunk holds the line.
        approximate: the hunk was chosen as the nearest one (the patch applied by
            a 3-way merge, so its recorded line numbers do not match the tree).
    """

    layer: str
    commit: str
    path: str
    line: int
    patch: str | None = None
    hunk: int | None = None
    approximate: bool = False

    def label(self) -> str:
        """``patch 0001-x.patch hunk #2`` / ``from the fork`` / ``from upstream``."""
        if self.layer == UPSTREAM:
            return "from upstream"
        if self.layer == FORK:
            return "from the fork"
        if self.hunk is None:
            return f"patch {self.patch}"
        return f"patch {self.patch} hunk #{self.hunk}" + (
            " (nearest)" if self.approximate else ""
        )


@dataclasses.dataclass(frozen=True)
class ChainLink:
    """One commit of the synthetic chain.

    Attributes:
        commit: commit SHA; tree: its tree SHA; layer: ``upstream``/``fork``/``patch``;
        result: the series entry (``layer == "patch"`` only).
    """

    commit: str
    tree: str
    layer: str
    result: PatchResult | None = None


def build_chain(store: Store, layers: Layers) -> list[ChainLink]:
    """The synthetic commit chain C0 (pin), C1 (forked), C2.. (one per patch).

    Args:
        store: the git store holding the layer trees.
        layers: computed with ``stepwise=True`` (each ``PatchResult.tree`` set).
    Returns:
        The links in order; the last one's tree is ``layers.patched``.
    Raises:
        OverlayError: the layers were computed without ``stepwise`` (a patch has
            no tree), or the chain's tip is not the patched tree (exit 2).
    """
    links = []
    c0 = store.commit_tree(layers.pin, (), "overlay attribution: pin (upstream)")
    links.append(ChainLink(c0, layers.pin, UPSTREAM))
    c1 = store.commit_tree(
        layers.forked, [c0], "overlay attribution: forked (fork delta)"
    )
    links.append(ChainLink(c1, layers.forked, FORK))
    for result in layers.patches:
        if result.tree is None:
            raise OverlayError(
                "attribution needs the tree after each patch: compute the layers "
                "with stepwise=True"
            )
        parent = links[-1].commit
        commit = store.commit_tree(
            result.tree, [parent], f"overlay attribution: {result.patch.name}"
        )
        links.append(ChainLink(commit, result.tree, PATCH, result))
    if links[-1].tree != layers.patched:
        raise OverlayError(
            f"attribution chain ends at tree {links[-1].tree}, not the patched "
            f"tree {layers.patched}"
        )
    return links


def _find_hunk(result: PatchResult, path: str, line: int) -> tuple[int | None, bool]:
    """(hunk number, approximate) of the hunk of ``result`` holding ``line`` of ``path``:
    the hunk whose recorded post-image range holds it (the engine applies every hunk
    at its stated line), else the nearest one (approximate: a 3-way merged patch,
    whose recorded ranges moved); ``(None, False)`` when the patch does not change
    ``path`` or has no hunk there."""
    for change in result.patch.changes:
        if change.target != path:
            continue
        for number, hunk in enumerate(change.hunks, 1):
            if hunk.target_start <= line < hunk.target_start + hunk.target_length:
                return number, False
        if not change.hunks:
            return None, False
        distances = [_distance(hunk, line) for hunk in change.hunks]
        return distances.index(min(distances)) + 1, True
    return None, False


def _distance(hunk: Hunk, line: int) -> int:
    """Lines between ``line`` and a hunk's post-image range (0 inside it)."""
    start = hunk.target_start
    end = start + max(hunk.target_length, 1) - 1
    return 0 if start <= line <= end else min(abs(line - start), abs(line - end))


def _parse_porcelain(text: str) -> list[tuple[str, int, int, int, str]]:
    """``(commit, orig_line, final_line, count, orig_path)`` per blame group."""
    groups: list[tuple[str, int, int, int]] = []
    names: list[str | None] = []  # git names a commit's path once, at its first group
    for raw in text.split("\n"):
        if raw.startswith("\t"):
            continue
        fields = raw.split(" ")
        if (
            len(fields) >= 3
            and len(fields[0]) == 40
            and fields[1].isdigit()
            and fields[2].isdigit()
        ):
            count = int(fields[3]) if len(fields) > 3 and fields[3].isdigit() else 1
            groups.append((fields[0], int(fields[1]), int(fields[2]), count))
            names.append(None)
        elif raw.startswith("filename ") and groups:
            names[-1] = raw[len("filename ") :]
    out = []
    last_name: dict[str, str] = {}
    for (commit, orig, final, count), name in zip(groups, names, strict=True):
        path = last_name.get(commit, "") if name is None else name
        last_name[commit] = path
        out.append((commit, orig, final, count, path))
    return out


class Attributor:
    """Attribute lines of the patched tree; builds the commit chain once.

    Args:
        store: git store; layers: computed with ``stepwise=True``.
    Raises:
        OverlayError: see :func:`build_chain`.
    """

    def __init__(self, store: Store, layers: Layers):
        self.store = store
        self.layers = layers
        self.chain = build_chain(store, layers)
        self._by_commit = {link.commit: link for link in self.chain}

    @property
    def tip(self) -> str:
        """The chain's last commit (its tree is the patched tree)."""
        return self.chain[-1].commit

    def attribute(
        self, locations: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], Origin | None]:
        """Who wrote each ``(path, line)`` of the patched tree.

        Args:
            locations: repository paths (``/``-separated, relative) and 1-based lines.
        Returns:
            ``{(path, line): Origin}``; ``None`` for a path not in the patched tree
            or a line past its end. One ``git blame`` process per distinct path.
        """
        wanted: dict[str, set[int]] = {}
        for path, line in locations:
            if line >= 1:
                wanted.setdefault(path, set()).add(int(line))
        result: dict[tuple[str, int], Origin | None] = {}
        for path, lines in sorted(wanted.items()):
            result.update(self._blame_file(path, sorted(lines)))
        for path, line in locations:
            result.setdefault((path, line), None)
        return result

    def _line_count(self, path: str) -> int | None:
        """Lines of ``path`` in the chain's tip, ``None`` when it is not there."""
        proc = self.store.git("cat-file", "-s", f"{self.tip}:{path}", check=False)
        if proc.returncode != 0:
            return None
        data = self.store.git("cat-file", "blob", f"{self.tip}:{path}").stdout
        return data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)

    def _blame_file(
        self, path: str, lines: Sequence[int]
    ) -> dict[tuple[str, int], Origin | None]:
        """``{(path, line): Origin or None}`` for ``lines`` of one file (one ``git blame``)."""
        out: dict[tuple[str, int], Origin | None] = {(path, n): None for n in lines}
        total = self._line_count(path)
        if total is None:
            return out
        valid = [n for n in lines if n <= total]
        if not valid:
            return out
        args = ["blame", "--porcelain"]
        for n in valid:
            args += ["-L", f"{n},{n}"]
        proc = self.store.git(*args, self.tip, "--", path, check=False)
        if proc.returncode != 0:
            return out
        for commit, orig, final, count, name in _parse_porcelain(
            proc.stdout.decode("utf-8", "replace")
        ):
            link = self._by_commit.get(commit)
            for i in range(count):
                key = (path, final + i)
                if key not in out or link is None:
                    continue
                line = orig + i
                if link.layer == PATCH:
                    assert link.result is not None
                    hunk, approx = _find_hunk(link.result, name, line)
                    out[key] = Origin(
                        PATCH, commit, name, line, link.result.patch.name, hunk, approx
                    )
                else:
                    out[key] = Origin(link.layer, commit, name, line)
        return out


def attribute_lines(
    store: Store, layers: Layers, locations: Iterable[tuple[str, int]]
) -> dict[tuple[str, int], Origin | None]:
    """One-shot :meth:`Attributor.attribute` (builds the chain, then blames).

    Args:
        store: git store; layers: computed with ``stepwise=True``;
        locations: ``(repository path, 1-based line)`` pairs.
    Returns:
        ``{(path, line): Origin or None}``.
    Raises:
        OverlayError: layers without per-patch trees (exit 2).
    """
    return Attributor(store, layers).attribute(list(locations))


__all__ = [
    "Attributor",
    "ChainLink",
    "FORK",
    "Origin",
    "PATCH",
    "UPSTREAM",
    "attribute_lines",
    "build_chain",
]
