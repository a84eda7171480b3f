"""LOCAL_FIXES.md against the series and the trees
(overlay/records/fixes/cross_checks.py): FIX017..FIX025, the names an entry may use
(relative to mlx/, outside the tree by policy) and the trailer reader (the document
fixture and helpers come from test_records_fixes)."""

from __future__ import annotations

import pytest
from test_records_fixes import TREE, S, codes, doc

from overlay.records import fixes
from overlay.records.fixes import PatchRecord

# --------------------------------------------------------------------------- cross-checks

P1 = "patches-rocm/0001-gemm.patch"
P1_TEXT = "Subject: [PATCH] x\n\nWhy.\n\nLocal-Fix: 2\nForwarded: not-needed\n---\ndiff --git a/x b/x\n"


def rec(
    n=2,
    files=("mlx/backend/rocm/gemms/hipblaslt_gemm.cpp", "mlx/backend/rocm/device.cpp"),
    deleted=(),
    forwarded="not-needed",
    path=P1,
    text=None,
):
    return PatchRecord(path, n, forwarded, frozenset(files), frozenset(deleted), text)


def good_patches():
    return [
        rec(),
        (
            "patches-rocm/0002-cmake.patch",
            "3",
            "not-needed",
            {"mlx/backend/rocm/CMakeLists.txt"},
            set(),
        ),
        rec(4, ["mlx/backend/rocm/pinned.cu"], path="patches-rocm/0003-pinned.patch"),
    ]


def test_patch_entries_clean():
    assert fixes.check_patch_entries(doc(), good_patches(), TREE) == []


def test_fix017_fix018_missing_trailers():
    fs = fixes.check_patch_entries(
        doc(), [rec(n=None, forwarded=None)] + good_patches()[1:], TREE
    )
    assert [(f.code, f.path, f.line) for f in fs] == [
        ("FIX018", P1, 1),
        ("FIX017", P1, 1),
        ("FIX024", "LOCAL_FIXES.md", 10),
    ]
    # with the text, they point at the trailer block's end (the '---' line)
    fs = fixes.check_patch_entries(
        doc(), [rec(n=None, forwarded="", text="Subject: x\n\nWhy.\n---\n")], TREE
    )
    assert [(f.code, f.line) for f in fs if f.path == P1] == [
        ("FIX018", 4),
        ("FIX017", 4),
    ]
    fs = fixes.check_patch_entries(doc(), [rec(n="two", text=P1_TEXT)], TREE)
    assert [(f.code, f.line) for f in fs if f.path == P1] == [("FIX017", 5)]


def test_fix019_local_fix_not_an_entry():
    fs = fixes.check_patch_entries(doc(), [rec(n=9, text=P1_TEXT)], TREE)
    assert [(f.code, f.path, f.line) for f in fs if f.code == "FIX019"] == [
        ("FIX019", P1, 5)
    ]


def test_fix020_entry_does_not_name_touched_file():
    files = (
        "mlx/backend/rocm/gemms/hipblaslt_gemm.cpp",
        "mlx/backend/rocm/device.cpp",
        "mlx/array.cpp",
    )
    fs = fixes.check_patch_entries(doc(), [rec(files=files)] + good_patches()[1:], TREE)
    assert codes(fs) == [("FIX020", 10)]
    assert "mlx/array.cpp" in fs[0].message


def test_fix020_bare_name_counts_only_when_unambiguous():
    # `array.cpp` matches mlx/array.cpp and mlx/backend/cpu/array.cpp: ambiguous
    d = doc(
        l11="   `gemms/hipblaslt_gemm.cpp` and `device.cpp` and `array.cpp`. Applies to the fork; kept in"
    )
    files = (
        "mlx/backend/rocm/gemms/hipblaslt_gemm.cpp",
        "mlx/backend/rocm/device.cpp",
        "mlx/array.cpp",
    )
    fs = fixes.check_patch_entries(d, [rec(files=files)] + good_patches()[1:], TREE)
    assert codes(fs) == [("FIX020", 10)] and "ambiguous" in fs[0].message
    # `device.cpp` is unambiguous (device.h is another name): passes in the clean case above
    # a backend-relative name needs its directory: `hipblaslt_gemm.cpp` is fine only as bare-unique
    tree = TREE | {"mlx/backend/cuda/gemms/hipblaslt_gemm.cpp"}
    d = doc(
        l11="   `hipblaslt_gemm.cpp` and `device.cpp`. Applies to the fork; kept in"
    )
    fs = fixes.check_patch_entries(d, good_patches(), tree)
    assert codes(fs) == [("FIX020", 10)]


def test_fix021_named_file_does_not_exist():
    d = doc(
        l11="   `gemms/hipblaslt_gemm.cpp`, `device.cpp`, `gemms/gone.cpp`. Applies to the fork; kept in"
    )
    fs = fixes.check_patch_entries(d, good_patches(), TREE)
    assert codes(fs) == [("FIX021", 11)] and "gemms/gone.cpp" in fs[0].message


