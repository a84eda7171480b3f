"""The workspace (overlay/workspace.py): one store with its remotes, one manifest, layers
on demand."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner
from gitfixtures import lines

from overlay.cli import main
from overlay.records.series import load_series
from overlay.workspace import Workspace


def test_the_store_points_at_the_manifests_remotes_once_both_are_known(overlay):
    ws = Workspace(str(overlay.root / "patches-rocm"))  # found upwards
    assert ws.root == str(overlay.root)
    store = ws.store
    urls = ws.manifest.remote_urls()
    assert store._remote_urls == urls
    store.point_remotes()  # what every fetch does first
    for name, url in urls.items():
        assert store.out("config", f"remote.{name}.url") == url
    assert ws.store is store  # opened once


def test_layers_are_computed_once_per_set_of_options(overlay, monkeypatch):
    import overlay.engine.layers as layers_module

    calls = []
    real = layers_module.compute_layers

    def counting(*args, **kwargs):
        calls.append(kwargs.get("stepwise"))
        return real(*args, **kwargs)

    monkeypatch.setattr(layers_module, "compute_layers", counting)
    ws = Workspace(str(overlay.root))
    first = ws.layers()
    assert ws.layers() is first
    ws.layers(stepwise=True)
    assert calls == [False, True]


def test_layers_of_another_series_are_kept_apart(clean):
    ws = Workspace(str(clean.root))
    full = ws.layers(stepwise=True)
    # the series as a caller reads it is the one the workspace read: the same layers
    assert ws.layers(stepwise=True, series=load_series(str(clean.root))) is full
    none = ws.layers(stepwise=True, series=[])
    assert none is not full and none.patched == full.forked != full.patched
    assert ws.layers(stepwise=True, series=[]) is none


def test_forgotten_records_are_read_again(clean):
    ws = Workspace(str(clean.root))
    manifest, layers = ws.manifest, ws.layers()
    path = clean.root / "patches-rocm" / "overlay.toml"
    path.write_text(path.read_text().replace("# test manifest", "# rewritten"))
    assert ws.manifest is manifest and ws.layers() is layers  # read once
    ws.forget_records()
    assert ws.manifest is not manifest and ws.layers() is not layers


def _counted(monkeypatch, module, name: str) -> list:
    """Count the calls of ``module.name`` (every caller's, however it imported it)."""
    calls: list = []
    real = getattr(module, name)

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return calls


@pytest.mark.parametrize("command", [["verify"], ["ci", "--only", "verify"]])
def test_a_command_reads_the_manifest_and_computes_the_layers_once(
    clean, monkeypatch, command
):
    import overlay.engine.layers
    import overlay.records.manifest

    # parse_manifest: load_manifest's own step, whoever bound load_manifest
    parsed = _counted(monkeypatch, overlay.records.manifest, "parse_manifest")
    computed = _counted(monkeypatch, overlay.engine.layers, "compute_layers")
    result = CliRunner().invoke(main, ["-C", str(clean.root), *command])
    assert result.exit_code == 0, result.output
    assert (len(parsed), len(computed)) == (1, 1)


def test_a_rebase_reads_the_manifest_once_per_command(ov, w, monkeypatch):
    import overlay.records.manifest

    parsed = _counted(monkeypatch, overlay.records.manifest, "parse_manifest")
    root = str(ov.root)
    stopped = CliRunner().invoke(main, ["-C", root, "rebase", "--onto", w.pin_conflict])
    assert stopped.exit_code == 1 and "conflicts" in stopped.output
    assert len(parsed) == 1
    work = ov.root / ".overlay" / "rebase" / "work" / "mlx" / "core.cpp"
    work.write_text(lines("core", change={5: "core 5 upstream rewrite // rocm hook"}))
    parsed.clear()
    done = CliRunner().invoke(main, ["-C", root, "rebase", "--continue"])
    assert done.exit_code == 0, done.output
    assert len(parsed) == 1
    assert (
        f'pin = "{w.pin_conflict}"'
        in (ov.root / "patches-rocm/overlay.toml").read_text()
    )


def test_outside_a_repository_the_base_is_the_start(tmp_path):
    ws = Workspace(str(tmp_path))
    assert ws.found is None and ws.base == str(tmp_path)
    assert ws.suites_path == os.path.join(
        str(tmp_path), "patches-rocm", "suites", "suites.toml"
    )
