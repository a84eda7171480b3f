"""git's objects as overlay reads them: the long-lived ``cat-file --batch`` readers,
and the parsing of ``ls-tree``, ``diff-tree`` and ``merge-tree`` output.

:class:`CatFile` answers one object at a time to a reader that does not know its
names in advance; :func:`read_objects` streams many objects known in advance.
Neither starts a process per object (an export reads a thousand blobs).
:class:`TreeEntry` and :class:`MergeResult` are the shapes the store's methods
(:class:`overlay.git.store.Store`) return; the ``parse_*`` functions turn git's
``-z`` output into them. The objects overlay writes, and reads back without git,
are :mod:`overlay.git.loose`'s.
"""

import subprocess
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

from overlay.digests import sha1
from overlay.errors import GitError
from overlay.git.loose import LOOSE_LIMIT, loose_header, read_loose
from overlay.git.run import (
    GIT_FLAGS,
    NULL_OID,
    SYNTHETIC_IDENTITY,
    git_env,
    git_executable,
    zsplit,
)


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

    def __enter__(self) -> "CatFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class ObjectReader(CatFile):
    """One persistent ``git cat-file --batch-command`` for every object question of a run
    (:meth:`overlay.git.store.Store.reading`): whether an object exists, a commit's tree,
    a blob's bytes. It starts on the first question, so a run that asks none starts no
    process; a run that asks ten starts one, not a ``cat-file -e`` or a ``rev-parse``
    per question and a ``cat-file --batch`` beside them.
    """

    def __init__(self, git_dir: str):  # noqa: D107 (the class says it)
        self._git_dir = git_dir
        self._started: subprocess.Popen | None = None
        # Tree objects read or written in the block, parsed: a tree's name is the hash
        # of its content, so a kept one is never stale.
        self._trees: dict[str, list[Row]] = {}
        self._written: dict[
            str, bytes
        ] = {}  # bodies of trees the caller wrote, unparsed

    # CatFile's ``_proc`` is a plain attribute set at start; this reader starts git on
    # the first question instead, so the name becomes a property (mypy: override).
    @property
    def _proc(self) -> subprocess.Popen:  # type: ignore[override]
        if self._started is None:
            self._started = subprocess.Popen(
                [git_executable(), *GIT_FLAGS, "cat-file", "--batch-command"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                cwd=self._git_dir,
                env=git_env({"GIT_DIR": self._git_dir}),
            )
        return self._started

    def read(self, oid: str) -> tuple[str, bytes]:
        """Read one object (see :meth:`CatFile.read`): a loose one from its file
        (:func:`read_loose`), any other from git.

        An export right after a record reads the one blob the record wrote, loose:
        from its file, the export starts no ``cat-file`` (docs/engine.md, "Costs behind
        some choices")."""
        loose = read_loose(self._git_dir, oid)
        if loose is not None:
            return loose
        proc = self._proc
        assert proc.stdin and proc.stdout
        proc.stdin.write(b"contents " + oid.encode() + b"\n")
        proc.stdin.flush()
        fields = proc.stdout.readline().split()
        if len(fields) != 3:
            raise GitError(f"object {oid} is missing from the git store")
        data = proc.stdout.read(int(fields[2]))
        proc.stdout.read(1)  # trailing LF
        return fields[1].decode(), data

    def info(self, name: str) -> tuple[str, str] | None:
        """``(object name, type)`` of what ``name`` names (``X^{tree}`` peels as
        ``git cat-file -e`` and ``git rev-parse`` do), or ``None`` when nothing."""
        line = self._info_line(name)
        fields = line.split()
        if len(fields) != 3 or fields[1] == b"missing":
            return None
        return fields[0].decode(), fields[1].decode()

    def ambiguous(self, name: str) -> bool:
        """Whether git finds ``name`` ambiguous: a short SHA several objects' names
        start with (``info`` answers ``NAME ambiguous``)."""
        return self._info_line(name).rstrip(b"\n").endswith(b" ambiguous")

    def _info_line(self, name: str) -> bytes:
        """git's answer line to ``info NAME``."""
        assert "\n" not in name
        proc = self._proc
        assert proc.stdin and proc.stdout
        proc.stdin.write(b"info " + name.encode("utf-8", "surrogateescape") + b"\n")
        proc.stdin.flush()
        return proc.stdout.readline()

    def sizes(self, oids: Sequence[str]) -> list[int | None]:
        """The size in bytes of each object of ``oids``, ``None`` for one that is not
        there, asked in chunks written at once (one round trip per chunk, not per
        object). A chunk's questions and answers stay below the pipes' 64 KiB, so
        neither side blocks the other.

        A few names (at most :data:`LOOSE_LIMIT`, the most overlay writes loose at
        once) are first looked for as loose objects, whose headers give their sizes:
        an export right after a record checks the one blob the record wrote without
        starting git."""
        if len(oids) <= LOOSE_LIMIT:
            heads = [loose_header(self._git_dir, oid) for oid in oids]
            if all(heads):
                return [h[1] for h in heads if h]
        proc = self._proc
        assert proc.stdin and proc.stdout
        found: list[int | None] = []
        for start in range(0, len(oids), 500):
            chunk = oids[start : start + 500]
            assert not any("\n" in oid for oid in chunk)
            proc.stdin.write(b"".join(b"info " + o.encode() + b"\n" for o in chunk))
            proc.stdin.flush()
            for _ in chunk:
                fields = proc.stdout.readline().split()
                ok = len(fields) == 3 and fields[1] != b"missing"
                found.append(int(fields[2]) if ok else None)
        return found

    def tree(self, oid: str) -> list["Row"]:
        """The entries of tree ``oid`` (:func:`parse_tree_object`), read once per block.

        Raises:
            GitError: it is missing, or not a tree.
        """
        rows = self._trees.get(oid)
        if rows is None:
            body = self._written.get(oid)
            if body is None:
                kind, body = self.read(oid)
                if kind != "tree":
                    raise GitError(f"object {oid} is a {kind}, not a tree")
            rows = self._trees[oid] = parse_tree_object(body)
        return rows

    def remember_trees(self, objects: dict[str, bytes]) -> None:
        """Keep tree objects the caller wrote (name -> content; parsed when asked for):
        no read asks git for them."""
        self._written.update(objects)

    def entries(self, tree: str, paths: Sequence[str]) -> dict[str, "TreeEntry"]:
        """What ``git ls-tree -r -t --full-tree TREE -- PATHS`` gives for exactly ``paths``
        (in its order), read from the tree objects on the way to each path: a few
        reads of this process instead of a git process."""
        found = []
        for path in set(paths):
            rows, key = self.tree(tree), []
            parts = path.split("/")
            for depth, part in enumerate(parts):
                row = next((r for r in rows if r[3] == part), None)
                if row is None:
                    break
                # git's order: a directory sorts as if its name ended in "/".
                raw = part.encode("utf-8", "surrogateescape")
                key.append(raw + b"/" if row[1] == "tree" else raw)
                if depth == len(parts) - 1:
                    found.append((key, TreeEntry(row[0], row[1], row[2], path)))
                elif row[1] != "tree":
                    break
                else:
                    rows = self.tree(row[2])
        return {entry.path: entry for _key, entry in sorted(found)}

    def close(self) -> None:
        """Stop the child process, if it was started (see :meth:`CatFile.close`)."""
        if self._started is not None:
            super().close()
            self._started = None


class TreeEntry(NamedTuple):
    """One row of ``git ls-tree``: ``mode`` (``100644``, ``160000`` ...), ``kind``
    (``blob``, ``tree``, ``commit`` for a gitlink), ``oid`` and ``path``."""

    mode: str
    kind: str
    oid: str
    path: str


class MergeResult(NamedTuple):
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


def read_objects(git_dir: str, oids: Sequence[str]) -> Iterator[tuple[str, bytes]]:
    """Read many objects known in advance, streamed, with one
    ``git cat-file --batch --buffer``.

    The names are handed to git in a file, so git writes its answers with normal
    buffering instead of one flush per object, and there is no round trip per
    object (an export reads a thousand blobs this way); only one object is held at a
    time, so reading the whole tree never holds the tree (peak memory stays flat).

    Args:
        git_dir: the repository.
        oids: object names (40 or 64 hex).
    Yields:
        ``(type, content)`` per name, in order.
    Raises:
        GitError: an object is missing.
    """
    if not oids:
        return
    import tempfile  # only where objects are read in a batch

    with tempfile.TemporaryFile() as names:
        names.write("".join(f"{oid}\n" for oid in oids).encode())
        names.seek(0)
        proc = subprocess.Popen(
            [git_executable(), *GIT_FLAGS, "cat-file", "--batch", "--buffer"],
            stdin=names,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=git_dir,
            env=git_env({"GIT_DIR": git_dir}),
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


#: One row of a listing: ``(mode, kind, oid, path)`` as ``git ls-tree`` prints it.
Row = tuple[str, str, str, str]


def parse_tree_object(body: bytes) -> list[Row]:
    """The entries of a raw tree object as ``git ls-tree -z`` (no ``-r``) prints them:
    ``(mode, kind, oid, name)`` in the object's order, the mode canonical as git's tree
    walk makes it (``040000``; ``100644`` or ``100755``; ``120000``; ``160000``)."""
    rows = []
    pos, end = 0, len(body)
    while pos < end:
        space = body.index(b" ", pos)
        nul = body.index(b"\0", space)
        mode = int(body[pos:space], 8)
        oid = body[nul + 1 : nul + 21].hex()
        name = body[space + 1 : nul].decode("utf-8", "surrogateescape")
        pos = nul + 21
        kind = _MODE_KINDS.get(mode & 0o170000, "blob")
        if kind == "tree":
            rows.append(("040000", kind, oid, name))
        elif kind == "commit":
            rows.append(("160000", kind, oid, name))
        elif mode & 0o170000 == 0o120000:
            rows.append(("120000", kind, oid, name))
        else:
            rows.append(("100755" if mode & 0o100 else "100644", kind, oid, name))
    return rows


_MODE_KINDS = {0o040000: "tree", 0o160000: "commit"}


def parse_ls_tree(out: bytes) -> Iterator[tuple[str, str, str, str]]:
    """``(mode, type, oid, path)`` per record of ``git ls-tree -z`` output."""
    for rec in zsplit(out):
        meta, path = rec.split("\t", 1)
        mode, kind, oid = meta.split()
        yield mode, kind, oid, path


#: One row of ``git diff-tree -r -z --no-renames --full-index`` of a tree pair:
#: ``(old_mode, new_mode, old_oid, new_oid, status, path)``; ``status`` is one of
#: ``A``, ``D``, ``M``, ``T``, and an absent side is ``000000`` and the null name.
DiffRow = tuple[str, str, str, str, str, str]


def parse_diff_tree(out: bytes) -> list[DiffRow]:
    """``git diff-tree -r -z --no-renames`` output of one tree pair as
    ``[(old_mode, new_mode, old_oid, new_oid, status, path), ...]``."""
    fields = zsplit(out)
    rows = []
    for i in range(0, len(fields), 2):
        meta = fields[i].lstrip(":").split()
        rows.append((meta[0], meta[1], meta[2], meta[3], meta[4][0], fields[i + 1]))
    return rows


#: The most trees :func:`tree_changes` reads before its caller leaves the question to
#: git: a tree read through the run's reader costs about 70 us here, a ``diff-tree``
#: process 4 to 5 ms of CPU (a fork moved by a thousand files in 150 directories:
#: 12 ms read here).
TREE_WALK_TREES = 60


class OverBudget(Exception):
    """:func:`tree_changes` read its budget of trees (the caller asks git)."""


def tree_changes(
    read: Callable[[str], list[Row]], old: str, new: str, budget: int
) -> list[DiffRow]:
    """The rows ``git diff-tree -r -z --no-renames --full-index OLD NEW`` prints for two
    trees (:data:`DiffRow`), in its order, from the tree objects ``read`` gives: only
    the directories whose names differ are read (a directory with the same name on
    both sides is the same, so it is not opened).

    What differs is what git compares: an entry's mode (canonical, as git's tree walk
    and :func:`parse_tree_object` make it) and object name. Two entries of one name are
    ``M`` when their kind (file, symlink, submodule) is the same, else ``T``; a name
    that is a directory on one side only lists the other side's entry and every file
    under the directory (``A`` or ``D``), as ``-r`` does. git's order is the order of
    the whole paths' bytes (a directory's entries all start with its name and ``/``).

    Args:
        read: a tree's name -> its rows (:meth:`ObjectReader.tree`).
        old, new: tree names.
        budget: at most this many trees are read.
    Returns:
        The rows; empty for the same tree.
    Raises:
        OverBudget: more trees than ``budget`` would be read.
        GitError: a tree is missing (from ``read``).
    """
    walk = _TreeWalk(read, budget)
    if old != new:
        walk.compare(old, new, "")
    walk.rows.sort(key=_path_bytes)
    return walk.rows


class _TreeWalk:
    """:func:`tree_changes`'s walk: ``read`` gives a tree's rows, at most ``budget``
    times; ``rows`` collects the changes, in the walk's order."""

    def __init__(self, read: Callable[[str], list[Row]], budget: int):
        self._read, self._budget = read, budget
        self.rows: list[DiffRow] = []

    def _listing(self, tree: str) -> list[Row]:
        self._budget -= 1
        if self._budget < 0:
            raise OverBudget
        return self._read(tree)

    def compare(self, a: str, b: str, prefix: str) -> None:
        """The changes from tree ``a`` to tree ``b`` (at ``prefix``)."""
        before = {row[3]: row for row in self._listing(a)}
        after = {row[3]: row for row in self._listing(b)}
        for name in before.keys() | after.keys():
            x, y = before.get(name), after.get(name)
            path = prefix + name
            if x is not None and y is not None:
                if (x[0], x[2]) == (y[0], y[2]):
                    continue
                if x[0] == y[0] == "040000":
                    self.compare(x[2], y[2], path + "/")
                    continue
                if "040000" not in (x[0], y[0]):
                    same = _FILE_TYPE.get(x[0], x[0]) == _FILE_TYPE.get(y[0], y[0])
                    self.rows.append(
                        (x[0], y[0], x[2], y[2], "M" if same else "T", path)
                    )
                    continue
            if x is not None:
                self.one_side(x, path, added=False)
            if y is not None:
                self.one_side(y, path, added=True)

    def one_side(self, entry: Row, path: str, added: bool) -> None:
        """An entry (a directory: every file below it) on the new side only
        (``added``) or the old side only."""
        mode, _kind, oid, _name = entry
        if mode == "040000":
            for row in self._listing(oid):
                self.one_side(row, f"{path}/{row[3]}", added)
        elif added:
            self.rows.append(("000000", mode, NULL_OID, oid, "A", path))
        else:
            self.rows.append((mode, "000000", oid, NULL_OID, "D", path))


#: A file's type as a type change (``T``) sees it: an executable file is a file.
_FILE_TYPE = {"100755": "100644"}


def _path_bytes(row: DiffRow) -> bytes:
    """The sort key of a row: its path as the bytes git compares."""
    return row[5].encode("utf-8", "surrogateescape")


def parse_merge_tree(out: bytes, clean: bool) -> MergeResult:
    """``git merge-tree --write-tree -z`` output as a :class:`MergeResult`: the tree,
    the conflicted stages, then git's informational messages (``clean``: git exited 0).
    """
    head, _, tail = out.partition(b"\0\0")
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
    return MergeResult(fields[0], clean, stages, messages)


def synthetic_commits(
    specs: Sequence[tuple[str, Sequence[str | int], str]],
) -> list[tuple[str, bytes]]:
    """The bodies and names of synthetic commits (the fixed identity and date of
    :data:`overlay.git.run.SYNTHETIC_IDENTITY`), computed without git.

    Args:
        specs: ``[(tree, parents, message), ...]``; a parent is a SHA, or the int
            index of an earlier spec.
    Returns:
        ``[(sha, body), ...]`` in order (SHA-1 names).
    """
    ident = (
        f"{SYNTHETIC_IDENTITY['GIT_AUTHOR_NAME']} "
        f"<{SYNTHETIC_IDENTITY['GIT_AUTHOR_EMAIL']}> "
        f"{SYNTHETIC_IDENTITY['GIT_AUTHOR_DATE']}"
    )
    out: list[tuple[str, bytes]] = []
    for tree, parents, message in specs:
        lines = [f"tree {tree}"]
        lines += [f"parent {out[p][0] if isinstance(p, int) else p}" for p in parents]
        lines += [f"author {ident}", f"committer {ident}", "", message]
        body = ("\n".join(lines) + "\n").encode()
        out.append((sha1(b"commit %d\0" % len(body) + body).hexdigest(), body))
    return out
