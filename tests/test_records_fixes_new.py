"""``overlay fix list`` and ``overlay fix new`` (overlay/records/fixes/new.py): rows,
rendering a new entry into the file (a byte-order mark and CRLF kept), writing it (the
document fixture comes from test_records_fixes, the patch records from
test_records_fixes_cross_checks)."""

from __future__ import annotations

import os
import stat

import pytest
from gitfixtures import cli
from test_records_fixes import FORK, FORK_COMMIT, PIN, S, all_text_checks, doc
from test_records_fixes_cross_checks import P1, good_patches

from overlay.errors import OverlayError
from overlay.fs.atomic import atomic_write
from overlay.records import fixes

# --------------------------------------------------------------------------- fix list / fix new


def test_list_entries():
    rows = fixes.list_entries(doc(), good_patches())
    assert rows[1] == {
        "number": 2,
        "title": "Make hipBLASLt GEMM state safe",
        "section": "kernels",
        "line": 10,
        "files": ["gemms/hipblaslt_gemm.cpp", "device.cpp"],
        "patches": [P1],
    }
    assert rows[0]["patches"] == []


@pytest.mark.parametrize("section", ["kernels", "build", "api", "retarget"])
def test_render_new_entry_appends_next_number(section):
    text, n = fixes.render_new_entry(
        doc(),
        section,
        "Guard the stream map",
        ["mlx/backend/rocm/device.cpp"],
        closing_sentence=S,
    )
    assert n == 5
    d = fixes.parse(text)
    e = d.entry(5)
    assert e.section == section and e.title == "Guard the stream map"
    assert e.files == ("mlx/backend/rocm/device.cpp",)
    assert all_text_checks(d) == []
    assert fixes.ends_with_closing(e.text, S) is (section != "retarget")
    assert fixes.PLACEHOLDER_BODY.split()[0] in e.text
    # the entry is the last item of its section, and nothing else moved
    sec = d.section(section)
    assert sec.entries[-1] is e
    assert [x.number for x in d.entries() if x.number != 5] == [1, 2, 3, 4]
    assert max(len(line) for line in text.splitlines()[e.line - 1 : e.end_line]) <= 88


def test_render_new_entry_creates_section_in_order():
    d = doc(l14=None, l15=None, l16=None, l17=None)  # no build section
    text, n = fixes.render_new_entry(
        d,
        "build",
        "Set arches",
        ["CMakeLists.txt"],
        "Uses the manifest list.",
        closing_sentence=S,
    )
    nd = fixes.parse(text)
    assert n == 5  # entries 1, 2, 4 remain: the next number is the highest + 1
    assert [s.key for s in nd.sections] == [
        "retarget",
        "kernels",
        "build",
        "api",
        "dropped",
    ]
    assert nd.entry(n).text.startswith(
        "Uses the manifest list. Files: `CMakeLists.txt`."
    )


def test_render_new_entry_into_empty_file_and_new_retarget():
    d = fixes.parse("# Local changes relative to NripeshN/mlx@75915908\n")
    text, n = fixes.render_new_entry(d, "retarget", "Resolve x", ["mlx/x.cpp"], pin=PIN)
    assert n == 1
    lines = text.splitlines()
    assert lines[:4] == [
        "# Local changes relative to NripeshN/mlx@75915908",
        "",
        "## Retarget onto the MLX pin (39886de4)",
        "",
    ]
    assert lines[4].startswith("1. **Resolve x.** TODO:")
    assert all_text_checks(fixes.parse(text)) == []


def test_render_new_entry_errors():
    with pytest.raises(OverlayError):
        fixes.render_new_entry(doc(), "dropped", "x", [], closing_sentence=S)
    with pytest.raises(OverlayError):
        fixes.render_new_entry(doc(), "kernels", "x", [])  # no closing sentence
    with pytest.raises(OverlayError):
        fixes.render_new_entry(doc(), "kernels", "  ", [], closing_sentence=S)
    with pytest.raises(OverlayError):
        fixes.render_new_entry(doc(), "kernels", "x", ["a `b`"], closing_sentence=S)
    with pytest.raises(OverlayError):
        fixes.render_new_entry(
            fixes.parse("# T\n"), "retarget", "x", []
        )  # no pin to name the section


def test_add_entry_writes_atomically(tmp_path):
    target = tmp_path / "LOCAL_FIXES.md"
    n = fixes.add_entry(
        target,
        "kernels",
        "First",
        ["mlx/backend/rocm/device.cpp"],
        closing_sentence=S,
        fork_repo=FORK,
        fork_commit=FORK_COMMIT,
    )
    assert n == 1
    n = fixes.add_entry(
        target, "kernels", "Second", ["mlx/backend/rocm/pinned.cu"], closing_sentence=S
    )
    assert n == 2
    d = fixes.load(target)
    assert [e.number for e in d.entries()] == [1, 2]
    assert d.fork_sha == "75915908"
    assert os.listdir(tmp_path) == ["LOCAL_FIXES.md"]  # no temp file left


def test_atomic_write_keeps_mode_and_cleans_up(tmp_path):
    p = tmp_path / "f"
    atomic_write(p, b"one")
    assert stat.S_IMODE(p.stat().st_mode) == 0o644
    p.chmod(0o600)
    atomic_write(p, b"two", durable=False)
    assert p.read_bytes() == b"two" and stat.S_IMODE(p.stat().st_mode) == 0o600
    with pytest.raises(TypeError):
        atomic_write(p, "text")
    with pytest.raises(OSError):
        atomic_write(tmp_path / "missing" / "f", b"x")
    assert sorted(os.listdir(tmp_path)) == ["f"]


def test_fix_new_keeps_the_byte_order_mark_and_crlf(ov):
    path = ov.root / "LOCAL_FIXES.md"
    text = path.read_text().replace("\n", "\r\n")
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    done = cli(
        ov,
        "fix",
        "new",
        "--section",
        "kernels",
        "--title",
        "Lock it",
        "--file",
        "mlx/backend/rocm/device.cpp",
    )
    assert done.exit_code == 0, done.output
    data = path.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf# Local changes"), data[:40]
    assert b"**Lock it.**" in data and b"\n" not in data.replace(b"\r\n", b"")
