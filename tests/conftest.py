"""Test isolation: fixed git identity, isolated global config, private caches.

No test touches the network: every remote is a local path.
"""

from __future__ import annotations

import os
import signal
import tempfile

import pytest
from gitfixtures import PATCH, Overlay, build_world, lines, local_fixes, make_patch

from overlay.engine.layers import compute_layers
from overlay.git.store import Store
from overlay.records.manifest import load_manifest

# A shell without job control starts background jobs with SIGINT ignored, and an ignored
# signal stays ignored across exec: the Ctrl-C tests' children would never see theirs.
# A handled signal is reset to the default in a child, so handle it here.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

#: The real upstream mirrors, read before the isolation below clears OVERLAY_*.
REAL_MIRRORS = {
    k: os.environ[k]
    for k in ("OVERLAY_UPSTREAM_URL", "OVERLAY_FORK_URL")
    if os.environ.get(k)
}


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "real_mirrors: runs against the real upstream and fork mirrors "
        "(OVERLAY_UPSTREAM_URL, OVERLAY_FORK_URL); `make test` leaves these out, "
        "`make test-real` runs only these",
    )


def pytest_collection_modifyitems(config, items):
    """Mark every test that uses the ``real_mirrors`` fixture, so that ``make test``
    (``-m "not real_mirrors"``) does not grow from minutes to half an hour when the
    mirror variables are exported for ``make run``."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        # layer_builds (test_suites_racelab.py) is module-scoped and reads the mirrors itself
        if names & {"real_mirrors", "layer_builds"}:
            item.add_marker(pytest.mark.real_mirrors)


@pytest.fixture(autouse=True)
def sigint_restored():
    """Give each test the SIGINT handler the session started with.

    ``overlay``'s ``main`` ignores SIGINT once a command has ended (clitools), and
    CliRunner runs it inside this process: without this, every later test's
    subprocesses would inherit SIGINT ignored (an ignored signal stays ignored
    across exec) and the real-Ctrl-C tests would depend on test order.
    """
    before = signal.getsignal(signal.SIGINT)
    yield
    if signal.getsignal(signal.SIGINT) is not before:
        signal.signal(signal.SIGINT, before)


@pytest.fixture(autouse=True)
def isolated_git(tmp_path_factory):
    """Give every test its own HOME, global git config and overlay store.

    The environment is changed through a MonkeyPatch of this fixture's own, not the
    test's ``monkeypatch``: a test that calls ``monkeypatch.undo()`` to drop its own
    patches must not drop the isolation too, or the rest of it runs against the
    user's store (``OVERLAY_GIT_DIR``, ``~/.cache/overlay/store.git``) and mirrors.
    """
    env = pytest.MonkeyPatch()
    home = tmp_path_factory.mktemp("home")
    config = home / ".gitconfig"
    config.write_text(
        "[user]\n\tname = Overlay Tests\n\temail = tests@overlay.invalid\n"
        "[init]\n\tdefaultBranch = main\n[commit]\n\tgpgsign = false\n[tag]\n\tgpgsign = false\n"
        '[protocol "file"]\n\tallow = always\n'
    )
    for key in list(os.environ):
        if key.startswith("GIT_") or key.startswith("OVERLAY_"):
            env.delenv(key, raising=False)
    # CI=true (as `.ci/run` runs) turns on overlay's plain progress lines on stderr
    # (overlay.report.progress), which would land in the outputs the tests compare; a test of
    # the CI behaviour sets it itself.
    env.delenv("CI", raising=False)
    env.setenv("HOME", str(home))
    env.setenv("GIT_CONFIG_GLOBAL", str(config))
    env.setenv("GIT_CONFIG_NOSYSTEM", "1")
    env.setenv("XDG_CACHE_HOME", str(home / "cache"))
    env.setenv("OVERLAY_GIT_DIR", str(home / "store.git"))
    # A command server of the user's own (overlay server start) is never reached: a
    # test's overlay commands run in their own process unless the test starts one.
    env.setenv("OVERLAY_SERVER_DIR", str(home / "server"))
    # A temp directory of the test's own: overlay sweeps the scratch directories of
    # dead processes from it (fs.atomic.sweep_scratch_dirs), which must not reach those of
    # another test run on the machine (a killed test child's git still using its index).
    tmp = home / "tmp"
    tmp.mkdir()
    env.setenv("TMPDIR", str(tmp))
    env.setattr(tempfile, "tempdir", str(tmp))
    for var in ("GIT_AUTHOR_DATE", "GIT_COMMITTER_DATE"):
        env.setenv(var, "1600000000 +0000")
    try:
        yield home
    finally:
        env.undo()


@pytest.fixture(scope="session")
def _world_template(tmp_path_factory):
    return build_world(tmp_path_factory.mktemp("world"))


@pytest.fixture
def world(_world_template):
    """Upstream + fork repositories (shared, read-only for tests)."""
    return _world_template


@pytest.fixture
def overlay(tmp_path, world):
    """An overlay repository on the fork's merge base, empty series."""
    return Overlay(tmp_path / "overlay", world)


@pytest.fixture
def real_mirrors(monkeypatch):
    """Point overlay at the real ml-explore/mlx and NripeshN/mlx mirrors, or skip.

    Set ``OVERLAY_UPSTREAM_URL`` and ``OVERLAY_FORK_URL`` (local mirror paths) to run these.
    """
    if len(REAL_MIRRORS) != 2:
        pytest.skip(
            "set OVERLAY_UPSTREAM_URL and OVERLAY_FORK_URL to the real mirrors to run this"
        )
    for key, value in REAL_MIRRORS.items():
        monkeypatch.setenv(key, value)
    return REAL_MIRRORS


@pytest.fixture
def w(tmp_path):
    """A private world: tests that add upstream and fork commits (the shared ``world``
    is a copy of one template and must not grow)."""
    return build_world(tmp_path / "world")


@pytest.fixture
def ov(tmp_path, w):
    """An overlay on ``w``'s merge base with an empty series and a minimal LOCAL_FIXES.md."""
    o = Overlay(tmp_path / "overlay", w)
    (o.root / "LOCAL_FIXES.md").write_text(
        f"# Local changes relative to x/fork@{w.fork_commit[:8]}\n\n"
        f"## Retarget onto the MLX pin ({w.base[:8]})\n\n## Fixes to the fork's kernels\n\n"
    )
    return o


@pytest.fixture
def clean(overlay, world):
    """An overlay with one patch, its entry, and a verify-clean record."""
    store = Store()
    layers = compute_layers(store, load_manifest(str(overlay.root)), str(overlay.root))
    patch, _ = make_patch(
        store,
        layers.forked,
        {"mlx/backend/rocm/device.cpp": lines("device", change={3: "device 3 locked"})},
        subject="rocm: lock the device",
    )
    overlay.add_patch(PATCH, patch)
    (overlay.root / "LOCAL_FIXES.md").write_text(local_fixes(world))
    return overlay
