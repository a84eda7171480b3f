"""A formatting-only patch conflict (overlay/rebase/formatting.py): the stop says the sides differ
only in formatting and offers the clean merge of the clang-formatted sides, which
``--continue --take-formatted`` takes."""

from __future__ import annotations

import shutil

import pytest
from gitfixtures import cli, git
from seriesfixtures import add_patch, work_file, write_fixes

FORMATTED = "int f(int a) {\n  return a + 1;\n}\n\nint g(int b) {\n  return b * 2;\n}\n"
LOOSE = (
    "int f(int a)\n{\n    return a + 1;\n}\n\nint g(int b)\n{\n    return b * 2;\n}\n"
)


def formatting_world(ov, w):
    git(w.upstream.path, "checkout", "-q", "-b", "fmt", w.pin_clean)
    first = w.upstream.commit({"mlx/fmt.cpp": FORMATTED}, "add fmt.cpp, formatted")
    loose = w.upstream.commit({"mlx/fmt.cpp": LOOSE}, "fmt.cpp without the formatting")
    ov.write_manifest(first)
    (ov.root / ".clang-format").write_text(
        "BasedOnStyle: LLVM\nAllowShortFunctionsOnASingleLine: None\n"
    )
    add_patch(
        ov, "0001-fmt.patch", {"mlx/fmt.cpp": FORMATTED.replace("a + 1", "a + 2")}
    )
    write_fixes(ov, [("Fmt.", ["mlx/fmt.cpp"])], pin=first)
    return loose


def test_a_whitespace_only_difference_is_said_without_clang_format(ov, w, monkeypatch):
    loose = formatting_world(ov, w)
    from overlay.rebase import formatting

    monkeypatch.setattr(formatting, "clang_format", lambda: None)  # not installed
    stopped = cli(ov, "rebase", "--onto", loose)
    assert stopped.exit_code == 1, stopped.output
    assert "differs from the patch's pre-image only in whitespace" in stopped.output
    assert "--take-formatted" not in stopped.output
    status = cli(ov, "rebase", "--status").output
    assert "  edit .overlay/rebase/work/mlx/fmt.cpp\n" in status, status  # no offer
    refused = cli(ov, "rebase", "--continue", "--take-formatted")
    assert refused.exit_code == 2 and "offers no formatted merge" in refused.output
    assert cli(ov, "rebase", "--abort").exit_code == 0


@pytest.mark.skipif(
    shutil.which("clang-format") is None, reason="clang-format is not installed"
)
def test_the_formatted_merge_is_offered_and_taken(ov, w):
    loose = formatting_world(ov, w)
    stopped = cli(ov, "rebase", "--onto", loose)
    assert stopped.exit_code == 1, stopped.output
    assert "merged on clang-formatted base, new base and patch it is clean" in (
        stopped.output
    )
    offered = work_file(ov, "mlx/fmt.cpp.formatted").read_text()
    assert offered == FORMATTED.replace("a + 1", "a + 2")
    # --status names the file and the offer too, as the stop did.
    status = cli(ov, "rebase", "--status").output
    assert (
        "  edit .overlay/rebase/work/mlx/fmt.cpp (mlx/fmt.cpp.formatted beside it holds "
        "a clean merge of the clang-formatted sides: `overlay rebase --continue "
        "--take-formatted` takes it)"
    ) in status, status
    done = cli(ov, "rebase", "--continue", "--take-formatted")
    assert done.exit_code == 0, done.output
    assert "patch 0001-fmt.patch: resolved" in done.output
    assert cli(ov, "rebase", "--continue", "--take-formatted").exit_code == 2
