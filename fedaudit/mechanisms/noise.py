"""Exact, vectorised samplers for discrete noise (no floating point on the privacy path).

Canonne, Kamath, Steinke, "The Discrete Gaussian for Differential Privacy", NeurIPS 2020
(arXiv:2004.00010, "CKS20"), Algorithms 1-3, implemented with integer arithmetic only:
every coin is ``rng.integers(0, m) < a``, an exact Bernoulli(a/m) (numpy's bounded integers are
exactly uniform given uniform bits).

* :func:`bernoulli_exp` -- Bernoulli(exp(-gamma)) for rational ``gamma = num/den >= 0`` (Alg. 1).
  For ``gamma <= 1`` the series method: draw ``A_k ~ Bernoulli(gamma/k)`` for k = 1, 2, ... until
  the first failure at ``K``; then ``P[K odd] = sum_k (-gamma)^k / k! = exp(-gamma)``.
  For ``gamma > 1``: ``floor(gamma)`` independent Bernoulli(exp(-1)) coins AND one
  Bernoulli(exp(-(gamma - floor(gamma)))).
* :func:`discrete_laplace` -- ``P[Z = z] = tanh(1/(2t)) exp(-|z|/t)`` on the integers for the
  rational scale ``t = num/den`` (Alg. 2).
* :func:`discrete_gaussian` -- ``P[Z = z] = exp(-z^2/(2 sigma^2)) / sum_k exp(-k^2/(2 sigma^2))``
  for rational ``sigma^2`` (Alg. 3: discrete Laplace proposal of integer scale ``t``, default
  ``floor(sigma) + 1``, accepted with probability ``exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2))``).

Everything is vectorised over *rounds* (masks of still-active entries), never a Python loop per
sample; ``size`` is processed in chunks (default 2^20) so live memory stays bounded. Entries
whose integers would overflow int64 (far-tail discrete-Gaussian proposals) are finished with
exact Python-int arithmetic, so the samplers are exact for every input they accept.
"""

from __future__ import annotations

import math
from fractions import Fraction
from numbers import Integral, Real
from typing import Any

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.validation import check_int
from fedaudit.rng import RngLike, as_generator

__all__ = [
    "bernoulli_exp",
    "discrete_laplace",
    "discrete_gaussian",
    "discrete_laplace_logpmf",
    "discrete_gaussian_logpmf",
    "discrete_gaussian_log_normalizer",
    "rational_at_least",
    "DEFAULT_CHUNK",
]

#: samples generated per chunk (bounded live memory: a few arrays of this many int64)
DEFAULT_CHUNK = 1 << 20
#: bound under which products of int64 operands are computed in int64
_SAFE = 1 << 62
#: largest scale numerator accepted by :func:`discrete_laplace` (U + num*V stays in int64)
_MAX_LAPLACE_NUM = 1 << 56


# --------------------------------------------------------------------------- rationals
def rational_at_least(x: Any, max_den: int = 1 << 20) -> tuple[int, int]:
    """The smallest fraction ``num/den >= x`` with ``1 <= den <= max_den`` (``x > 0`` real).

    ``x`` is taken exactly (a float is its exact binary value, a ``Fraction`` as is), so the
    result never under-states ``x``: used for noise scales it adds (at most ``1/den``) noise,
    never removes it. The two Stern-Brocot neighbours of ``x`` with denominators ``<= max_den``
    are a convergent and a semiconvergent of its continued fraction; the upper one is returned.
    """
    max_den = check_int("max_den", max_den, low=1)
    if isinstance(x, bool) or not isinstance(x, (Real, Fraction)):
        raise FedAuditError(f"x must be a positive finite real number, got x={x!r}")
    if isinstance(x, float) and not math.isfinite(x):
        raise FedAuditError(f"x must be a positive finite real number, got x={x!r}")
    fx = Fraction(x)
    if fx <= 0:
        raise FedAuditError(f"x must be a positive finite real number, got x={x!r}")
    if fx.denominator <= max_den:
        return fx.numerator, fx.denominator
    # continued-fraction convergents p/q of fx until the next denominator exceeds max_den
    p0, q0, p1, q1 = 0, 1, 1, 0
    n, d = fx.numerator, fx.denominator
    while True:
        a = n // d
        q2 = q0 + a * q1
        if q2 > max_den:
            break
        p0, q0, p1, q1 = p1, q1, p0 + a * p1, q2
        n, d = d, n - a * d
    k = (max_den - q0) // q1
    semi = Fraction(p0 + k * p1, q0 + k * q1)
    conv = Fraction(p1, q1)
    best = conv if conv >= fx else semi   # Farey neighbours bracketing fx
    assert best >= fx
    return best.numerator, best.denominator


