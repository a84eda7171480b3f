"""Issue 18, part 1 and 2: a real team's LOCAL_FIXES.md read fairly.

The policy's closing sentence with a trailing issue reference and older accepted
forms, the upstream-marking phrase "also be proposed there", FIX021 counting only
repository paths, and git-ignored files that are no records. Every excerpt below
is written for the purpose.
"""

from __future__ import annotations

import pytest
from gitfixtures import CLOSING, git, local_fixes

from overlay.checks.verify import verify
from overlay.errors import ManifestError
from overlay.records import fixes
from overlay.records.manifest import parse_manifest
from overlay.workspace import Workspace

S = CLOSING
OLD = "Applies to the fork."

MANIFEST = """\
[upstream]
url = "https://example.invalid/mlx.git"
pin = "{sha}"
[fork]
url = "https://example.invalid/fork.git"
branch = "rocm-support"
commit = "{sha}"
merge-base = "{sha}"
[carry]
include = ["mlx/**"]
exclude = []
[backend]
cmake-option = "MLX_BUILD_ROCM"
architectures = []
[policy]
closing-sentence = "{closing}"
""".format(sha="a" * 40, closing=S)


def policy_doc(*entries: str) -> fixes.Document:
    body = "\n\n".join(entries)
    return fixes.parse(
        f"# Local changes relative to x/fork@aaaaaaaa\n\n## Fixes to the fork's kernels\n\n{body}\n"
    )


def fix013(doc, **kw):
    return [
        (f.code, f.line, f.message) for f in fixes.check_closing_sentence(doc, S, **kw)
    ]


# ----------------------------------------------------------------------------- manifest


def test_manifest_reads_the_optional_policy_keys():
    m = parse_manifest(
        MANIFEST + f'older-closing-sentences = ["{OLD}"]\n'
        "closing-sentence-required-from = 20\n"
        'outside-tree = ["tests/**", "third_party/**"]\n'
    )
    assert m.older_closing_sentences == (OLD,)
    assert m.closing_sentence_required_from == 20
    assert m.outside_tree == ("tests/**", "third_party/**")
    plain = parse_manifest(MANIFEST)
    assert (
        plain.older_closing_sentences,
        plain.closing_sentence_required_from,
        plain.outside_tree,
    ) == ((), None, ())


@pytest.mark.parametrize(
    "extra, words",
    [
        (f'older-closing-sentences = ["{OLD}"]\n', "come together"),
        ("closing-sentence-required-from = 20\n", "come together"),
        (
            "older-closing-sentences = []\nclosing-sentence-required-from = 3\n",
            "at least one",
        ),
        (
            f'older-closing-sentences = ["{OLD}"]\nclosing-sentence-required-from = 0\n',
            "1 or more",
        ),
        (
            f'older-closing-sentences = ["{OLD}"]\nclosing-sentence-required-from = true\n',
            "must be an integer",
        ),
        ('outside-tree = "tests/**"\n', "outside-tree must be a list"),
        ('outside-tree = [""]\n', "empty glob"),
        ("older-forms = []\n", "unknown key(s) older-forms"),
    ],
)
def test_manifest_refuses_bad_policy_keys(extra, words):
    with pytest.raises(ManifestError) as info:
        parse_manifest(MANIFEST + extra)
    assert words in info.value.message


# ----------------------------------------------------------------------------- FIX013


@pytest.mark.parametrize(
    "ending",
    [
        f"{S} (acme/mlx-port#2149)",
        f"{S} (#7)",
        f"{S} (acme/mlx-port#12, #13)",
        f"{S[:-1]} (acme/mlx-port#12).",
        f"{S[:-1]} (#12).",
    ],
)
def test_closing_sentence_with_a_trailing_reference(ending):
    d = policy_doc(f"1. **Guard the queue.** The queue is locked now. {ending}")
    assert fix013(d) == []


@pytest.mark.parametrize(
    "ending",
    [
        f"{S} (see the notes)",  # not an issue reference
        f"{S} acme/mlx-port#12",  # no parentheses
        f"{S} (acme/mlx-port#12) and more.",  # the reference is not the end
        f"{S[:-1]} (#12)",  # neither position: no period at all
        f"{S} (acme#12)",  # owner/repo needs both parts
    ],
)
def test_closing_sentence_reference_forms_that_are_not_accepted(ending):
    d = policy_doc(f"1. **Guard the queue.** The queue is locked now. {ending}")
    assert [c for c, _l, _m in fix013(d)] == ["FIX013"]


def test_older_forms_are_accepted_below_the_entry_number():
    d = policy_doc(
        f"1. **Old one.** Kept. {OLD}",
        f"2. **Old two.** Kept. {OLD} (acme/mlx-port#4)",
        f"3. **New three.** Kept. {S}",
        f"4. **New four.** Kept. {OLD}",
        "5. **No sentence.** Kept.",
    )
    found = fix013(d, older=[OLD], required_from=3)
    assert [(c, m.split(" ")[1]) for c, _l, m in found] == [
        ("FIX013", "4"),
        ("FIX013", "5"),
    ]
    assert "older form" in found[0][2] and "from 3 on" in found[0][2]
    assert "older form" not in found[1][2]
    # without the policy keys every older form is a finding, as before
    assert len(fix013(d)) == 4


