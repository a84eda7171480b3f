"""``--abort`` of a wedged rebase state (overlay/rebase/recover.py): a state without its
backup, without ``state.json``, half written, of the wrong shape or naming a file
outside the repository is recognized, said in words, and aborted; an abort killed in
the middle of its commit keeps what it cannot restore, and says so; the rr-cache
entries a wedged run recorded are forgotten, and said so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from gitfixtures import lines, make_patch, records_hash
from gitfixtures import overlay_process as run
from gitfixtures import refusal_line as one_line_refusal
from seriesfixtures import add_patch, core_resolved_run, manifest_text, stopped_run

from overlay.engine.layers import compute_layers
from overlay.git.store import Store
from overlay.records.manifest import load_manifest


def _no_backup(state_dir: Path) -> None:
    (state_dir / "backup.json").unlink()


def _half_backup(state_dir: Path) -> None:
    data = (state_dir / "backup.json").read_bytes()
    (state_dir / "backup.json").write_bytes(data[: len(data) // 2])


def as_an_older_overlay_left_it(state_dir: Path) -> None:
    """The backup as a directory of copies (``backup/``), as overlay wrote it before
    ``backup.json``."""
    doc = json.loads((state_dir / "backup.json").read_text(encoding="utf-8"))
    for rel, entry in doc["files"].items():
        path = state_dir / "backup" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(entry["data"].encode("latin-1"))
        path.chmod(entry["mode"])
    (state_dir / "backup.json").unlink()


def _no_state(state_dir: Path) -> None:
    (state_dir / "state.json").unlink()


def _half_state(state_dir: Path) -> None:
    data = (state_dir / "state.json").read_bytes()
    (state_dir / "state.json").write_bytes(data[: len(data) // 2])


def _wrong_state(state_dir: Path) -> None:
    (state_dir / "state.json").write_text("[]")


def _hostile_state(state_dir: Path) -> None:
    state = json.loads((state_dir / "state.json").read_text())
    state["backup"].append("../../outside.txt")
    (state_dir / "state.json").write_text(json.dumps(state))


@pytest.mark.parametrize(
    "wedge, says",
    [
        (_no_backup, "is there but its backup"),
        (_half_backup, "the backup lacks"),
        (_no_state, "holds its backup but no state.json"),
        (_half_state, "is not valid JSON"),
        (_wrong_state, "does not hold an object"),
        (_hostile_state, "unsafe backed-up file"),
    ],
)
def test_a_wedged_state_is_recognized_and_abort_recovers_it(ov, w, wedge, says):
    ov.add_resolution("mlx/backend/rocm/device.h", "kept\n")
    before = records_hash(ov)
    stopped_run(ov, w)
    wedge(ov.root / ".overlay" / "rebase")

    status = run(ov, "rebase", "--status")
    assert status.returncode == 0, status.stderr
    assert "rebase state is wedged" in status.stdout and says in status.stdout
    assert "`overlay rebase --abort` recovers it" in status.stdout
    for args in (
        ("rebase", "--continue"),
        ("rebase", "--skip"),
        ("rebase", "--onto", w.pin_clean),
    ):
        refused = run(ov, *args)
        assert refused.returncode == 2, (args, refused.stdout, refused.stderr)
        assert "wedged" in one_line_refusal(refused.stderr)
        assert "--abort` recovers it" in refused.stderr
    assert "is wedged" in run(ov, "verify", "--only", "SER").stderr

    aborted = run(ov, "rebase", "--abort")
    assert aborted.returncode == 0, aborted.stderr
    assert (
        "Traceback" not in aborted.stderr
        and "aborted the wedged rebase state" in aborted.stdout
    )
    assert not (ov.root / ".overlay" / "rebase").exists()
    assert records_hash(ov) == before
    assert not (ov.root.parent / "outside.txt").exists()
    assert "no rebase or sync in progress" in run(ov, "rebase", "--status").stdout
    assert (
        run(ov, "rebase", "--onto", w.pin_conflict).returncode == 1
    )  # a new run starts


def test_abort_of_a_wedged_state_killed_mid_commit_keeps_what_it_cannot_restore(ov, w):
    store = Store()
    layers = compute_layers(store, load_manifest(str(ov.root)), str(ov.root))
    data, _ = make_patch(
        store,
        layers.patched,
        {"mlx/backend/rocm/device.cpp": lines("device", change={9: "d9"})},
    )
    ov.add_patch("0001-device.patch", data)
    before_series = (ov.root / "patches-rocm" / "series").read_bytes()
    killed = run(
        ov, "rebase", "--onto", w.pin_clean, env={"OVERLAY_TEST_KILL_AT": "commit"}
    )
    assert killed.returncode == -9
    assert f'pin = "{w.pin_clean}"' in manifest_text(ov)  # the commit had begun
    backup = ov.root / ".overlay" / "rebase" / "backup.json"
    doc = json.loads(backup.read_text(encoding="utf-8"))
    del doc["files"]["patches-rocm/overlay.toml"]
    backup.write_text(json.dumps(doc), encoding="utf-8")
    assert "the backup lacks 1 of the" in run(ov, "rebase", "--status").stdout
    aborted = run(ov, "rebase", "--abort")
    assert aborted.returncode == 0, aborted.stderr
    assert (
        "no backup copy, left as the run wrote them: patches-rocm/overlay.toml"
        in aborted.stderr
    )
    assert f'pin = "{w.pin_clean}"' in manifest_text(ov)  # kept, and said so
    assert (ov.root / "patches-rocm" / "series").read_bytes() == before_series
    assert (ov.root / "patches-rocm" / "0001-device.patch").read_bytes() == data
    assert not (ov.root / ".overlay" / "rebase").exists()


def test_a_run_an_older_overlay_stopped_is_in_progress_and_aborts_from_its_copies(
    ov, w
):
    ov.add_resolution("mlx/backend/rocm/device.h", "kept\n")
    before = records_hash(ov)
    stopped_run(ov, w)
    state_dir = ov.root / ".overlay" / "rebase"
    as_an_older_overlay_left_it(state_dir)
    (ov.root / "patches-rocm" / "series").write_text("changed by the run\n")
    status = run(ov, "rebase", "--status")
    assert status.returncode == 0 and "wedged" not in status.stdout, status.stdout
    aborted = run(ov, "rebase", "--abort")
    assert aborted.returncode == 0, aborted.stderr
    assert records_hash(ov) == before
    assert not state_dir.exists()


def test_abort_of_a_wedged_state_forgets_the_runs_rr_cache_entries_and_says_so(ov, w):
    # A run that removed (and remembered) a resolution, stopped on a patch, then lost
    # its backup: the valid state.json still names the rr-cache entry it recorded.
    rr_cache = core_resolved_run(ov, w)
    shutil.rmtree(rr_cache)
    add_patch(
        ov, "0001-ops.patch", {"mlx/ops.cpp": lines("ops", change={2: "ops 2 ours"})}
    )
    assert run(ov, "rebase", "--onto", w.base).returncode == 1  # the patch conflicts
    assert any(p.suffix != ".path" for p in rr_cache.iterdir())
    _no_backup(ov.root / ".overlay" / "rebase")
    aborted = run(ov, "rebase", "--abort")
    assert aborted.returncode == 0, aborted.stderr
    assert "aborted the wedged rebase state" in aborted.stdout
    assert (
        "forgot the 1 resolution(s) this run recorded in .overlay/rr-cache/: "
        "a next run does not replay them" in aborted.stdout
    ), aborted.stdout
    assert not rr_cache.exists()  # its entries were all it held: the directory goes too