# ------------------------------------------------------------------ exact coins (scalar)
def _uniform_below(n: int, rng: np.random.Generator) -> int:
    """Exactly uniform integer in [0, n) for a Python int n >= 1 of any size."""
    if n <= _SAFE:
        return int(rng.integers(0, n))
    bits = (n - 1).bit_length()
    words = -(-bits // 62)
    while True:
        u = 0
        for w in rng.integers(0, 1 << 62, size=words):
            u = (u << 62) | int(w)
        u &= (1 << bits) - 1
        if u < n:
            return u


def _bexp_frac_scalar(r: int, den: int, rng: np.random.Generator) -> bool:
    """Bernoulli(exp(-r/den)) for Python ints 0 <= r <= den: the series method (CKS20 Alg. 1)."""
    k = 1
    while _uniform_below(den * k, rng) < r:  # A_k ~ Bernoulli(r/(den k))
        k += 1
    return k % 2 == 1


def _bexp_scalar(num: int, den: int, rng: np.random.Generator) -> bool:
    """Bernoulli(exp(-num/den)) with Python ints (CKS20 Alg. 1); used for rare overflow cases."""
    q, r = divmod(int(num), int(den))
    for _ in range(q):  # stops at the first failed exp(-1) coin: E[#iterations] <= 1/(1-e^-1)
        if not _bexp_frac_scalar(1, 1, rng):
            return False
    return r == 0 or _bexp_frac_scalar(r, int(den), rng)


# --------------------------------------------------------------- exact coins (vectorised)
def _bexp_one(m: int, rng: np.random.Generator) -> np.ndarray:
    """m independent Bernoulli(exp(-1)): series method with gamma = 1 (A_1 = 1 always)."""
    hit = rng.integers(0, 2, size=m) == 0          # A_2 ~ Bernoulli(1/2)
    res = np.zeros(m, dtype=bool)                  # stopping at K = 2 (even) -> 0
    idx = np.flatnonzero(hit)
    k = 3
    while idx.size:
        hit = rng.integers(0, k, size=idx.size) == 0
        if k & 1:
            res[idx[~hit]] = True
        idx = idx[hit]
        k += 1
    return res


def _bexp_int(q: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """AND of q[i] independent Bernoulli(exp(-1)) coins, i.e. Bernoulli(exp(-q[i])) for int q >= 0."""
    out = np.ones(q.size, dtype=bool)
    idx = np.flatnonzero(q > 0)
    rem = q[idx]
    while idx.size:
        ok = _bexp_one(idx.size, rng)
        out[idx[~ok]] = False
        idx, rem = idx[ok], rem[ok] - 1
        more = rem > 0
        idx, rem = idx[more], rem[more]
    return out


def _bexp_frac(num: np.ndarray, den: np.ndarray | int, rng: np.random.Generator) -> np.ndarray:
    """Bernoulli(exp(-num/den)) for 0 <= num <= den (series method, vectorised over rounds).

    ``den`` is an int64 array aligned with ``num`` or a Python int. Round k draws
    ``A_k ~ Bernoulli(num/(den k))`` as ``integers(0, den k) < num``, or, when ``den k`` could
    overflow, as ``Bernoulli(num/den) AND Bernoulli(1/k)`` (independent, same law).
    """
    m = num.size
    res = np.empty(m, dtype=bool)
    scalar_den = not isinstance(den, np.ndarray)
    idx = np.arange(m)
    a, d = num, den
    k = 1
    while idx.size:
        dmax = d if scalar_den else (int(d.max()) if d.size else 1)
        if dmax <= _SAFE // k:
            high = d * k
            hit = (rng.integers(0, high, size=idx.size) if scalar_den else rng.integers(0, high)) < a
        else:
            u = rng.integers(0, d, size=idx.size) if scalar_den else rng.integers(0, d)
            hit = (u < a) & (rng.integers(0, k, size=idx.size) == 0)
        res[idx[~hit]] = bool(k & 1)
        idx = idx[hit]
        a = a[hit]
        if not scalar_den:
            d = d[hit]
        k += 1
    return res


def _bexp_vec(num: np.ndarray, den: np.ndarray | int, rng: np.random.Generator) -> np.ndarray:
    """Bernoulli(exp(-num/den)) for int64 ``num >= 0`` and ``den >= 1`` (array or int)."""
    q, r = np.divmod(num, den)
    out = _bexp_int(q, rng)
    idx = np.flatnonzero(out & (r > 0))
    if idx.size:
        out[idx] = _bexp_frac(r[idx], den if not isinstance(den, np.ndarray) else den[idx], rng)
    return out


def _int_array(name: str, value: Any, low: int) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype == object:
        flat = arr.ravel()
        if not all(isinstance(v, Integral) and not isinstance(v, bool) for v in flat):
            raise FedAuditError(f"{name} must contain integers >= {low}")
        if any(int(v) < low for v in flat):
            raise FedAuditError(f"{name} must contain integers >= {low}, found {min(int(v) for v in flat)}")
        return arr
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer):
        raise FedAuditError(f"{name} must be an integer array (exact rational arithmetic), got dtype {arr.dtype}")
    if arr.size and int(arr.min()) < low:
        raise FedAuditError(f"{name} must contain integers >= {low}, found {int(arr.min())}")
    return arr


def bernoulli_exp(gamma_num: Any, gamma_den: Any, rng: RngLike = None) -> np.ndarray:
    """Exact Bernoulli(exp(-gamma_num/gamma_den)) coins, elementwise (CKS20 Alg. 1).

    ``gamma_num >= 0`` and ``gamma_den >= 1`` are integer arrays (broadcast together; Python
    ints of any size are accepted and handled exactly). Returns a bool array of the broadcast
    shape. Only integer uniforms are used, so ``P[True] = exp(-gamma)`` exactly.
    """
    num = _int_array("gamma_num", gamma_num, 0)
    den = _int_array("gamma_den", gamma_den, 1)
    rng = as_generator(rng)
    num, den = np.broadcast_arrays(num, den)
    shape = num.shape
    if num.dtype == object or den.dtype == object:
        flat = [_bexp_scalar(int(a), int(b), rng) for a, b in zip(num.ravel(), den.ravel())]
        return np.array(flat, dtype=bool).reshape(shape)
    num = np.ascontiguousarray(num, dtype=np.int64).ravel()
    den = np.ascontiguousarray(den, dtype=np.int64).ravel()
    return _bexp_vec(num, den, rng).reshape(shape)


# --------------------------------------------------------------------- discrete Laplace
def _geometric_e1(m: int, rng: np.random.Generator) -> np.ndarray:
    """V with P[V >= v] = e^-v: number of exp(-1)-coin successes before the first failure."""
    V = np.zeros(m, dtype=np.int64)
    idx = np.arange(m)
    while idx.size:
        idx = idx[_bexp_one(idx.size, rng)]
        V[idx] += 1
    return V


def _dlap_accept_rate(num: int, den: int) -> float:
    p1 = 1.0 if num == 1 else -math.expm1(-1.0) / (num * -math.expm1(-1.0 / num))
    p0 = -math.expm1(-den / num)  # P[Y = 0] before the sign rejection
    return max(p1 * (1.0 - 0.5 * p0), 1e-3)


def _dlap_chunk(num: int, den: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """m samples of the discrete Laplace with scale num/den (CKS20 Alg. 2, vectorised rejection)."""
    out = np.empty(m, dtype=np.int64)
    filled = 0
    rate = _dlap_accept_rate(num, den)
    vmax = (np.iinfo(np.int64).max - num) // num
    while filled < m:
        need = m - filled
        batch = min(int(need / rate * 1.05) + 64, 4 * need + 1024)   # bounded live memory
        if num == 1:
            U = np.zeros(batch, dtype=np.int64)
        else:
            U = rng.integers(0, num, size=batch)
            U = U[_bexp_frac(U, num, rng)]            # accept w.p. exp(-U/num)
        V = _geometric_e1(U.size, rng)               # P[V >= v] = e^-v
        if V.size and int(V.max()) > vmax:           # probability < e^-127: refuse, never wrap
            raise FedAuditError("discrete_laplace: int64 overflow in X = U + num*V (probability < 2^-180)")
        X = U + num * V
        Y = X // den if den != 1 else X
        neg = rng.integers(0, 2, size=U.size) == 1   # sign bit B
        ok = ~(neg & (Y == 0))                       # reject (B = 1, Y = 0)
        Z = np.where(neg, -Y, Y)[ok]
        take = min(need, Z.size)
        out[filled:filled + take] = Z[:take]
        filled += take
    return out


def _check_size(size: Any) -> tuple[int, ...]:
    if isinstance(size, (tuple, list)):
        dims = tuple(check_int("size", s, low=0) for s in size)
    else:
        dims = (check_int("size", size, low=0),)
    return dims



def _fill_in_chunks(size, chunk, rng, draw) -> np.ndarray:
    """int64 array of shape ``size`` filled by ``draw(m, rng)`` at most ``chunk`` at a time."""
    shape = _check_size(size)
    chunk = check_int("chunk", chunk, low=1)
    rng = as_generator(rng)
    total = math.prod(shape)
    out = np.empty(total, dtype=np.int64)
    for start in range(0, total, chunk):
        m = min(chunk, total - start)
        out[start:start + m] = draw(m, rng)
    return out.reshape(shape)

def discrete_laplace(scale_num: int, scale_den: int, size: Any, rng: RngLike = None, *,
                     chunk: int = DEFAULT_CHUNK) -> np.ndarray:
    """Exact discrete Laplace samples ``P[Z = z] = tanh(1/(2t)) exp(-|z|/t)``, ``t = scale_num/scale_den``.

    CKS20 Alg. 2: ``U ~ Unif{0..num-1}`` accepted w.p. ``exp(-U/num)``; ``V`` geometric with
    ``P[V >= v] = e^-v``; ``X = U + num V`` (so ``P[X = x] ∝ exp(-x/num)``); ``Y = floor(X/den)``
    (``P[Y = y] ∝ exp(-y den/num)``); sign bit ``B``; reject ``(B = 1, Y = 0)``; return ``(1-2B) Y``.
    Returns int64 of shape ``size``; generated ``chunk`` samples at a time.
    """
    num = check_int("scale_num", scale_num, low=1, high=_MAX_LAPLACE_NUM)
    den = check_int("scale_den", scale_den, low=1, high=_MAX_LAPLACE_NUM)
    g = math.gcd(num, den)
    num, den = num // g, den // g
    return _fill_in_chunks(size, chunk, rng, lambda m, gen: _dlap_chunk(num, den, m, gen))


# -------------------------------------------------------------------- discrete Gaussian
def _dgauss_chunk(f: int, D: int, bn: int, bd: int, t: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """m samples of N_Z(0, sigma^2) by CKS20 Alg. 3 with an integer proposal scale t.

    With ``sigma^2/t = bn/bd`` (reduced) the acceptance probability is ``exp(-gamma)``,
    ``gamma = (|Y| - sigma^2/t)^2/(2 sigma^2) = f A^2 / D``, ``A = |Y| bd - bn`` (exact integers).
    ``f A^2`` is formed in int64 while it fits; otherwise a float lower bound ``q <= gamma`` is
    applied first as q exp(-1) coins (exact: exp(-gamma) = exp(-q) exp(-(gamma - q))) and the
    rare survivors finish in Python ints.
    """
    out = np.empty(m, dtype=np.int64)
    filled = 0
    rate = 0.5
    lim_y = (_SAFE - bn) // bd
    lim_a = math.isqrt(_SAFE // f)
    while filled < m:
        need = m - filled
        batch = min(int(need / rate * 1.05) + 64, 4 * need + 1024)   # bounded live memory
        Y = _dlap_chunk(t, 1, batch, rng)
        absY = np.abs(Y)
        small_y = absY <= lim_y
        A = np.where(small_y, absY, 0) * bd - bn
        safe = small_y & (np.abs(A) <= lim_a)
        if safe.all():
            acc = _bexp_vec(A * A * f if f != 1 else A * A, D, rng)
        else:
            acc = np.empty(batch, dtype=bool)
            As = A[safe]
            acc[safe] = _bexp_vec(As * As * f if f != 1 else As * As, D, rng)
            _dgauss_tail(np.flatnonzero(~safe), absY, f, D, bn, bd, rng, acc)
        Z = Y[acc]
        rate = max(0.05, min(1.0, Z.size / batch))
        take = min(need, Z.size)
        out[filled:filled + take] = Z[:take]
        filled += take
    return out


def _dgauss_tail(idx: np.ndarray, absY: np.ndarray, f: int, D: int, bn: int, bd: int,
                 rng: np.random.Generator, acc: np.ndarray) -> None:
    """Exact acceptance (written into ``acc[idx]``) for far-tail proposals whose ``f A^2`` would
    overflow int64: a float lower bound ``q <= gamma`` first, then Python ints for survivors."""
    num = [f * (int(absY[i]) * bd - bn) ** 2 for i in idx]
    gam = np.array([float(v) / float(D) for v in num])
    q = np.floor(np.minimum(gam * (1.0 - 2.0**-40), float(_SAFE))).astype(np.int64)
    alive = _bexp_int(q, rng)                           # Bernoulli(exp(-q)), q <= gamma
    acc[idx] = alive
    for j in np.flatnonzero(alive):                     # survivors: prob e^-q each
        acc[idx[j]] = _bexp_scalar(num[j] - int(q[j]) * D, D, rng)


def discrete_gaussian(sigma2_num: int, sigma2_den: int, size: Any, rng: RngLike = None, *,
                      proposal_scale: int | None = None, chunk: int = DEFAULT_CHUNK) -> np.ndarray:
    """Exact discrete Gaussian ``N_Z(0, sigma^2)`` samples, ``sigma^2 = sigma2_num/sigma2_den``.

    CKS20 Alg. 3: ``Y`` discrete Laplace of integer scale ``t`` (default ``floor(sigma) + 1``),
    accepted with probability ``exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2))`` computed as an exact
    rational; the accepted ``Y`` has ``P[Y = y] ∝ exp(-y^2/(2 sigma^2))`` for *any* t > 0
    (``exp(-|y|/t) exp(-(|y| - sigma^2/t)^2/(2 sigma^2)) = exp(-y^2/(2 sigma^2)) exp(-sigma^2/(2 t^2))``);
    t near sigma keeps the acceptance rate high.

    Exact int64 arithmetic needs ``gamma``'s reduced denominator (a divisor of
    ``2 sigma2_num bd^2`` with ``sigma^2/t = bn/bd``) below 2^62. With the default t and integer
    ``sigma^2`` that allows sigma up to ~2^15;
    choosing ``sigma^2 = t c`` (so ``sigma^2/t`` is an integer and ``D = 2 sigma^2``) allows
    sigma up to 2^30 (the Gaussian mechanism does this). Returns int64 of shape ``size``.
    """
    n = check_int("sigma2_num", sigma2_num, low=1)
    d = check_int("sigma2_den", sigma2_den, low=1)
    g = math.gcd(n, d)
    n, d = n // g, d // g
    if proposal_scale is None:
        t = math.isqrt(n // d) + 1        # floor(sqrt(n/d)) = isqrt(floor(n/d))
    else:
        t = check_int("proposal_scale", proposal_scale, low=1, high=_MAX_LAPLACE_NUM)
    beta = Fraction(n, t * d)             # sigma^2 / t
    bn, bd = beta.numerator, beta.denominator
    # gamma = (|Y| bd - bn)^2 / bd^2 / (2 n/d) = d A^2 / (2 bd^2 n)
    D = 2 * bd * bd * n
    gf = math.gcd(d, D)
    f, D = d // gf, D // gf
    if D >= _SAFE or f >= _SAFE or bn >= _SAFE:
        raise FedAuditError(
            f"sigma2_num/sigma2_den = {n}/{d} with proposal_scale t = {t} is too large for exact int64 "
            f"arithmetic: the acceptance denominator 2 sigma^2 (bd)^2 = {D} must be < 2^62, where "
            f"sigma^2/t = {bn}/{bd}; use an integer sigma^2 (rational_at_least(sigma2, max_den=1)) and, "
            f"for sigma > 2^15, sigma^2 a multiple of proposal_scale")
    return _fill_in_chunks(size, chunk, rng, lambda m, gen: _dgauss_chunk(f, D, bn, bd, t, m, gen))


# ------------------------------------------------------------------------------ pmfs
def discrete_laplace_logpmf(z: Any, scale: float) -> np.ndarray:
    """``log P[Z = z] = log tanh(1/(2 scale)) - |z|/scale`` for integer z (``-inf`` off the integers)."""
    scale = float(scale)
    if not (math.isfinite(scale) and scale > 0):
        raise FedAuditError(f"scale must be a finite real number > 0, got scale={scale!r}")
    z = np.asarray(z, dtype=np.float64)
    log_c = math.log(math.tanh(0.5 / scale))
    out = log_c - np.abs(z) / scale
    return np.where(np.floor(z) == z, out, -np.inf)


def discrete_gaussian_log_normalizer(sigma: float) -> float:
    """``log sum_{k in Z} exp(-k^2/(2 sigma^2))`` to double precision.

    For ``sigma >= 1/2`` via Poisson summation (Jacobi theta):
    ``sum_k exp(-k^2/(2 sigma^2)) = sqrt(2 pi) sigma sum_m exp(-2 pi^2 sigma^2 m^2)``, whose
    terms beyond m = 0 are < e^-4.9 and decay super-exponentially; below that the direct sum,
    whose terms fall under 1e-300 by |k| = 38 sigma.
    """
    sigma = float(sigma)
    if not (math.isfinite(sigma) and sigma > 0):
        raise FedAuditError(f"sigma must be a finite real number > 0, got sigma={sigma!r}")
    if sigma >= 0.5:
        c = 2.0 * math.pi**2 * sigma * sigma
        tail = 0.0
        m = 1
        while True:
            term = math.exp(-c * m * m)
            tail += term
            if term < 1e-18 * (1.0 + tail):
                break
            m += 1
        return 0.5 * math.log(2.0 * math.pi) + math.log(sigma) + math.log1p(2.0 * tail)
    kmax = int(math.ceil(38.0 * sigma)) + 1
    k = np.arange(1, kmax + 1, dtype=np.float64)
    return math.log1p(2.0 * float(np.sum(np.exp(-k * k / (2.0 * sigma * sigma)))))


def discrete_gaussian_logpmf(z: Any, sigma: float) -> np.ndarray:
    """``log P[Z = z] = -z^2/(2 sigma^2) - log sum_k exp(-k^2/(2 sigma^2))`` (``-inf`` off the integers)."""
    log_norm = discrete_gaussian_log_normalizer(sigma)
    sigma = float(sigma)
    z = np.asarray(z, dtype=np.float64)
    out = -(z * z) / (2.0 * sigma * sigma) - log_norm
    return np.where(np.floor(z) == z, out, -np.inf)
