"""The series file and its patch files (overlay/records/series.py): every writer of the
series keeps the file's own line ending (a rebase that drops a patch keeps a CRLF
series too); on hostile input (an entry that is not a regular file, a name too long, a
series that is not UTF-8, a patch that is a symlink) each read is one line or a
finding."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from fuzzlib import failure_line, guarded_cli, hang_guard, verify_codes
from gitfixtures import PATCH, cli, lines
from seriesfixtures import add_patch, write_fixes
from test_edit import DEVICE, workdir_of

from overlay.errors import PatchFormatError
from overlay.fs.reading import RecordError
from overlay.records import series
from overlay.records.series import load_patch, load_series, read_series


@pytest.mark.parametrize("kind", ["fifo", "directory", "loop", "dirlink"])
def test_series_entry_that_is_not_a_file(clean, kind):
    """A series entry that is a directory or a symlink loop is one line, not a traceback."""
    path = clean.root / "patches-rocm" / PATCH
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "loop":
        path.symlink_to(PATCH)
    else:
        path.symlink_to(".")
    with hang_guard():
        with pytest.raises(RecordError):
            load_patch(str(clean.root), PATCH)
    result = guarded_cli(clean.root, "status")
    assert result.exit_code == 2 and PATCH in failure_line(result)
    assert ("SER014", f"patches-rocm/{PATCH}") in verify_codes(clean.root)


def test_series_entry_name_too_long(clean):
    clean.write_series(["x" * 300 + ".patch"])
    result = guarded_cli(clean.root, "status")
    assert result.exit_code == 2 and "too long" in failure_line(result)
    assert "SER001" in [
        c for c, _p in verify_codes(clean.root)
    ]  # such a file cannot exist


def test_non_utf8_series_is_one_line(clean):
    """A series that is not UTF-8 is one line, not a traceback."""
    (clean.root / "patches-rocm" / "series").write_bytes(
        PATCH.encode() + b"\n\xff\xfe\n"
    )
    result = guarded_cli(clean.root, "status")
    assert result.exit_code == 2
    assert failure_line(result) == (
        "overlay: patches-rocm/series: series is not UTF-8: invalid start byte "
        f"at byte {len(PATCH) + 1} (line 2)"
    )
    assert ("SER014", "patches-rocm/series") in verify_codes(clean.root)
    with pytest.raises(RecordError):
        read_series(str(clean.root))


def test_patch_symlinked_inside_the_repository_is_refused(clean):
    """A patch may not be a symlink at all: refresh would replace the link by a file."""
    real = clean.root / "kept.patch.txt"
    path = clean.root / "patches-rocm" / PATCH
    real.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(real)
    assert ("SER014", f"patches-rocm/{PATCH}") in verify_codes(clean.root)


CRLF = "# the fixes\r\n0001-a.patch\r\n\r\n0002-b.patch  # b\r\n"


@pytest.mark.parametrize("text", [CRLF, CRLF.replace("\r\n", "\n")])
def test_every_writer_keeps_the_series_line_ending(text):
    nl = "\r\n" if "\r\n" in text else "\n"
    added = series.series_with(text, "0003-c.patch", "0001-a.patch")
    assert added.splitlines(keepends=True)[2] == "0003-c.patch" + nl
    assert series.series_with(text, "0003-c.patch", None).endswith(
        "0002-b.patch  # b" + nl + "0003-c.patch" + nl
    )
    assert series.series_renamed(text, "0002-b.patch", "0002-bb.patch") == text.replace(
        "0002-b.patch", "0002-bb.patch"
    )
    assert series.series_keeping(text, {"0002-b.patch"}) == text.replace(
        "0001-a.patch" + nl, ""
    )
    with pytest.raises(series.OverlayError):
        series.series_renamed(text, "0009-x.patch", "y.patch")


def test_a_rebase_that_drops_a_patch_keeps_a_crlf_series(ov, w):
    device = "mlx/backend/rocm/device.cpp"
    data = add_patch(
        ov, "0001-device.patch", {device: lines("device", change={9: "d9"})}
    )
    ov.add_patch("0002-again.patch", data.replace(b"Local-Fix: 1", b"Local-Fix: 2"))
    write_fixes(ov, [("Device.", [device]), ("Again.", [device])])
    path = ov.root / "patches-rocm" / "series"
    path.write_bytes(b"# ours\r\n0001-device.patch\r\n0002-again.patch\r\n")
    done = cli(ov, "rebase", "--onto", w.pin_clean)
    assert done.exit_code == 0, done.output
    assert path.read_bytes() == b"# ours\r\n0001-device.patch\r\n"


# -- the parsed series kept for the next command (ParsedSeries) ------------------------


def _format_patches(tmp_path: Path) -> list[tuple[str, bytes]]:
    """``git format-patch`` of commits that add, change, rename, delete, chmod a file,
    add a binary one, one under a non-ASCII name (git quotes it), a text line with a
    NUL byte and a file without a final newline: the kinds of change the parser reads."""
    repo = tmp_path / "made"
    repo.mkdir()

    def run(*args: str) -> str:
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@e", *args],
            cwd=repo,
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    run("init", "-q")
    (repo / "a.txt").write_text("".join(f"line {i}\n" for i in range(40)))
    (repo / "gone.txt").write_text("going\n")
    run("add", "-A")
    run("commit", "-qm", "base")
    steps = [
        lambda: (repo / "a.txt").write_text(
            "".join(f"line {i}{' changed' if i % 9 == 0 else ''}\n" for i in range(40))
        ),
        lambda: os.rename(repo / "a.txt", repo / "moved.txt"),
        lambda: (repo / "gone.txt").unlink(),
        lambda: (repo / "moved.txt").chmod(0o755),
        lambda: (repo / "blob.bin").write_bytes(bytes(range(256)) * 4),
        lambda: (repo / 'naïve "q".txt').write_text("quoted name\n"),
        lambda: (repo / "nul.txt").write_bytes(
            b"text\0with a NUL\nand more\n"
        ),  # binary
        lambda: (repo / "tail.txt").write_text("no newline at the end"),
    ]
    for number, step in enumerate(steps, 1):
        step()
        run("add", "-A")
        run(
            "commit",
            "-qm",
            f"rocm: step {number}\n\nWhy step {number}.\n\nLocal-Fix: {number}",
        )
    out = tmp_path / "out"
    run("format-patch", "-q", "-M", "--binary", "-o", str(out), "HEAD~8")
    made = [(p.name, p.read_bytes()) for p in sorted(out.iterdir())]
    # git writes a file with a NUL as binary: a text hunk holding one is made by hand
    name, data = made[0]
    made[0] = (name, data.replace(b"+line 9 changed", b"+line 9 ch\0anged", 1))
    assert made[0][1] != data
    return made


def _series_of(root: Path, patches: list[tuple[str, bytes]]) -> None:
    pdir = root / "patches-rocm"
    pdir.mkdir(parents=True, exist_ok=True)
    for name, data in patches:
        (pdir / name).write_bytes(data)
    (pdir / "series").write_text("".join(f"{name}\n" for name, _ in patches))


def _no_parse(monkeypatch) -> None:
    def refuse(data, name, *args, **kwargs):
        raise AssertionError(f"{name} was parsed")

    monkeypatch.setattr(series, "parse_patch", refuse)


def test_a_series_read_again_is_the_same_and_nothing_is_parsed(tmp_path, monkeypatch):
    root = tmp_path / "overlay"
    _series_of(root, _format_patches(tmp_path))
    first = load_series(str(root))
    assert not (root / ".overlay").exists()  # no state directory: none is made for it
    (root / ".overlay").mkdir()
    assert load_series(str(root)) == first
    kept = json.loads((root / ".overlay" / "series-cache.json").read_bytes())
    assert len(kept["patches"]) == len(first) == 8
    kinds = {
        (c.rename, c.binary, c.mode_change != "", c.nul_line is not None)
        for p in first
        for c in p.changes
    }
    assert (True, False, False, False) in kinds and (False, True, False, False) in kinds
    assert any(k[2] for k in kinds) and any(k[3] for k in kinds)
    _no_parse(monkeypatch)
    again = load_series(str(root))
    assert again == first
    assert [type(c) for p in again for c in p.changes] == [
        series.FileChange for p in first for c in p.changes
    ]
    assert all(isinstance(c.hunks, tuple) for p in again for c in p.changes)


def test_a_changed_patch_is_parsed_again_and_only_the_series_is_kept(
    tmp_path, monkeypatch
):
    root = tmp_path / "overlay"
    patches = _format_patches(tmp_path)
    _series_of(root, patches)
    (root / ".overlay").mkdir()
    load_series(str(root))
    name, data = patches[0]
    changed = data.replace(b"Why step 1.", b"Why step 1, said again.")
    _series_of(root, [(name, changed), *patches[1:4]])
    parsed = []
    real = series.parse_patch

    def counting(data, name, *args, **kwargs):
        parsed.append(name)
        return real(data, name, *args, **kwargs)

    monkeypatch.setattr(series, "parse_patch", counting)
    now = load_series(str(root))
    assert parsed == [name]
    assert now[0].description.startswith("Why step 1, said again.")
    kept = json.loads((root / ".overlay" / "series-cache.json").read_bytes())
    assert len(kept["patches"]) == 4  # the four patches the series lists now


@pytest.mark.parametrize(
    "damage",
    [b"", b"{not json", b"[]", b'{"version": 99, "patches": {}}', "shape"],
)
def test_a_damaged_cache_is_parsed_again_and_replaced(tmp_path, damage):
    root = tmp_path / "overlay"
    _series_of(root, _format_patches(tmp_path))
    (root / ".overlay").mkdir()
    first = load_series(str(root))
    cache = root / ".overlay" / "series-cache.json"
    if damage == "shape":  # every entry of the wrong shape
        kept = json.loads(cache.read_bytes())
        kept["patches"] = {k: [1, 2] for k in kept["patches"]}
        damage = json.dumps(kept).encode()
    cache.write_bytes(damage)
    assert load_series(str(root)) == first
    assert len(json.loads(cache.read_bytes())["patches"]) == len(first)


def test_a_patch_that_does_not_parse_is_never_kept(tmp_path):
    root = tmp_path / "overlay"
    patches = _format_patches(tmp_path)[:2]
    name, data = patches[0]
    broken = data.replace(b"@@ -", b"@@ x", 1)
    assert broken != data
    _series_of(root, [patches[1], (name, broken)])
    (root / ".overlay").mkdir()
    for _ in range(2):
        with pytest.raises(PatchFormatError, match=name):
            load_series(str(root))
    assert not (root / ".overlay" / "series-cache.json").exists()


def test_a_record_keeps_the_parse_of_the_patch_it_wrote(clean, monkeypatch):
    (clean.root / ".overlay").mkdir(exist_ok=True)
    load_series(str(clean.root))
    started = cli(clean, "edit", PATCH)
    assert started.exit_code == 0, started.output
    work = clean.root / workdir_of(started.output)
    (work / DEVICE).write_text(lines("device", change={4: "device 4 recorded"}))
    done = cli(clean, "record")
    assert done.exit_code == 0, done.output
    _no_parse(monkeypatch)  # the next command reads the recorded patch from the cache
    (patch,) = [p for p in load_series(str(clean.root)) if p.name == PATCH]
    assert b"+device 4 recorded" in patch.data and patch.changes
