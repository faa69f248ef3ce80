#!/usr/bin/python3
"""Fits the float32 polynomial coefficients used by jit/codegen_cpu/vecmath_*.cpp.

Each fit is a near-minimax polynomial found with Lawson's iteratively reweighted
least squares on a dense grid (double precision, with mpmath references where
double libm loses digits), then rounded to float32 and re-measured in float32
Horner arithmetic (with FMA emulated in double, which is exact enough here).

Run: /usr/bin/python3 jit/codegen_cpu/tools/fit_vecmath.py [name...]
Prints C++ constant tables to paste into the vecmath sources.
"""
import math
import sys

import mpmath
import numpy as np

mpmath.mp.prec = 400


def lawson(basis, target, weight, iters=200):
    """Minimizes max |weight*(basis@c - target)| approximately."""
    a = basis * weight[:, None]
    b = target * weight
    w = np.ones(len(b)) / len(b)
    best = None
    for _ in range(iters):
        sw = np.sqrt(w)
        c, *_ = np.linalg.lstsq(a * sw[:, None], b * sw, rcond=None)
        err = np.abs(a @ c - b)
        m = err.max()
        if best is None or m < best[0]:
            best = (m, c)
        w = w * err
        s = w.sum()
        if s == 0:
            break
        w /= s
    return best[1], best[0]


def f32(x):
    return np.float32(x)


def horner_f32(coeffs, t):
    """Float32 Horner evaluation with single-rounding FMAs (emulated in float64)."""
    t = t.astype(np.float32)
    acc = np.full_like(t, coeffs[-1], dtype=np.float32)
    for c in reversed(coeffs[:-1]):
        acc = (acc.astype(np.float64) * t.astype(np.float64) + np.float64(c)).astype(np.float32)
    return acc


def mp_vec(fn, xs):
    return np.array([float(fn(mpmath.mpf(float(x)))) for x in xs])


def report(name, coeffs, err):
    print(f"// {name}: fitted max weighted error {err:.3e}")
    print("  " + ", ".join(f"{float(f32(c)).hex()}f /* {float(f32(c)):.9g} */" for c in coeffs))


def fit_exp(deg=5):
    # e^r = 1 + r + r^2 q(r) on [-ln2/2, ln2/2]; relative error.
    r = np.linspace(-math.log(2) / 2, math.log(2) / 2, 20001)
    tgt = np.exp(r)
    basis = np.stack([r ** (k + 2) for k in range(deg - 1)], axis=1)
    q, err = lawson(basis, tgt - 1 - r, 1 / tgt)
    report(f"exp q(r) deg {deg - 2} (e^r = 1 + r + r^2 q)", q, err)
    return q


def fit_expm1(deg=7):
    # expm1(r) = r + r^2 q(r); relative error of expm1.
    r = np.linspace(-math.log(2) / 2, math.log(2) / 2, 20001)
    r = r[np.abs(r) > 1e-6]
    tgt = np.expm1(r)
    basis = np.stack([r ** (k + 2) for k in range(deg - 1)], axis=1)
    q, err = lawson(basis, tgt - r, 1 / np.abs(tgt))
    report(f"expm1 q(r) deg {deg - 2} (expm1 = r + r^2 q)", q, err)
    return q


def fit_log(deg=8):
    # log1p(f) = f - f^2/2 + f^3 q(f) for f in [sqrt(1/2)-1, sqrt(2)-1]; relative.
    f = np.linspace(math.sqrt(0.5) - 1, math.sqrt(2) - 1, 20001)
    f = f[np.abs(f) > 1e-6]
    tgt = np.log1p(f)
    basis = np.stack([f ** (k + 3) for k in range(deg - 2)], axis=1)
    q, err = lawson(basis, tgt - f + f * f / 2, 1 / np.abs(tgt))
    report(f"log q(f) deg {deg - 3} (log1p f = f - f^2/2 + f^3 q)", q, err)
    return q


def fit_tanh(hi=0.625, deg=6):
    # tanh(x) = x + x^3 q(x^2), x in [0, hi]; relative.
    x = np.linspace(1e-4, hi, 20001)
    tgt = mp_vec(mpmath.tanh, x)
    basis = np.stack([x ** (2 * k + 3) for k in range(deg)], axis=1)
    q, err = lawson(basis, tgt - x, 1 / tgt)
    report(f"tanh q(x^2) deg {deg - 1} on [0,{hi}]", q, err)
    return q


