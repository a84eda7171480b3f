"""``patches-rocm/overlay.toml``: the pins, remotes, carried paths and policy.

Read with :mod:`tomllib` (the table kept in the clone's state for the next command
that reads the very same bytes, :func:`load_manifest`) and validated on every load:
every missing or unknown key is named in one error; SHAs must be 40 lowercase hex;
URLs must be ``https://``, ``http://``, ``ssh://``, ``git@host:path``, ``file://`` or
an existing local path. The manifest is the one place the pin is written
(docs/design.md §4); the keys are documented in ``docs/manifest.md``.
"""

import contextlib
import json
import os
from collections.abc import Mapping
from typing import NamedTuple

from overlay import layout
from overlay.checks.locate import find_root  # noqa: F401 - re-exported (it lived here)
from overlay.digests import sha256
from overlay.errors import ManifestError
from overlay.fs.atomic import atomic_write, write_if_changed
from overlay.fs.paths import Carry
from overlay.fs.reading import RecordError, RecordMissing, read_record_text
from overlay.git.store import is_sha
from overlay.lazy import lazy_pattern

#: table -> {key: type}; every key is required.
SCHEMA: dict[str, dict[str, type]] = {
    "upstream": {"url": str, "pin": str},
    "fork": {"url": str, "branch": str, "commit": str, "merge-base": str},
    "carry": {"include": list, "exclude": list},
    "backend": {"cmake-option": str, "architectures": list},
    "policy": {"closing-sentence": str},
}

#: table -> {key: type} of the keys that may be left out (``docs/manifest.md``).
#: ``older-closing-sentences`` and ``closing-sentence-required-from`` come together:
#: a team that adopts the policy sentence late keeps its older entries as written.
OPTIONAL: dict[str, dict[str, type]] = {
    "fork": {"uncarried-reviewed": str},
    "policy": {
        "older-closing-sentences": list,
        "closing-sentence-required-from": int,
        "outside-tree": list,
    },
}

_URL_RE = lazy_pattern(r"^(https?|ssh|git|file)://\S+$|^[\w.-]+@[\w.-]+:\S+$")


class Manifest(NamedTuple):
    """The validated manifest.

    Attributes:
        path: file it was read from.
        upstream_url, pin: upstream MLX remote and the pinned commit (40 hex).
        fork_url, fork_branch, fork_commit, merge_base: the ROCm fork remote,
            its branch, the carried commit and its merge base with upstream.
        include, exclude: carry globs.
        cmake_option: the backend's CMake switch (``MLX_BUILD_ROCM``).
        architectures: default GPU architectures (``gfx1100`` ...).
        closing_sentence: the exact sentence fix entries end with.
        older_closing_sentences: older forms accepted instead of ``closing_sentence``
            on entries numbered below ``closing_sentence_required_from``.
        closing_sentence_required_from: the first entry number that must end with
            ``closing_sentence`` (``None`` when no older form is accepted).
        outside_tree: globs of names ``LOCAL_FIXES.md`` may mention that are not in
            the MLX tree by design (the team's own repository, third-party sources);
            FIX021 does not report them.
        uncarried_reviewed: ``[fork] uncarried-reviewed``: the fork commit up to which
            the fork's changes outside ``[carry]`` were reviewed; a sync that brings
            new ones writes it, ``overlay sync --ack-uncarried`` removes it (MAN005).
    """

    path: str
    upstream_url: str
    pin: str
    fork_url: str
    fork_branch: str
    fork_commit: str
    merge_base: str
    include: tuple[str, ...]
    exclude: tuple[str, ...]
    cmake_option: str
    architectures: tuple[str, ...]
    closing_sentence: str
    older_closing_sentences: tuple[str, ...] = ()
    closing_sentence_required_from: int | None = None
    outside_tree: tuple[str, ...] = ()
    uncarried_reviewed: str | None = None

    @property
    def carry(self) -> Carry:
        """The carried-path predicate built from ``include``/``exclude``."""
        return Carry(self.include, self.exclude)

    def remote_urls(self, environ: dict[str, str] | None = None) -> dict[str, str]:
        """Remote URLs after ``OVERLAY_UPSTREAM_URL`` / ``OVERLAY_FORK_URL`` overrides.

        Returns:
            ``{"upstream": url, "fork": url}``.
        """
        return override_urls(self.upstream_url, self.fork_url, environ)


