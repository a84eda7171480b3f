"""``overlay suite mutate``: the mutation check of the fixes (docs/race-lab.md).

The command parses its options, calls :func:`overlay.suites.racelab.mutate.run_check`
and prints the table; the ``suite`` group adds it (``overlay/cli/suites.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from overlay.cli.options import output_option
from overlay.cli.tools import exit_with, handle_errors
from overlay.errors import EXIT_FINDINGS, EXIT_OK
from overlay.suites.config import load_suites
from overlay.suites.racelab.mutate import run_check

if TYPE_CHECKING:
    from overlay.workspace import Workspace

__all__ = ["mutate_cmd"]


@click.command("mutate")
@click.option(
    "--runs",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Runs per suite, for each mutant and the baseline.",
)
@click.option(
    "--need",
    type=click.IntRange(min=1),
    default=None,
    help="Failed runs of some suite that make a part caught (default: runs - runs // 20).",
)
@click.option(
    "--fix",
    "fixes",
    type=int,
    multiple=True,
    help="Only this fix's mutants (repeatable).",
)
@click.option(
    "--mutant",
    "only",
    multiple=True,
    metavar="ID",
    help="Only this mutant (repeatable).",
)
@click.option(
    "--suite",
    "suite_names",
    multiple=True,
    metavar="NAME",
    help="Only this of the covering suites (repeatable; default: every one).",
)
@click.option(
    "--parallel",
    "-P",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Suites run at once.",
)
@click.option(
    "--results",
    "results_dir",
    default=None,
    metavar="DIR",
    help="Results root (default build/suite-results/mutants).",
)
@output_option()
@click.pass_obj
@handle_errors
def mutate_cmd(
    ws: Workspace,
    runs: int,
    need: int | None,
    fixes: tuple[int, ...],
    only: tuple[str, ...],
    suite_names: tuple[str, ...],
    parallel: int,
    results_dir: str | None,
    output: str | None,
) -> None:
    """The mutation check of the fixes on the race lab (docs/race-lab.md).

    Each part of a fix named in patches-rocm/suites/mutants.toml is reverted in a
    scratch copy of the patched layer, and every race-lab suite proving that fix
    runs --runs times against it; the unmutated layer is the baseline. Prints the
    Markdown table. Exit 0 when the baseline is clean and every mutant is caught,
    1 otherwise, 2 without the toolchain. A host model, never a GPU result.
    """

    def say(line: str) -> None:
        click.echo(f"race lab: {line}", err=True)

    result = run_check(
        ws,
        load_suites(ws.suites_path, ws.base),
        runs=runs,
        need=need if need is not None else runs - runs // 20,
        fixes=fixes,
        only=only,
        suite_names=suite_names,
        parallel=parallel,
        results_dir=results_dir,
        progress=say,
    )
    text = result.markdown()
    click.echo(text, nl=False)
    if output:
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(text)
    exit_with(EXIT_FINDINGS if result.missed or result.baseline_failed else EXIT_OK)
