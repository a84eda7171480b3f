"""Statistics of the concurrency suites, against values computed independently.

Reference values were cross-checked with scipy (``scipy.stats.beta.ppf`` for
the Clopper–Pearson bounds, ``scipy.stats.fisher_exact``), and the small ones by
hand: the upper bound for 0 of 10 is ``1 - 0.025**(1/10)``, and Fisher's p for
[[0, 10], [7, 3]] is ``(C(10,7) + C(10,7)) / C(20,7) = 240 / 77520``.
"""

import math

import pytest

from overlay.errors import EXIT_USAGE, OverlayError
from overlay.suites.stats import (
    binom_cdf,
    clopper_pearson,
    fisher_exact,
    runs_to_acquit,
)


@pytest.mark.parametrize(
    "k,n,lo,hi",
    [
        (0, 10, 0.0, 0.308497),
        (3, 10, 0.066740, 0.652453),
        (7, 10, 0.347547, 0.933260),
        (10, 10, 0.691503, 1.0),
        (0, 20, 0.0, 0.168433),
        (5, 70, 0.023598, 0.158872),
        (4, 30, 0.037553, 0.307218),
    ],
)
def test_clopper_pearson_matches_reference(k, n, lo, hi):
    got = clopper_pearson(k, n)
    assert got[0] == pytest.approx(lo, abs=2e-6)
    assert got[1] == pytest.approx(hi, abs=2e-6)


def test_clopper_pearson_closed_forms():
    # k = 0: upper bound solves (1-p)^n = alpha/2; k = n mirrors it.
    assert clopper_pearson(0, 10)[1] == pytest.approx(1 - 0.025 ** (1 / 10), abs=1e-12)
    assert clopper_pearson(10, 10)[0] == pytest.approx(0.025 ** (1 / 10), abs=1e-12)
    # Symmetry: the interval of k of n mirrors the interval of n-k of n.
    lo, hi = clopper_pearson(3, 10)
    lo2, hi2 = clopper_pearson(7, 10)
    assert lo == pytest.approx(1 - hi2, abs=1e-12) and hi == pytest.approx(
        1 - lo2, abs=1e-12
    )
    # Other confidence levels widen/narrow as they should.
    assert clopper_pearson(3, 10, 0.99)[1] > clopper_pearson(3, 10)[1]
    assert clopper_pearson(0, 0) == (0.0, 1.0)


def test_binom_cdf_small_cases():
    assert binom_cdf(0, 10, 0.3) == pytest.approx(0.7**10)
    assert binom_cdf(1, 2, 0.5) == pytest.approx(0.75)
    want = sum(math.comb(10, i) * 0.3**i * 0.7 ** (10 - i) for i in range(4))
    assert binom_cdf(3, 10, 0.3) == pytest.approx(want, rel=1e-12)
    assert binom_cdf(-1, 5, 0.5) == 0.0 and binom_cdf(5, 5, 0.5) == 1.0
    # Large n neither overflows nor loses the tail.
    assert binom_cdf(5000, 10000, 0.5) == pytest.approx(0.503989, abs=1e-5)


@pytest.mark.parametrize(
    "table,p",
    [
        ([[0, 10], [7, 3]], 240 / 77520),  # 0.003096
        ([[0, 20], [4, 16]], 0.106029),
        ([[3, 7], [7, 3]], 0.178895),
        ([[0, 110], [4, 26]], 0.00178772),  # seed 001: 0 bad of 110 vs 4 of 30
        ([[5, 5], [5, 5]], 1.0),
        ([[0, 10], [0, 10]], 1.0),  # a zero margin: nothing to test
    ],
)
def test_fisher_exact_two_sided(table, p):
    assert fisher_exact(table) == pytest.approx(p, rel=1e-5)


def test_fisher_exact_value_from_the_brief():
    assert round(fisher_exact([[0, 10], [7, 3]]), 6) == 0.003096
    # Swapping rows or columns does not change a two-sided p.
    assert fisher_exact([[7, 3], [0, 10]]) == fisher_exact([[0, 10], [7, 3]])
    assert fisher_exact([[10, 0], [3, 7]]) == fisher_exact([[0, 10], [7, 3]])


@pytest.mark.parametrize(
    "baseline,confidence,n",
    [
        (0.7, 0.99, 4),  # seed 003: 0.3**4 = 0.0081 <= 0.01 < 0.3**3 = 0.027
        (0.9, 0.99, 2),  # exact boundary: 0.1**2 == 0.01
        (0.5, 0.99, 7),  # 0.5**7 = 0.0078 <= 0.01 < 0.5**6 = 0.0156
        (0.01, 0.95, 299),
        (1.0, 0.99, 1),
        (0.7, 0.5, 1),
    ],
)
def test_runs_to_acquit(baseline, confidence, n):
    assert runs_to_acquit(baseline, confidence) == n
    assert (1 - baseline) ** n <= 1 - confidence + 1e-12
    if n > 1:
        assert (1 - baseline) ** (n - 1) > 1 - confidence


@pytest.mark.parametrize(
    "call",
    [
        lambda: runs_to_acquit(0.0, 0.99),
        lambda: runs_to_acquit(1.5, 0.99),
        lambda: runs_to_acquit(0.5, 1.0),
        lambda: clopper_pearson(11, 10),
        lambda: clopper_pearson(1, 10, 1.5),
        lambda: fisher_exact([[1, 2, 3], [4, 5, 6]]),
        lambda: fisher_exact([[-1, 2], [3, 4]]),
    ],
)
def test_bad_arguments_are_usage_errors(call):
    with pytest.raises(OverlayError) as info:
        call()
    assert info.value.exit_code == EXIT_USAGE


def test_runs_to_significance():
    from overlay.suites.stats import runs_to_significance

    # [[0, 3], [3, 0]] has p = 0.1; [[0, 4], [4, 0]] p = 0.0286.
    assert runs_to_significance(0.0, 1.0) == 4
    assert runs_to_significance(0.0, 0.7) == 5  # [[0, 5], [4, 1]]: p = 0.0476
    assert runs_to_significance(0.3, 0.3) is None