def test_verify_reads_the_policy_from_the_manifest(clean, world):
    manifest = clean.root / "patches-rocm" / "overlay.toml"
    names = (
        "`mlx/backend/rocm/device.cpp` (see `tests/kv_cache.rs`, `scripts/bench.sh`, "
        "`state.mutex` and `quantized/qmv_tiled_kernel.o`)"
    )
    (clean.root / "LOCAL_FIXES.md").write_text(
        local_fixes(world, closing=OLD, entry_files=names)
    )
    found = [(f.code, f.message) for f in verify(Workspace(str(clean.root))).findings]
    assert sorted(c for c, _m in found) == ["FIX013", "FIX021", "FIX021"], found
    manifest.write_text(
        manifest.read_text() + f'older-closing-sentences = ["{OLD}"]\n'
        "closing-sentence-required-from = 2\n"
        'outside-tree = ["tests/**", "scripts/**"]\n'
    )
    assert verify(Workspace(str(clean.root))).findings == []


# ----------------------------------------------------------------------------- FIX014


@pytest.mark.parametrize(
    "phrase, marked",
    [
        ("This should also be proposed there.", True),
        ("The guard could be proposed upstream.", True),
        ("It may also be submitted later.", True),
        ("This should not be proposed there.", False),
        ("It was proposed there in March and declined.", False),
        (S, False),
    ],
)
def test_fix014_catches_a_wish_to_propose(phrase, marked):
    d = fixes.parse(
        f"# Local changes relative to x/fork@aaaaaaaa\n\nA preamble. {phrase}\n"
    )
    assert bool(fixes.check_upstream_marking(d)) is marked


# ----------------------------------------------------------------------------- FIX021

TREE = {
    "CMakeLists.txt",
    "mlx/backend/rocm/device.cpp",
    "mlx/backend/rocm/event.hip",
    "mlx/backend/metal/indexing.cpp",
    "mlx/backend/cuda/indexing.cpp",
}


def fix021(names: list[str], outside_tree=()) -> list[str]:
    text = " ".join(f"`{n}`" for n in names)
    d = fixes.parse(
        "# Local changes relative to x/fork@aaaaaaaa\n\n## Retarget onto the MLX pin (aaaaaaaa)\n\n"
        f"1. **Names.** {text}.\n"
    )
    found = fixes.check_patch_entries(d, [], TREE, outside_tree=outside_tree)
    return [f.message.split("`")[1] for f in found if f.code == "FIX021"]


@pytest.mark.parametrize(
    "name",
    [
        "state.mutex",
        "blockIdx.y",  # expressions
        ".hip",
        ".cpp",  # bare extensions
        "event.o",
        "quantized/qmv_tiled_kernel.o",
        "_deps/mlx-src",
        "_deps/",
        "build/rocm/CMakeCache.txt",
        "rocvirtual.cpp",  # a bare name not in the tree is prose
        "acme/Model-0.5B",  # a model id
        "backend/metal/indexing.cpp",  # relative to mlx/
        "backend/rocm/event.hip",
        "mlx/backend/rocm/",  # relative to mlx/ again, and a directory
    ],
)
def test_fix021_not_reported(name):
    assert fix021([name]) == []


@pytest.mark.parametrize(
    "name",
    [
        "mlx/backend/rocm/gone.cpp",  # a real path that is gone
        "gemms/gone.cpp",  # backend-relative
        "third_party/rocwmma/rocwmma.hpp",  # a third-party source: reported until the policy names it
        "tests/kv_cache.rs",  # the team's own repository: the same
        "mlx/backend/gone/",  # a directory with nothing under it
    ],
)
def test_fix021_reported(name):
    assert fix021([name]) == [name]


def test_fix021_outside_tree_globs():
    names = [
        "third_party/rocwmma/rocwmma.hpp",
        "tests/kv_cache.rs",
        "scripts/bench/run.sh",
        "mlx/backend/rocm/gone.cpp",
    ]
    assert fix021(
        names, outside_tree=["third_party/**", "tests/*.rs", "scripts/**"]
    ) == ["mlx/backend/rocm/gone.cpp"]


def test_fix020_accepts_a_name_relative_to_mlx():
    d = fixes.parse(
        "# Local changes relative to x/fork@aaaaaaaa\n\n## Fixes to the fork's kernels\n\n"
        f"1. **Index.** Fixes `backend/metal/indexing.cpp`. {S}\n"
    )
    rec = fixes.PatchRecord(
        "patches-rocm/0001-x.patch",
        1,
        "not-needed",
        {"mlx/backend/metal/indexing.cpp"},
        set(),
    )
    assert fixes.check_patch_entries(d, [rec], TREE) == []


