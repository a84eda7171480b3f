"""Exact statistics for concurrency suites: intervals, an exact test, a run plan.

Everything here is plain :mod:`math` (and :mod:`fractions` where an exact
comparison matters); no scipy. The numbers the reports print come from these
three functions:

* :func:`clopper_pearson` -- the exact ("Clopper–Pearson") confidence interval
  for a failure rate after ``k`` failures in ``n`` runs;
* :func:`fisher_exact` -- Fisher's exact test, two-sided, for the A/B table
  "with the fix / without the fix" x "failed / passed";
* :func:`runs_to_acquit` -- how many clean runs acquit a fix against a known
  baseline failure rate (the method of seed 003).
"""

from __future__ import annotations

import math
from fractions import Fraction

from overlay.errors import OverlayError

__all__ = [
    "StatsError",
    "binom_cdf",
    "clopper_pearson",
    "fisher_exact",
    "runs_to_acquit",
]

#: Bisection steps for the interval bounds: 2**-100 is far below float spacing.
_BISECT_STEPS = 100


class StatsError(OverlayError):
    """A statistics argument is out of range (exit 2)."""


def _check_counts(k: int, n: int) -> None:
    if (
        not isinstance(k, int)
        or not isinstance(n, int)
        or isinstance(k, bool)
        or isinstance(n, bool)
    ):
        raise StatsError(f"counts must be integers, got k={k!r}, n={n!r}")
    if n < 0 or k < 0 or k > n:
        raise StatsError(f"need 0 <= k <= n, got k={k}, n={n}")


def binom_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p).

    Formula: ``sum_{i=0..k} C(n, i) p^i (1-p)^(n-i)``. Each term is formed in
    log space, ``exp(lgamma(n+1) - lgamma(i+1) - lgamma(n-i+1) + i log p +
    (n-i) log(1-p))``, so large ``n`` neither overflows nor underflows early.

    Args:
        k: largest count included (int; ``k < 0`` gives 0, ``k >= n`` gives 1).
        n: number of trials (int >= 0).
        p: success probability in [0, 1].

    Returns:
        The probability as a float in [0, 1].

    Raises:
        StatsError: ``n < 0`` or ``p`` outside [0, 1].
    """
    if n < 0:
        raise StatsError(f"n must be >= 0, got {n}")
    if not 0.0 <= p <= 1.0:
        raise StatsError(f"p must be in [0, 1], got {p}")
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if p == 0.0:
        return 1.0
    if p == 1.0:
        return 0.0
    log_p = math.log(p)
    log_q = math.log1p(-p)
    log_n_fact = math.lgamma(n + 1)
    total = 0.0
    for i in range(k + 1):
        log_term = (
            log_n_fact
            - math.lgamma(i + 1)
            - math.lgamma(n - i + 1)
            + i * log_p
            + (n - i) * log_q
        )
        total += math.exp(log_term)
    return min(1.0, total)


def _bisect_decreasing(f, target: float) -> float:
    """The p in [0, 1] where the decreasing function ``f`` crosses ``target``."""
    lo, hi = 0.0, 1.0
    for _ in range(_BISECT_STEPS):
        mid = (lo + hi) / 2.0
        if f(mid) > target:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-15:
            break
    return (lo + hi) / 2.0


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact two-sided confidence interval for a binomial rate (Clopper–Pearson).

    With ``alpha = 1 - confidence``, the bounds are the rates at which the
    observed count is just extreme enough in each tail:

    * lower ``p_L``: ``P(X >= k | n, p_L) = alpha/2`` (``p_L = 0`` when ``k = 0``);
    * upper ``p_U``: ``P(X <= k | n, p_U) = alpha/2`` (``p_U = 1`` when ``k = n``).

    Both are found by bisection on :func:`binom_cdf`, which is monotone
    decreasing in ``p``. They equal the Beta quantiles
    ``Beta(alpha/2; k, n-k+1)`` and ``Beta(1-alpha/2; k+1, n-k)``.
    Source: C. J. Clopper and E. S. Pearson, "The use of confidence or fiducial
    limits illustrated in the case of the binomial", Biometrika 26 (1934)
    404-413. Examples at 95 %: 0 of 10 -> [0, 0.3085] (``1 - 0.025**(1/10)``),
    3 of 10 -> [0.0667, 0.6525].

    Args:
        k: failures observed (int, 0 <= k <= n).
        n: runs (int >= 0); ``n = 0`` gives the uninformative (0.0, 1.0).
        confidence: coverage in (0, 1), default 0.95.

    Returns:
        ``(lower, upper)`` rates as floats in [0, 1].

    Raises:
        StatsError: counts or confidence out of range.
    """
    _check_counts(k, n)
    if not 0.0 < confidence < 1.0:
        raise StatsError(f"confidence must be in (0, 1), got {confidence}")
    if n == 0:
        return (0.0, 1.0)
    half = (1.0 - confidence) / 2.0
    if k == 0:
        lower = 0.0
    else:
        # P(X >= k) = 1 - cdf(k-1) increases with p; 1 - it decreases.
        lower = _bisect_decreasing(lambda p: binom_cdf(k - 1, n, p), 1.0 - half)
    if k == n:
        upper = 1.0
    else:
        upper = _bisect_decreasing(lambda p: binom_cdf(k, n, p), half)
    return (lower, upper)