def fit_tanh_rational(k=3, m=3, hi=7.5, outer=30):
    """tanh(x) = x P(x^2) / Q(x^2) on (0, hi], Q monic; relative error.

    Loeb's linearization: minimizes |x P - tanh(x) Q| / (tanh(x) Q_prev) with
    Lawson's weights, Q_prev the previous iterate's denominator.
    """
    x = np.concatenate([np.linspace(1e-4, 1, 8000), np.linspace(1, hi, 12000)])
    y = np.tanh(x)
    t = x * x
    a = np.concatenate([np.stack([x * t**i for i in range(k + 1)], axis=1),
                        np.stack([-y * t**j for j in range(1, m + 1)], axis=1)], axis=1)
    qprev = np.ones_like(x)
    best = None
    for _ in range(outer):
        c, _ = lawson(a, y, 1 / (y * qprev), iters=100)
        p, q = c[:k + 1], np.concatenate([[1.0], c[k + 1:]])
        qv = sum(q[j] * t**j for j in range(m + 1))
        err = np.max(np.abs(x * sum(p[i] * t**i for i in range(k + 1)) / qv / y - 1))
        if best is None or err < best[0]:
            best = (err, p / q[-1], q / q[-1])
        qprev = qv
    err, p, q = best
    report(f"tanh x P/Q, P deg {k}, Q deg {m} monic, on [0,{hi}]", p, err)
    report("  Q (without its leading 1)", q[:-1], err)
    return p, q[:-1]


def fit_erf_small(hi=1.0, deg=6):
    # erf(x) = x p(x^2), x in [0, hi]; relative.
    x = np.linspace(1e-5, hi, 20001)
    tgt = mp_vec(mpmath.erf, x)
    basis = np.stack([x ** (2 * k + 1) for k in range(deg)], axis=1)
    p, err = lawson(basis, tgt, 1 / tgt)
    report(f"erf p(x^2) deg {deg - 1} on [0,{hi}]", p, err)
    return p


def fit_erfc_large(lo=1.0, hi=10.1, a=0.5, deg=10):
    # erfc(x) = exp(-x^2) g(t), t = 1/(1 + a x), x in [lo, hi]; relative.
    x = np.linspace(lo, hi, 20001)
    tgt = mp_vec(lambda v: mpmath.erfc(v) * mpmath.exp(v * v), x)
    t = 1 / (1 + a * x)
    basis = np.stack([t ** k for k in range(deg + 1)], axis=1)
    g, err = lawson(basis, tgt, 1 / tgt)
    report(f"erfc g(t) deg {deg}, t=1/(1+{a}x), x in [{lo},{hi}]", g, err)
    return g


def fit_sin(deg=4):
    # sin(r) = r + r^3 q(r^2) on [0, pi/4]; relative.
    r = np.linspace(1e-4, math.pi / 4, 20001)
    tgt = np.sin(r)
    basis = np.stack([r ** (2 * k + 3) for k in range(deg)], axis=1)
    q, err = lawson(basis, tgt - r, 1 / tgt)
    report(f"sin q(r^2) deg {deg - 1}", q, err)
    return q


def fit_cos(deg=4):
    # cos(r) = 1 - r^2/2 + r^4 q(r^2) on [0, pi/4]; relative.
    r = np.linspace(0, math.pi / 4, 20001)
    tgt = np.cos(r)
    basis = np.stack([r ** (2 * k + 4) for k in range(deg)], axis=1)
    q, err = lawson(basis, tgt - 1 + r * r / 2, 1 / tgt)
    report(f"cos q(r^2) deg {deg - 1}", q, err)
    return q


def cpp_array(name, coeffs, note):
    body = ", ".join(c_literal(c) for c in coeffs)
    return f"// {note}\nconstexpr float {name}[] = {{{body}}};"


def c_literal(c):
    v = float(np.float32(c))
    if v == 0:
        return "0.0f"
    h = v.hex()  # 0x1.8000000000000p-1
    mant, exp = h.split("p")
    mant = mant.rstrip("0").rstrip(".")
    return f"{mant}p{exp}f"


def horner_eval(coeffs, t):
    """Float32 Horner with one rounding per fma, c[0] + t*(c[1] + ...)."""
    t = t.astype(np.float32).astype(np.float64)
    acc = np.full(t.shape, np.float32(coeffs[-1]), dtype=np.float64)
    for c in reversed(coeffs[:-1]):
        acc = np.float32(acc * t + np.float64(np.float32(c))).astype(np.float64)
    return acc