def test_several_local_fix_trailers_each_count():
    d = fixes.parse(
        "# Local changes relative to x/fork@aaaaaaaa\n\n## Fixes to the fork's kernels\n\n"
        f"1. **One.** In `mlx/backend/rocm/device.cpp`. {S}\n\n"
        f"2. **Two.** Also in `mlx/backend/rocm/device.cpp`. {S}\n\n"
        f"3. **Three.** In `mlx/backend/rocm/event.hip`. {S}\n"
    )
    both = fixes.PatchRecord(
        "patches-rocm/0001-x.patch",
        ("1", "2"),
        "not-needed",
        {"mlx/backend/rocm/device.cpp"},
        set(),
    )
    assert [f.code for f in fixes.check_patch_entries(d, [both], TREE)] == [
        "FIX024"
    ]  # entry 3 only
    wrong = both._replace(local_fix=("1", "3"))
    found = fixes.check_patch_entries(d, [wrong], TREE)
    assert sorted(f.code for f in found) == [
        "FIX020",
        "FIX024",
    ]  # 3 does not name device.cpp; 2 has none
    assert [
        f.code
        for f in fixes.check_patch_entries(d, [both._replace(local_fix=())], TREE)
    ][0] == "FIX017"


# ----------------------------------------------------------------------------- git-ignored files


def _git_repo(root) -> None:
    git(root, "init", "-q")


def test_ignored_file_beside_the_resolutions_is_no_record(clean):
    resolved = clean.root / "patches-rocm" / "resolved"
    resolved.mkdir()
    (resolved / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    (clean.root / "patches-rocm" / "old.patch").write_text("leftover\n")
    found = [f.code for f in verify(Workspace(str(clean.root))).findings]
    assert {"LAY002", "FIX023", "SER002"} <= set(
        found
    )  # not a git repository: no ignore rules
    _git_repo(clean.root)
    (clean.root / ".gitignore").write_text(".DS_Store\n*.orig\nold.patch\n")
    assert verify(Workspace(str(clean.root))).findings == []


def test_ignored_through_the_users_excludes_file(clean, isolated_git):
    resolved = clean.root / "patches-rocm" / "resolved" / "mlx"
    resolved.mkdir(parents=True)
    (resolved / ".DS_Store").write_bytes(b"\x00")
    _git_repo(clean.root)
    excludes = isolated_git / "excludes"
    excludes.write_text(".DS_Store\n")
    with open(isolated_git / ".gitconfig", "a") as fh:
        fh.write(f"[core]\n\texcludesFile = {excludes}\n")
    assert verify(Workspace(str(clean.root))).findings == []


def test_a_tracked_file_counts_even_where_ignored(clean):
    resolved = clean.root / "patches-rocm" / "resolved"
    resolved.mkdir()
    (resolved / ".DS_Store").write_bytes(b"\x00")
    _git_repo(clean.root)
    (clean.root / ".gitignore").write_text(".DS_Store\n")
    git(clean.root, "add", "-f", "patches-rocm/resolved/.DS_Store")
    assert "LAY002" in [f.code for f in verify(Workspace(str(clean.root))).findings]


def test_scan_record_dir_lists_what_it_left_out(clean):
    from overlay.fs.reading import scan_record_dir

    resolved = clean.root / "patches-rocm" / "resolved" / "mlx"
    resolved.mkdir(parents=True)
    (resolved / "core.cpp").write_text("x\n")
    (resolved / "notes.swp").write_text("x\n")
    _git_repo(clean.root)
    (clean.root / ".gitignore").write_text("*.swp\n")
    left: list[str] = []
    out, errors = scan_record_dir(clean.root, "patches-rocm/resolved", ignored=left)
    assert (list(out), errors, left) == (["mlx/core.cpp"], [], ["mlx/notes.swp"])
    out, _ = scan_record_dir(clean.root, "patches-rocm/resolved", skip_ignored=False)
    assert list(out) == ["mlx/core.cpp", "mlx/notes.swp"]


def test_a_directory_git_ignores_as_a_whole_keeps_its_records(tmp_path):
    from overlay.fs.reading import scan_record_dir

    # An overlay kept under an ignored directory (a copy staged under .overlay/, a
    # checkout under build/): the rules say nothing about single records there.
    git(tmp_path, "init", "-q")
    (tmp_path / ".gitignore").write_text("/build/\n")
    resolved = tmp_path / "build" / "ov" / "patches-rocm" / "resolved" / "mlx"
    resolved.mkdir(parents=True)
    (resolved / "core.cpp").write_text("x\n")
    out, errors = scan_record_dir(tmp_path / "build" / "ov", "patches-rocm/resolved")
    assert (list(out), errors) == (["mlx/core.cpp"], [])
