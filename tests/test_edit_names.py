"""The edit loop's names and identity (issue 30 item 4): a patch named by a unique
prefix, renamed without losing a byte, a new patch authored by the user's git identity,
and a new repository's closing sentence that is the team's own."""

from __future__ import annotations

import subprocess

from gitfixtures import PATCH, cli, lines

PDIR = "patches-rocm"
DEVICE = "mlx/backend/rocm/device.cpp"


def new_patch(o, name: str, line: int) -> None:
    started = cli(o, "edit", "--new", name)
    assert started.exit_code == 0, started.output
    work = o.root / ".overlay" / "edit" / name
    (work / DEVICE).write_text(
        lines("device", change={3: "device 3 locked", line: f"device {line} fixed"})
    )
    recorded = cli(
        o, "record", "-m", f"rocm: fix {line}", "--description", "Why it is needed."
    )
    assert recorded.exit_code == 0, recorded.output


def test_a_unique_prefix_names_a_patch_an_ambiguous_one_is_refused(clean):
    started = cli(clean, "edit", "0001")
    assert started.exit_code == 0, started.output
    assert PATCH in started.output
    assert cli(clean, "edit", "--abort").exit_code == 0
    new_patch(clean, "0001-second", 20)
    both = cli(clean, "edit", "0001")
    assert both.exit_code == 2
    assert f"0001-second.patch, {PATCH}" in both.output or (
        PATCH in both.output and "0001-second.patch" in both.output
    )
    assert "Traceback" not in both.output
    assert cli(clean, "edit", "0001-r").exit_code == 0


def test_rename_keeps_every_byte_and_the_series_place(clean):
    new_patch(clean, "0002-later", 20)
    before = (clean.root / PDIR / PATCH).read_bytes()
    renamed = cli(clean, "edit", "--rename", "0001-lock-device", "0001")
    assert renamed.exit_code == 0, renamed.output
    assert f"renamed {PDIR}/{PATCH} to {PDIR}/0001-lock-device.patch" in renamed.output
    assert not (clean.root / PDIR / PATCH).exists()
    assert (clean.root / PDIR / "0001-lock-device.patch").read_bytes() == before
    assert (clean.root / PDIR / "series").read_text() == (
        "0001-lock-device.patch\n0002-later.patch\n"
    )
    assert not (clean.root / ".overlay" / "edit.json").exists()
    verified = cli(clean, "verify")
    assert verified.exit_code == 0, verified.output
    # A taken name is refused, and so is renaming during an edit through edit --rename.
    taken = cli(clean, "edit", "--rename", "0002-later", "0001")
    assert taken.exit_code == 2 and "already exists" in taken.output
    # record --name renames the patch being edited as it records it.
    assert cli(clean, "edit", "0002").exit_code == 0
    work = clean.root / ".overlay" / "edit" / "0002-later"
    (work / DEVICE).write_text(
        lines("device", change={3: "device 3 locked", 20: "device 20 fixed twice"})
    )
    recorded = cli(clean, "record", "--name", "0002-fix-twenty")
    assert recorded.exit_code == 0, recorded.output
    assert (clean.root / PDIR / "series").read_text() == (
        "0001-lock-device.patch\n0002-fix-twenty.patch\n"
    )
    assert not (clean.root / PDIR / "0002-later.patch").exists()
    assert cli(clean, "verify").exit_code == 0


def test_a_new_patch_is_authored_by_the_git_identity_of_the_repository(clean):
    subprocess.run(["git", "init", "-q", str(clean.root)], check=True)
    for key, value in (
        ("user.name", "Ada Lovelace"),
        ("user.email", "ada@example.org"),
    ):
        subprocess.run(["git", "-C", str(clean.root), "config", key, value], check=True)
    new_patch(clean, "0002-later", 20)
    data = (clean.root / PDIR / "0002-later.patch").read_text()
    assert "From: Ada Lovelace <ada@example.org>\n" in data