def emit_all():
    out = []
    # exp: e^r = 1 + r + r^2 q(r), q of degree 4, evaluated as one Horner chain.
    q = fit_exp(6)
    c = [1.0, 1.0] + list(q)
    r = np.linspace(-math.log(2) / 2, math.log(2) / 2, 100001).astype(np.float32)
    err = np.max(np.abs(horner_eval(c, r) / np.exp(r.astype(np.float64)) - 1))
    out.append(cpp_array("kExpPoly", c, f"e^r on [-ln2/2, ln2/2], float32 eval rel err {err:.2e}"))
    # expm1: r * (1 + r q(r)).
    q = fit_expm1(6)
    c = [1.0] + list(q)
    r = r[np.abs(r) > 1e-7]
    val = np.float32(r * horner_eval(c, r))
    err = np.max(np.abs(val / np.expm1(r.astype(np.float64)) - 1))
    out.append(cpp_array("kExpm1Poly", c, f"expm1(r)/r on [-ln2/2, ln2/2], eval rel err {err:.2e}"))
    # log: log1p(f) = f + f^2 (f Q(f) - 1/2).
    q = fit_log(9)
    f = np.linspace(math.sqrt(0.5) - 1, math.sqrt(2) - 1, 100001).astype(np.float32)
    f = f[np.abs(f) > 1e-7].astype(np.float64)
    qq = horner_eval(list(q), f)
    inner = np.float32(f * qq - 0.5).astype(np.float64)
    f2 = np.float32(f * f).astype(np.float64)
    val = np.float32(f2 * inner + f)
    err = np.max(np.abs(val / np.log1p(f) - 1))
    out.append(cpp_array("kLogPoly", q, f"log1p(f) = f + f^2 (f Q - 1/2), eval rel err {err:.2e}"))
    # exp of degree 5 for sigmoid (its bar is 4e-6).
    q = fit_exp(5)
    c = [1.0, 1.0] + list(q)
    err = np.max(np.abs(horner_eval(c, r) / np.exp(r.astype(np.float64)) - 1))
    out.append(cpp_array("kExpPoly5", c, f"e^r on [-ln2/2, ln2/2], degree 5, eval rel err {err:.2e}"))
    # tanh = x P(x^2) / Q(x^2) on [0, 7.5], Q monic.
    p, q = fit_tanh_rational(3, 3, 7.5)
    out.append(cpp_array("kTanhP", p, "tanh(x) = x P(x^2) / Q(x^2) on [0, 7.5]"))
    out.append(cpp_array("kTanhQ", q, "Q without its leading 1"))
    # tanh small: x (1 + x^2 P(x^2)) on [0, 0.625].
    q = fit_tanh(0.625, 5)
    c = [1.0] + list(q)
    out.append(cpp_array("kTanhPoly", c, "tanh(x)/x in x^2 on [0, 0.625]"))
    # erf small: x P(x^2) on [0, 1].
    p = fit_erf_small(1.0, 6)
    out.append(cpp_array("kErfPoly", p, "erf(x)/x in x^2 on [0, 1]"))
    # erfc large: exp(-x^2) G(t), t = 1/(1 + x/2), x in [1, 10.1].
    g = fit_erfc_large(1.0, 10.1, 0.5, 8)
    out.append(cpp_array("kErfcPoly", g, "erfc(x) e^(x^2) in t = 1/(1 + x/2), x in [1, 10.1]"))
    # sin r = r (1 + r^2 Q(r^2)), cos r = 1 - r^2/2 + r^4 Q(r^2) on [0, pi/4].
    q = fit_sin(3)
    out.append(cpp_array("kSinPoly", [1.0] + list(q), "sin(r)/r in r^2 on [0, pi/4]"))
    q = fit_cos(3)
    out.append(cpp_array("kCosPoly", [1.0, -0.5] + list(q), "cos(r) in r^2 on [0, pi/4]"))
    out.append(two_over_pi_words())
    print("\n".join(out))


def two_over_pi_words(count=10):
    """Binary digits of 2/pi after the point, 32 per word (Payne-Hanek table)."""
    v = 2 / mpmath.pi
    words = []
    for _ in range(count):
        v *= 2**32
        w = int(mpmath.floor(v))
        words.append(w)
        v -= w
    body = ", ".join(f"0x{w:08x}" for w in words)
    return f"constexpr uint32_t kTwoOverPiBits[] = {{{body}}};"


FITS = {
    "exp": fit_exp,
    "expm1": fit_expm1,
    "log": fit_log,
    "tanh": fit_tanh,
    "tanh_rational": fit_tanh_rational,
    "erf": fit_erf_small,
    "erfc": fit_erfc_large,
    "sin": fit_sin,
    "cos": fit_cos,
}

if __name__ == "__main__":
    names = sys.argv[1:]
    if not names:
        emit_all()
    for n in names:
        FITS[n]()