def test_fix021_deleted_by_own_patch_or_repo_path_is_fine():
    d = doc(
        l11="   `gemms/hipblaslt_gemm.cpp`, `device.cpp`, `gemms/gone.cpp`. Applies to the fork; kept in"
    )
    files = (
        "mlx/backend/rocm/gemms/hipblaslt_gemm.cpp",
        "mlx/backend/rocm/device.cpp",
        "mlx/backend/rocm/gemms/gone.cpp",
    )
    patches = [
        rec(files=files, deleted=["mlx/backend/rocm/gemms/gone.cpp"])
    ] + good_patches()[1:]
    assert fixes.check_patch_entries(d, patches, TREE) == []
    # deleted by another entry's patch does not count for this entry
    patches = (
        [rec()]
        + good_patches()[1:]
        + [
            rec(
                3,
                ["mlx/backend/rocm/gemms/gone.cpp"],
                deleted=["mlx/backend/rocm/gemms/gone.cpp"],
                path="patches-rocm/0004-x.patch",
            )
        ]
    )
    assert ("FIX021", 11) in codes(fixes.check_patch_entries(d, patches, TREE))
    d = doc(
        l6="   against the pin, see `patches-rocm/resolved/mlx/backend/rocm/device.cpp`."
    )
    assert (
        fixes.check_patch_entries(
            d,
            good_patches(),
            TREE,
            repo_paths={"patches-rocm/resolved/mlx/backend/rocm/device.cpp"},
        )
        == []
    )
    assert codes(fixes.check_patch_entries(d, good_patches(), TREE)) == [("FIX021", 6)]


def test_fix024_policy_entry_without_patch_is_a_warning():
    fs = fixes.check_patch_entries(doc(), good_patches()[:2], TREE)
    assert [(f.code, f.severity, f.line) for f in fs] == [("FIX024", "warning", 20)]


NOT_CARRIED = ["docs/notes/a.md", "docs/notes/logs/b.log", "setup.py"]


def test_fix022_dropped_lists_every_uncarried_path():
    assert fixes.check_dropped(doc(), NOT_CARRIED) == []
    fs = fixes.check_dropped(doc(), NOT_CARRIED + ["python/src/rocm.cpp"])
    assert codes(fs) == [("FIX022", 22)] and "python/src/rocm.cpp" in fs[0].message
    # a directory name without its trailing slash is not a prefix
    fs = fixes.check_dropped(doc(l24="- `docs/notes`, `setup.py`: no."), NOT_CARRIED)
    assert [c for c, _ in codes(fs)] == ["FIX022", "FIX022", "FIX025"]
    # no Dropped section at all: line 1
    d = doc(l22=None, l23=None, l24=None)
    assert codes(fixes.check_dropped(d, ["setup.py"])) == [("FIX022", 1)]


def test_fix025_stale_dropped_name():
    fs = fixes.check_dropped(doc(), ["docs/notes/a.md"])
    assert [(f.code, f.severity, f.line) for f in fs] == [("FIX025", "warning", 24)]


def test_fix023_resolution_named_by_retarget_entry():
    assert (
        fixes.check_resolutions(
            doc(), ["patches-rocm/resolved/mlx/backend/rocm/device.cpp"]
        )
        == []
    )
    fs = fixes.check_resolutions(
        doc(),
        [
            "patches-rocm/resolved/mlx/backend/rocm/device.cpp",
            "patches-rocm/resolved/mlx/backend/rocm/pinned.cu",
        ],
    )
    assert codes(fs) == [("FIX023", 3)] and "pinned.cu" in fs[0].message
    # named only outside the retarget section does not count
    d = doc(
        l5="1. **Take the fork's device.** Resolution of the device file",
    )
    assert codes(fixes.check_resolutions(d, ["mlx/backend/rocm/device.cpp"])) == [
        ("FIX023", 3)
    ]
    # no retarget section: line 1
    d = doc(l3=None, l4=None, l5=None, l6=None, l7=None)
    assert codes(fixes.check_resolutions(d, ["mlx/backend/rocm/device.cpp"])) == [
        ("FIX023", 1)
    ]


def test_patch_trailers():
    tr = fixes.patch_trailers(P1_TEXT)
    assert (
        tr["Local-Fix"] == ("2", 5)
        and tr["Forwarded"] == ("not-needed", 6)
        and tr["---"] == ("", 7)
    )


FIX021_TREE = {
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
    found = fixes.check_patch_entries(d, [], FIX021_TREE, outside_tree=outside_tree)
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
    assert fixes.check_patch_entries(d, [rec], FIX021_TREE) == []


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
    assert [f.code for f in fixes.check_patch_entries(d, [both], FIX021_TREE)] == [
        "FIX024"
    ]  # entry 3 only
    wrong = both._replace(local_fix=("1", "3"))
    found = fixes.check_patch_entries(d, [wrong], FIX021_TREE)
    assert sorted(f.code for f in found) == [
        "FIX020",
        "FIX024",
    ]  # 3 does not name device.cpp; 2 has none
    assert [
        f.code
        for f in fixes.check_patch_entries(
            d, [both._replace(local_fix=())], FIX021_TREE
        )
    ][0] == "FIX017"
