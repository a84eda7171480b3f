"""The engine's commands through the CLI: output, exit codes, one-line errors."""

from __future__ import annotations

from click.testing import CliRunner
from gitfixtures import env_path_without_git, make_patch

from overlay.cli import main
from overlay.engine.layers import compute_layers
from overlay.git.store import Store
from overlay.records.manifest import load_manifest


def run(overlay, *args, env=None):
    result = CliRunner().invoke(main, ["-C", str(overlay.root), *args], env=env)
    return result


def test_tree_status_export_diff(overlay, tmp_path):
    store = Store()
    layers = compute_layers(store, load_manifest(str(overlay.root)), str(overlay.root))
    patch, patched = make_patch(
        store,
        layers.forked,
        {"mlx/backend/rocm/device.h": "#pragma once\n// fix\n"},
        subject="[rocm] guard the header",
    )
    overlay.add_patch("0001-guard.patch", patch)

    tree = run(overlay, "tree")
    assert tree.exit_code == 0 and tree.output.strip() == patched
    assert run(overlay, "tree", "--layer", "forked").output.strip() == layers.forked

    dest = tmp_path / "out"
    exported = run(overlay, "export", str(dest))
    assert exported.exit_code == 0, exported.output
    assert "written" in exported.output
    assert (dest / "mlx/backend/rocm/device.h").read_text() == "#pragma once\n// fix\n"
    again = run(overlay, "export", str(dest))
    assert ": 0 written, 0 removed" in again.output

    status = run(overlay, "status", "--dest", str(dest))
    assert status.exit_code == 0, status.output
    assert (
        "0001-guard.patch  [exact]  Local-Fix 1  [rocm] guard the header"
        in status.output
    )
    assert "mlx/backend/rocm/device.h  +1 -0" in status.output
    assert f"tree {patched} (up to date" in status.output

    diff = run(overlay, "diff")
    assert diff.exit_code == 0 and "+// fix" in diff.output
    names = run(overlay, "diff", "--from", "pin", "--to", "forked", "--name-only")
    assert sorted(names.output.split()) == [
        "CMakeLists.txt",
        "mlx/backend/rocm/device.cpp",
        "mlx/backend/rocm/device.h",
        "mlx/core.cpp",
    ]


def _one_line_error(result, code=2):
    assert result.exit_code == code, result.output
    lines_ = [
        ln for ln in result.output.splitlines() if ln and not ln.startswith("hint:")
    ]
    assert len(lines_) == 1 and lines_[0].startswith("overlay: "), result.output
    assert "Traceback" not in result.output
    return lines_[0]


def test_malformed_manifest_is_one_line_exit_2(overlay):
    path = overlay.root / "patches-rocm" / "overlay.toml"
    path.write_text(
        path.read_text().replace('branch = "rocm-support"\n', 'colour = "red"\n')
    )
    msg = _one_line_error(run(overlay, "tree"))
    assert (
        "[fork] missing key(s) branch" in msg and "[fork] unknown key(s) colour" in msg
    )


def test_manifest_bad_sha_and_syntax(overlay, world):
    overlay.write_manifest("1234")
    assert "upstream.pin must be a full 40-hex" in _one_line_error(run(overlay, "tree"))
    (overlay.root / "patches-rocm" / "overlay.toml").write_text("[upstream\n")
    assert "not valid TOML" in _one_line_error(run(overlay, "tree"))


def test_unknown_ref_and_dash_ref(overlay):
    assert "unknown ref 'no-such-tag'" in _one_line_error(
        run(overlay, "tree", "--pin", "no-such-tag")
    )
    assert "may not be empty or start with '-'" in _one_line_error(
        run(overlay, "tree", "--pin=--upload-pack=x")
    )


def test_ref_by_branch_name(overlay, world):
    result = run(overlay, "tree", "--layer", "forked", "--fork", "rocm-support")
    assert result.exit_code == 0, result.output
    assert (
        result.output.strip()
        == run(overlay, "tree", "--layer", "forked").output.strip()
    )
    # "main" names upstream's newest commit, which conflicts with the fork.
    conflict = run(overlay, "tree", "--pin", "main")
    assert conflict.exit_code == 1 and "mlx/core.cpp (conflict hunks" in conflict.output


def test_offline_miss_is_one_line(overlay, tmp_path):
    result = CliRunner().invoke(
        main,
        [
            "-C",
            str(overlay.root),
            "--offline",
            "--git-dir",
            str(tmp_path / "fresh.git"),
            "tree",
        ],
    )
    assert "--offline forbids fetching" in _one_line_error(result)


def test_missing_git_is_one_line(overlay, tmp_path):
    result = run(overlay, "tree", env={"PATH": env_path_without_git(tmp_path)})
    assert "git not found on PATH" in _one_line_error(result)


def test_debug_shows_traceback(overlay):
    overlay.write_manifest("1234")
    result = CliRunner().invoke(main, ["-C", str(overlay.root), "--debug", "tree"])
    assert result.exit_code == 2 and "Traceback" in (
        result.output + str(result.stderr_bytes or b"")
    )


def test_patch_failure_exit_1_names_patch(overlay):
    store = Store()
    layers = compute_layers(store, load_manifest(str(overlay.root)), str(overlay.root))
    other = store.edit_tree(
        layers.forked, {"mlx/ops.cpp": ("100644", store.hash_blob(b"other\n"))}
    )
    patch, _ = make_patch(store, other, {"mlx/ops.cpp": "other patched\n"})
    overlay.add_patch("0001-x.patch", patch)
    msg = _one_line_error(run(overlay, "tree"), code=1)
    assert "patch 0001-x.patch does not apply: mlx/ops.cpp hunk #1" in msg


def test_missing_series_patch_is_one_line(overlay):
    overlay.write_series(["0009-gone.patch"])
    assert "0009-gone.patch is listed in series but does not exist" in _one_line_error(
        run(overlay, "tree")
    )


def test_hostile_series_entry(overlay):
    overlay.write_series(["../../etc/passwd"])
    assert "component '..'" in _one_line_error(run(overlay, "tree"))


def test_no_manifest(tmp_path):
    result = CliRunner().invoke(main, ["-C", str(tmp_path), "tree"])
    assert "patches-rocm/overlay.toml not found" in _one_line_error(result)