def fisher_exact(table) -> float:
    """Two-sided p-value of Fisher's exact test for a 2x2 table.

    ``table = [[a, b], [c, d]]`` (rows: with fix / without fix; columns:
    failed / passed in this project's reports). With the margins fixed, the
    top-left count ``x`` is hypergeometric::

        P(x) = C(a+b, x) * C(c+d, (a+c) - x) / C(n, a+c),   n = a+b+c+d

    The two-sided p sums ``P(x)`` over every ``x`` whose probability is no
    larger than the observed table's (the "sum of small p" rule used by R's
    ``fisher.test``; A. Agresti, Categorical Data Analysis, 2nd ed., 3.5.1;
    R. A. Fisher, Statistical Methods for Research Workers, 1934, 21.02).
    The numerators are exact integers from :func:`math.comb`, so the "no
    larger" comparison needs no floating-point tolerance. Example:
    ``[[0, 10], [7, 3]]`` -> ``240/77520 = 0.003096``.

    Args:
        table: 2x2 nested sequence of non-negative ints.

    Returns:
        The p-value, a float in (0, 1]; 1.0 when a margin is zero.

    Raises:
        StatsError: not a 2x2 table of non-negative integers.
    """
    try:
        (a, b), (c, d) = table
    except (TypeError, ValueError):
        raise StatsError(f"Fisher's test needs a 2x2 table, got {table!r}") from None
    for v in (a, b, c, d):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise StatsError(
                f"Fisher's test needs non-negative integer counts, got {table!r}"
            )
    row1, row2, col1 = a + b, c + d, a + c
    n = row1 + row2
    lo, hi = max(0, col1 - row2), min(row1, col1)
    if lo == hi:
        return 1.0
    numerators = {
        x: math.comb(row1, x) * math.comb(row2, col1 - x) for x in range(lo, hi + 1)
    }
    observed = numerators[a]
    tail = sum(v for v in numerators.values() if v <= observed)
    return min(1.0, float(Fraction(tail, math.comb(n, col1))))


def _exact(x: float | Fraction, name: str) -> Fraction:
    """``x`` as an exact fraction of its decimal spelling (0.7 -> 7/10)."""
    try:
        return Fraction(str(x)) if isinstance(x, float) else Fraction(x)
    except (TypeError, ValueError):
        raise StatsError(f"{name} must be a number, got {x!r}") from None


def runs_to_acquit(baseline: float, confidence: float = 0.99) -> int:
    """Smallest number of clean runs that acquits a fix against a baseline rate.

    If the unfixed code fails a run with probability ``baseline``, ``n``
    clean runs in a row happen by chance with probability
    ``(1 - baseline)**n``. The fix is acquitted at ``confidence`` once that
    chance is at most ``1 - confidence``::

        n = min { n >= 1 : (1 - baseline)**n <= 1 - confidence }
          = ceil( log(1 - confidence) / log(1 - baseline) )

    The comparison is done on exact fractions of the decimal inputs, so
    boundary cases are not lost to rounding (0.9 at 0.99 gives 2, since
    ``0.1**2 == 0.01`` exactly). Source: seed 003, "A crash in three out of
    nine runs": at about 70 % incidence, a single survival gives only 70 %
    confidence and acquittal needs four repetitions (``0.3**4 = 0.0081 <=
    0.01``, ``0.3**3 = 0.027``).

    Args:
        baseline: failure rate per run without the fix, in (0, 1].
        confidence: wanted confidence, in (0, 1); default 0.99.

    Returns:
        The number of runs, an int >= 1.

    Raises:
        StatsError: ``baseline`` not in (0, 1] or ``confidence`` not in (0, 1).
    """
    b = _exact(baseline, "baseline")
    c = _exact(confidence, "confidence")
    if not 0 < b <= 1:
        raise StatsError(f"baseline must be in (0, 1], got {baseline}")
    if not 0 < c < 1:
        raise StatsError(f"confidence must be in (0, 1), got {confidence}")
    survive = 1 - b
    limit = 1 - c
    if survive == 0:
        return 1
    estimate = math.log(float(limit)) / math.log(float(survive))
    n = max(1, math.ceil(estimate) - 1)
    # Step back while the smaller n still suffices, then forward until it does.
    while n > 1 and survive ** (n - 1) <= limit:
        n -= 1
    while survive**n > limit:
        n += 1
    return n


def runs_to_significance(
    with_rate: float, without_rate: float, alpha: float = 0.05, limit: int = 100_000
) -> int | None:
    """Runs per column at which two observed failure rates differ at Fisher p < ``alpha``.

    The table of ``n`` runs per column is the rates' expected counts, rounded:
    ``[[round(with_rate*n), ...], [round(without_rate*n), ...]]``. For ``n`` up to
    200 the scan is exhaustive (the smallest such ``n``); above, ``n`` doubles to
    an upper bound and bisects (p falls with ``n`` but for the rounding). Example:
    0/3 against 3/3 (p = 0.1) needs 4 per column (``[[0, 4], [4, 0]]``, p = 0.0286).

    Returns:
        ``n``, or None when the rates are equal or ``n`` would pass ``limit``.
    """

    def p_at(n: int) -> float:
        a, c = round(with_rate * n), round(without_rate * n)
        return fisher_exact([[a, n - a], [c, n - c]])

    if with_rate == without_rate:
        return None
    for n in range(1, 201):
        if p_at(n) < alpha:
            return n
    lo, hi = 200, 400
    while p_at(hi) >= alpha:
        if hi >= limit:
            return None
        lo, hi = hi, min(limit, hi * 2)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if p_at(mid) < alpha else (mid, hi)
    return hi
