"""Writes src/ops/gelu_table.h: piecewise polynomials of g(u) = Phi(u) - 1/2 = erf(u / sqrt 2) / 2 on [0, U) for the
vector GELU (src/ops/mathfn.h): GELU(x) = x / 2 + |x| g(|x|), and g = 1/2 from U on. [0, U) is cut into n equal
intervals (16: one 512-bit register per coefficient; 8: one 256-bit register), each fitted by Chebyshev interpolation
in double (numpy) and written as monomial coefficients in s = u - (interval centre). The script checks the float
evaluation (Horner with one rounding per step) against erf in double on 3 million points of [-9, 9] and refuses to
write a table whose GELU is off by more than 4e-7.
Run: /usr/bin/python3 tools/gen_gelu_table.py > src/ops/gelu_table.h"""
import math
import sys

import numpy as np
from numpy.polynomial import chebyshev

U = 5.5  # Phi(-5.5) = 1.9e-8: past U, |x| (1/2 - g) is under 1.1e-7 of |x|
# (intervals, degree). 8 intervals reach float rounding (3.3e-7) at degree 5; degree 6 cost a lane permute and a
# multiply-add more per vector (AVX2 vt_gelu_n 0.60-0.61 against 0.55-0.56 ns per float, AMD EPYC Zen 3, 2026-11-30).
TABLES = [(16, 4), (8, 5)]


def g(u):
    return 0.5 * math.erf(u / math.sqrt(2.0))


def fit(n, deg):
    """Coefficients [degree + 1][n] (float32): coefficient j of interval k in row j."""
    h = U / n
    rows = np.zeros((deg + 1, n), dtype=np.float32)
    for k in range(n):
        centre = (k + 0.5) * h
        cheb = chebyshev.chebinterpolate(np.vectorize(lambda t: g(centre + t * h / 2)), deg)
        mono = chebyshev.cheb2poly(cheb)
        for j, c in enumerate(mono):
            rows[j, k] = np.float32(c / (h / 2) ** j)
    return h, rows


def gelu_f32(x, h, rows):
    """The vector kernel's arithmetic in numpy: float32 rounding after each step."""
    n = rows.shape[1]
    u = np.abs(x)
    k = np.minimum((u * np.float32(1 / h)).astype(np.int64), n - 1)
    s = (u - np.float32(h / 2)) - k.astype(np.float32) * np.float32(h)
    p = rows[-1, k]
    for j in range(rows.shape[0] - 2, -1, -1):
        p = (p.astype(np.float64) * s + rows[j, k]).astype(np.float32)
    p = np.where(u >= np.float32(U), np.float32(0.5), p)
    return (u.astype(np.float64) * p + np.float32(0.5) * x).astype(np.float32)


def main():
    xs = np.concatenate([np.linspace(-9, 9, 2000001), np.random.RandomState(0).uniform(-9, 9, 1000000)])
    xs = xs.astype(np.float32)
    ref = np.array([0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))) for v in xs.astype(np.float64)])
    out = ["/* Piecewise polynomials of g(u) = erf(u/sqrt 2)/2 on [0, VT_GELU_U) for mathfn.h's vector GELU, written",
           " * by tools/gen_gelu_table.py (Chebyshev interpolation per interval in double, rounded to float). Do not",
           " * edit by hand. vt_gelu_tN[j][k]: coefficient of s^j on interval k = floor(u / h), h = VT_GELU_U / N,",
           " * s = u - (k + 1/2) h. Float evaluation against erf in double on 3M points of [-9, 9]:"]
    body = []
    for n, deg in TABLES:
        h, rows = fit(n, deg)
        err = float(np.max(np.abs(gelu_f32(xs, h, rows) - ref)))
        if not err < 4e-7:
            sys.exit(f"{n} intervals of degree {deg}: GELU off by {err:.3g}")
        out.append(f" *   {n} intervals, degree {deg}: GELU within {err:.2g} absolute.")
        body.append(f"static const float vt_gelu_t{n}[{deg + 1}][{n}] = {{")
        for j in range(deg + 1):
            vals = [f"{float(c):.9g}f" for c in rows[j]]
            lines = [", ".join(vals[i:i + 6]) for i in range(0, n, 6)]
            body.append("    {" + ",\n     ".join(lines) + "},")
        body.append("};")
    out[-1] += " */"
    out.append(f"#define VT_GELU_U {U}f")
    print("\n".join(out + body))


if __name__ == "__main__":
    main()