def override_urls(
    upstream_url: str, fork_url: str, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The remotes' URLs after the ``OVERLAY_UPSTREAM_URL`` / ``OVERLAY_FORK_URL``
    overrides (mirrors, a machine without network): the one place they are read.

    Args:
        upstream_url, fork_url: the URLs a record names (the manifest, an import's
            ``UPSTREAM`` file).
        environ: the environment; ``None`` for :data:`os.environ`.
    Returns:
        ``{"upstream": url, "fork": url}``.
    """
    env = os.environ if environ is None else environ
    return {
        "upstream": env.get("OVERLAY_UPSTREAM_URL") or upstream_url,
        "fork": env.get("OVERLAY_FORK_URL") or fork_url,
    }


def _valid_url(url: str) -> bool:
    """Whether a remote is a URL git reads or an absolute local path."""
    return bool(_URL_RE.match(url)) or os.path.isabs(url)


def load_toml(text: str, path: str, error: type = ManifestError) -> dict:
    """``tomllib.loads(text)`` with every failure turned into one ``error`` line naming ``path``.

    Besides syntax errors, :mod:`tomllib` raises ``RecursionError`` for deeply
    nested arrays or tables and ``ValueError`` for an integer of more than
    4,300 digits (Python's int-conversion limit, ``sys.get_int_max_str_digits``);
    both are input errors here, not bugs.

    Args:
        text: TOML source.
        path: file name used in the message.
        error: the :class:`~overlay.errors.OverlayError` subclass to raise.
    Returns:
        The parsed table.
    Raises:
        error: the text is not valid TOML, nests too deeply, or holds a number too long.
    """
    import tomllib  # only a text no cache holds: the import is most of the parse

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise error(
            f"{path}: not valid TOML: arrays or tables nested too deeply"
        ) from None
    except ValueError as exc:  # int() past sys.get_int_max_str_digits()
        raise error(f"{path}: not valid TOML: {str(exc).split(';')[0]}") from None


def parse_manifest(
    text: str, path: str = layout.MANIFEST, *, table: dict | None = None
) -> Manifest:
    """Parse and validate manifest text.

    Args:
        text: TOML source.
        path: file name used in messages.
        table: ``text`` already parsed (:func:`load_manifest`'s cache); validated all
            the same.
    Returns:
        A :class:`Manifest`.
    Raises:
        ManifestError: TOML syntax error, missing/unknown tables or keys (all
        named), wrong types, a SHA that is not 40 hex, a bad URL (exit 2).
    """
    data = table if table is not None else load_toml(text, path, ManifestError)
    # Values are checked only once the shape holds, so they can be indexed freely.
    for check in (_shape_problems, _value_problems):
        problems = check(data)
        if problems:
            raise ManifestError(f"{path}: " + "; ".join(problems))
    up, fork, policy = data["upstream"], data["fork"], data["policy"]
    return Manifest(
        path=path,
        upstream_url=up["url"],
        pin=up["pin"],
        fork_url=fork["url"],
        fork_branch=fork["branch"],
        fork_commit=fork["commit"],
        merge_base=fork["merge-base"],
        include=tuple(data["carry"]["include"]),
        exclude=tuple(data["carry"]["exclude"]),
        cmake_option=data["backend"]["cmake-option"],
        architectures=tuple(data["backend"]["architectures"]),
        closing_sentence=policy["closing-sentence"],
        older_closing_sentences=tuple(policy.get("older-closing-sentences", ())),
        closing_sentence_required_from=policy.get("closing-sentence-required-from"),
        outside_tree=tuple(policy.get("outside-tree", ())),
        uncarried_reviewed=fork.get("uncarried-reviewed"),
    )


def _shape_problems(data: dict) -> list[str]:
    """What is wrong with the tables and keys: unknown or missing ones, wrong types."""
    problems: list[str] = []
    unknown_tables = sorted(set(data) - set(SCHEMA))
    if unknown_tables:
        problems.append(
            "unknown table(s) " + ", ".join(f"[{t}]" for t in unknown_tables)
        )
    for table, keys in SCHEMA.items():
        section = data.get(table)
        if not isinstance(section, dict):
            problems.append(f"missing table [{table}]")
            continue
        problems += _table_problems(table, keys, section)
    return problems


def _table_problems(table: str, keys: dict[str, type], section: dict) -> list[str]:
    """What is wrong with one table's keys: missing, unknown, or of the wrong type."""
    problems: list[str] = []
    optional = OPTIONAL.get(table, {})
    missing = [k for k in keys if k not in section]
    unknown = sorted(set(section) - set(keys) - set(optional))
    if missing:
        problems.append(f"[{table}] missing key(s) " + ", ".join(missing))
    if unknown:
        problems.append(f"[{table}] unknown key(s) " + ", ".join(unknown))
    for key, kind in {**keys, **optional}.items():
        if key not in section:
            continue
        value = section[key]
        # tomllib reads `true` as a bool, which isinstance(..., int) would let through.
        if not isinstance(value, kind) or isinstance(value, bool):
            want = "an integer" if kind is int else "a " + kind.__name__
            problems.append(f"[{table}] {key} must be {want}")
        elif kind is list and not all(isinstance(x, str) for x in section[key]):
            problems.append(f"[{table}] {key} must be a list of strings")
    return problems


def _value_problems(data: dict) -> list[str]:
    """What is wrong with the values of a manifest of the right shape: SHAs, URLs,
    carry globs and the policy."""
    problems: list[str] = []
    up, fork = data["upstream"], data["fork"]
    for label, value in (
        ("upstream.pin", up["pin"]),
        ("fork.commit", fork["commit"]),
        ("fork.merge-base", fork["merge-base"]),
        *[
            ("fork.uncarried-reviewed", v)
            for v in [fork.get("uncarried-reviewed")]
            if v
        ],
    ):
        if not is_sha(value):
            problems.append(
                f"{label} must be a full 40-hex lowercase SHA, got {value!r}"
            )
    for label, value in (("upstream.url", up["url"]), ("fork.url", fork["url"])):
        if not _valid_url(value):
            problems.append(f"{label} is not a URL or absolute path: {value!r}")
    if not data["carry"]["include"]:
        problems.append("carry.include must name at least one glob")
    return problems + _policy_problems(data["policy"])


def _policy_problems(policy: dict) -> list[str]:
    """What is wrong with the ``[policy]`` values: an empty sentence or glob, or older
    closing sentences without the entry number they stop at (or the reverse)."""
    problems: list[str] = []
    if not policy["closing-sentence"].strip():
        problems.append("policy.closing-sentence must not be empty")
    older, since = (
        policy.get("older-closing-sentences"),
        policy.get("closing-sentence-required-from"),
    )
    if (older is None) != (since is None):
        problems.append(
            "policy.older-closing-sentences and policy.closing-sentence-required-from "
            "come together: the older forms are accepted below that entry number"
        )
    if older is not None and (not older or not all(x.strip() for x in older)):
        problems.append(
            "policy.older-closing-sentences must name at least one non-empty sentence"
        )
    if since is not None and since < 1:
        problems.append(
            "policy.closing-sentence-required-from must be an entry number "
            f"(1 or more), got {since}"
        )
    if not all(g.strip() for g in policy.get("outside-tree", [])):
        problems.append("policy.outside-tree must not hold an empty glob")
    return problems


def load_manifest(root: str) -> Manifest:
    """Read ``<root>/patches-rocm/overlay.toml``.

    The file is read with :func:`overlay.fs.atomic.read_record`: a regular file
    inside ``root`` (a symlink to one is followed), at most 16 MiB, UTF-8.

    Raises:
        ManifestError: the file is missing, refused (symlink out of the
            repository, FIFO, directory, too big), not UTF-8 (the byte offset is
            named) or invalid (exit 2).
    """
    try:
        text = read_record_text(root, layout.MANIFEST, what="manifest")
    except RecordMissing:
        raise ManifestError(
            f"{layout.MANIFEST} not found under {root}",
            hint="run overlay from the overlay repository or pass -C DIR",
        ) from None
    except RecordError as exc:
        raise ManifestError(exc.message, hint=exc.hint) from None
    return parse_manifest(text, layout.MANIFEST, table=_table(root, text))


#: Bump when what is kept for a manifest would differ for the same bytes.
MANIFEST_CACHE_VERSION = 1


def _table(root: str, text: str) -> dict:
    """The TOML table of the manifest ``text``: the one :mod:`tomllib` gave for the very
    same text before, kept in ``.overlay/`` (:data:`~overlay.layout.MANIFEST_CACHE`),
    else :mod:`tomllib`'s, then kept (best effort, replaced atomically) where the
    clone's state directory is already there.

    Most commands read the manifest, and importing and running :mod:`tomllib` is a
    noticeable part of a short one (``status``, ``refresh --check``); JSON of the
    table reads back the same values (strings, integers, floats, booleans, arrays and
    tables; a table holding anything else, a date, is not kept).

    Raises:
        ManifestError: the text is not valid TOML (:func:`load_toml`; never kept).
    """
    key = sha256(
        f"overlay-manifest {MANIFEST_CACHE_VERSION}\0".encode() + text.encode()
    ).hexdigest()
    path = layout.under(root, layout.MANIFEST_CACHE)
    try:
        with open(path, "rb") as fh:
            kept = json.loads(fh.read())
        if kept.get("key") == key and isinstance(kept.get("table"), dict):
            return kept["table"]
    except (OSError, ValueError, AttributeError):
        pass  # none kept, another text's, or damaged: parse again
    table = load_toml(text, layout.MANIFEST, ManifestError)
    try:
        data = json.dumps({"key": key, "table": table}).encode()
    except (TypeError, ValueError):
        return table  # a value JSON does not hold
    # Only into a state directory that is there: reading the manifest makes none.
    if os.path.isdir(os.path.dirname(path)):
        with contextlib.suppress(OSError):
            atomic_write(path, data, durable=False)
    return table


def manifest_text(root: str) -> str:
    """The manifest's text, for the writers below (:func:`with_pins`,
    :func:`set_uncarried_reviewed`) to edit: read as text (its line ends as Python's
    text mode gives them), after :func:`load_manifest` has read it as a record.

    Raises:
        OSError: it cannot be read; UnicodeDecodeError: it is not UTF-8.
    """
    with open(layout.under(root, layout.MANIFEST), encoding="utf-8") as fh:
        return fh.read()


def write_manifest(root: str, text: str, *, if_changed: bool = False) -> None:
    """Write ``text`` as ``<root>/patches-rocm/overlay.toml`` (temp + rename).

    Args:
        root: the overlay repository (or a directory staged as one).
        text: the whole manifest.
        if_changed: leave the file alone when it already holds those bytes.
    Raises:
        OSError: it cannot be written.
    """
    path = layout.under(root, layout.MANIFEST)
    if if_changed:
        write_if_changed(path, text.encode())
    else:
        atomic_write(path, text.encode())


_TABLE_LINE = lazy_pattern(r"^\s*\[\s*([A-Za-z0-9_-]+)\s*\]\s*(?:#.*)?$")
_PIN_LINE = lazy_pattern(
    r'^(\s*(pin|commit|merge-base)\s*=\s*")([0-9a-f]{40})("\s*(?:#.*)?)$'
)
_PIN_KEYS = {("upstream", "pin"), ("fork", "commit"), ("fork", "merge-base")}


def set_pins(text: str, pin: str, fork_commit: str, merge_base: str) -> str | None:
    """The manifest ``text`` with the three commits replaced and every other byte kept.

    What ``overlay rebase`` and ``sync`` write when they complete: the same bytes as
    tomlkit's ``doc[t][k] = sha; tomlkit.dumps(doc)`` (which keeps the key, its spacing
    and its comment) for a manifest whose three values are plain ``key = "<sha>"``
    lines under their ``[upstream]`` and ``[fork]`` headers, without importing and
    running tomlkit (a cost every pin bump would pay, docs/engine.md). Anything else
    (dotted keys, an inline table, a literal string, a key twice) is ``None``: the
    caller uses tomlkit.

    Args:
        text: the manifest as it is.
        pin, fork_commit, merge_base: the new commits (40 hex).
    Returns:
        The new text, checked by parsing it: only the three values differ.
    """
    new = {
        ("upstream", "pin"): pin,
        ("fork", "commit"): fork_commit,
        ("fork", "merge-base"): merge_base,
    }
    lines = text.split("\n")
    table = ""  # before the first header: no key there is a pin
    done: set[tuple[str, str]] = set()
    for i, line in enumerate(lines):
        m = _TABLE_LINE.match(line)
        if m:
            table = m.group(1)
            continue
        m = _PIN_LINE.match(line)
        if m and (table, m.group(2)) in _PIN_KEYS:
            if (table, m.group(2)) in done:
                return None
            done.add((table, m.group(2)))
            lines[i] = m.group(1) + new[(table, m.group(2))] + m.group(4)
    if done != _PIN_KEYS:
        return None
    out = "\n".join(lines)
    import tomllib  # the rewrite is checked by parsing both texts (a run's end only)

    try:
        before, after = tomllib.loads(text), tomllib.loads(out)
    except tomllib.TOMLDecodeError:
        return None
    for (t, k), value in new.items():
        before[t][k] = value
    return out if before == after else None


def with_pins(text: str, pin: str, fork_commit: str, merge_base: str) -> str:
    """The manifest ``text`` with its three commits replaced, every other byte kept:
    :func:`set_pins` for the plain form, else tomlkit (which keeps comments and
    layout); what a completed ``rebase`` or ``sync`` writes.

    Args:
        text: the manifest as it is; pin, fork_commit, merge_base: 40 hex.
    Returns:
        The new text.
    """
    updated = set_pins(text, pin, fork_commit, merge_base)
    if updated is not None:
        return updated
    import tomlkit  # only a manifest not in the plain form pays for tomlkit

    doc = tomlkit.parse(text)
    doc["upstream"]["pin"] = pin
    doc["fork"]["commit"] = fork_commit
    doc["fork"]["merge-base"] = merge_base
    return tomlkit.dumps(doc)


def set_fork_branch(text: str, branch: str) -> str:
    """The manifest ``text`` with ``[fork] branch`` set to ``branch`` (a sync to another
    fork branch); every other byte kept (tomlkit keeps comments and layout).

    Args:
        text: the manifest as it is; branch: the fork branch's name.
    Returns:
        The new text.
    """
    import tomlkit  # only a run that changes the branch pays for tomlkit

    doc = tomlkit.parse(text)
    fork = doc["fork"]
    assert isinstance(fork, dict)
    fork["branch"] = branch
    return tomlkit.dumps(doc)


def set_uncarried_reviewed(text: str, sha: str | None) -> str:
    """The manifest ``text`` with ``[fork] uncarried-reviewed`` set to ``sha``, or
    removed for ``None``; every other byte kept (tomlkit keeps comments and layout).

    Args:
        text: the manifest as it is; sha: a full commit name, or ``None``.
    Returns:
        The new text.
    """
    import tomlkit  # only a run that changes the key pays for tomlkit

    doc = tomlkit.parse(text)
    fork = doc["fork"]
    assert isinstance(fork, dict)
    if sha is None:
        fork.pop("uncarried-reviewed", None)
    else:
        fork["uncarried-reviewed"] = sha
    return tomlkit.dumps(doc)
