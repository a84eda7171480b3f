"""The finding codes hold together: what ``CODES`` declares (``overlay/checks/codes.py``
for MAN, SER and LAY, ``overlay/records/fixes/model.py`` for FIX), what the checks emit, what
``docs/findings.md`` documents, what the tests exercise, and the retired codes that are
never declared again (docs/findings.md, "Adding a code")."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from overlay.checks import codes as check_codes
from overlay.records import fixes

ROOT = Path(__file__).resolve().parents[1]
FINDINGS_MD = ROOT / "docs" / "findings.md"
#: Any ``<FAMILY><NNN>``, of a family declared or not (BLD, SUI, a typo).
CODE = re.compile(r"[A-Z]{3}\d{3}")
#: A table row of docs/findings.md: ``| CODE | second column |``.
ROW = re.compile(r"\| ([A-Z]{3}\d{3}) \| ([^|]*?) \|")
#: The module-level names that declare codes rather than emit them.
DECLARATIONS = {"CODES", "RETIRED"}


def declared() -> dict[str, str]:
    """Every declared code -> its severity, all families."""
    return {
        code: severity
        for code, (severity, _) in [*check_codes.CODES.items(), *fixes.CODES.items()]
    }


def retired() -> set[str]:
    return set(check_codes.RETIRED) | set(fixes.RETIRED)


def doc_rows() -> list[tuple[str, str, str]]:
    """``(section, code, second column)`` of each code row of docs/findings.md's tables;
    ``section`` is the ``##`` heading's first word (``MAN``, ..., ``Retired``), or ``""``
    before the first heading."""
    rows = []
    section = ""
    for line in FINDINGS_MD.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            section = line[3:].split()[0].rstrip(":")
        elif m := ROW.match(line):
            rows.append((section, m.group(1), m.group(2).strip()))
    return rows


def test_docs_tables_document_exactly_the_declared_codes_with_their_severity():
    documented: dict[str, str] = {}
    for section, code, severity in doc_rows():
        if section == "Retired":
            continue
        assert code[:3] == section, f"{code}'s row is under the {section!r} section"
        assert code not in documented, f"{code} has two rows"
        documented[code] = severity
    want = declared()
    assert sorted(set(documented) - set(want)) == [], "documented but not declared"
    assert sorted(set(want) - set(documented)) == [], "declared but not documented"
    wrong = {c: (documented[c], s) for c, s in want.items() if documented[c] != s}
    assert wrong == {}, "code: (severity in docs, declared severity)"


def _literals(path: Path) -> set[str]:
    """String constants of ``path`` that are a code, less the ``CODES`` and ``RETIRED``
    declarations themselves."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id in DECLARATIONS for t in targets):
            continue
        found |= {
            n.value
            for n in ast.walk(node)
            if isinstance(n, ast.Constant)
            and isinstance(n.value, str)
            and CODE.fullmatch(n.value)
        }
    return found


def test_every_code_emitted_by_a_literal_is_declared_and_every_declared_code_is_emitted():
    """The checks emit a code as a literal (``_f("SER004", ...)``,
    ``finding(doc, "FIX013", ...)``): any string constant in overlay/ that is a code must
    be declared, or the check raises KeyError (or reports an undocumented code) only
    when a run happens to reach it; a declared code no source names is dead."""
    emitted: dict[str, list[str]] = {}
    for path in sorted((ROOT / "overlay").rglob("*.py")):
        for code in _literals(path):
            emitted.setdefault(code, []).append(str(path.relative_to(ROOT)))
    undeclared = {c: where for c, where in emitted.items() if c not in declared()}
    assert undeclared == {}, "emitted but not declared"
    assert sorted(set(declared()) - set(emitted)) == [], "declared but never emitted"


def test_retired_codes_are_never_declared_again():
    spent = retired()
    assert all(CODE.fullmatch(c) and c[:3] in check_codes.FAMILIES for c in spent)
    assert sorted(spent & set(declared())) == [], "a retired code is declared again"
    reused = [(s, c) for s, c, _ in doc_rows() if c in spent and s != "Retired"]
    assert reused == [], "a retired code has a row in a family's table"
    listed = [c for s, c, _ in doc_rows() if s == "Retired"]
    assert sorted(listed) == sorted(spent), "docs' retired codes differ from RETIRED"
    # A gap in a family's numbering is a code that was released and removed: it must
    # be listed as retired, or a newcomer would take it for a free number.
    for family in check_codes.FAMILIES:
        numbers = {int(c[3:]) for c in [*declared(), *spent] if c[:3] == family}
        gaps = sorted(
            f"{family}{n:03d}" for n in range(1, max(numbers) + 1) if n not in numbers
        )
        assert gaps == [], f"neither declared nor retired: {gaps}"


def _asserted_codes(path: Path) -> set[str]:
    """The codes a test module checks: in a string constant inside an ``assert``, a
    comparison (``f["code"] == "SER016"``) or a decorator (``parametrize``) of a
    ``test_*`` function. A code named only in a docstring, a comment or an unused
    variable does not count."""
    found: set[str] = set()
    for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(fn, ast.FunctionDef) or not fn.name.startswith("test_"):
            continue
        checked = [n for n in ast.walk(fn) if isinstance(n, (ast.Assert, ast.Compare))]
        for node in [*checked, *fn.decorator_list]:
            for n in ast.walk(node):
                if isinstance(n, ast.Constant) and isinstance(n.value, str):
                    found |= set(CODE.findall(n.value))
    return found


def test_every_declared_code_is_exercised_by_a_test():
    """A code no test checks is a check nobody has seen fire: each declared code of every
    family must be asserted on (or compared with, or parametrized) by a test function of
    some test module other than this one."""
    seen: set[str] = set()
    for module in (ROOT / "tests").glob("test_*.py"):
        if module.name != Path(__file__).name:
            seen |= _asserted_codes(module)
    missing = sorted(set(declared()) - seen)
    assert missing == [], "declared but checked by no test"
