#!/usr/bin/env python3
"""The rounding error of LayerNorm deferral against the unfused program, by
a row's |mean| / std (the tables in docs/reparameterizer.md). Plain Python,
no dependencies; a few seconds.

unfused:  bf16(LN(x)) @ W, LN in fp32 with the two-pass variance
deferred: s * (bf16(x * g) @ W) - s * mu * (g @ W) + b @ W, with fp32 raw
          moments and the variance Σx² − mu (2Σx − D mu), clamped at 0
Both read bf16 weights and accumulate exactly. Errors are rel. L2 against
exact arithmetic on x (first table: x is fp32, an epilogue value) or on the
fp32 value that was rounded to the bf16 x (second table: a bf16 residual
stream, as in the PyTorch models).
"""
import math
import random
import struct


def f32(v):
    return struct.unpack("f", struct.pack("f", v))[0]


def bf16(v):
    b = struct.unpack("I", struct.pack("f", v))[0]
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("f", struct.pack("I", b))[0]


def fsum(values):
    s = 0.0
    for v in values:
        s = f32(s + v)
    return s


random.seed(1)
D, N, M, EPS = 256, 32, 8, 1e-5
W = [[bf16(random.gauss(0, 1 / math.sqrt(D))) for _ in range(D)] for _ in range(N)]
g = [bf16(1 + 0.1 * random.gauss(0, 1)) for _ in range(D)]
b = [bf16(0.1 * random.gauss(0, 1)) for _ in range(D)]
gW = [sum(g[k] * W[n][k] for k in range(D)) for n in range(N)]
bW = [sum(b[k] * W[n][k] for k in range(D)) for n in range(N)]


def row_errors(x_true, x):
    mu = sum(x_true) / D
    var = sum((v - mu) ** 2 for v in x_true) / D
    exact = [sum(((x_true[k] - mu) / math.sqrt(var + EPS) * g[k] + b[k]) * W[n][k] for k in range(D)) for n in range(N)]
    s1 = fsum(x)
    mu32 = f32(s1 / D)
    sig = f32(1 / math.sqrt(f32(fsum(f32((v - mu32) ** 2) for v in x) / D) + EPS))
    h = [bf16(f32(f32(f32(x[k] - mu32) * sig) * g[k]) + b[k]) for k in range(D)]
    unfused = [sum(h[k] * W[n][k] for k in range(D)) for n in range(N)]
    s2 = fsum(f32(v * v) for v in x)
    var_d = max(f32(f32(s2 - f32(mu32 * f32(f32(2 * s1) - f32(D * mu32)))) / D), 0.0)
    sig_d = f32(1 / math.sqrt(f32(var_d + EPS)))
    a = [bf16(f32(x[k] * g[k])) for k in range(D)]
    deferred = [sig_d * sum(a[k] * W[n][k] for k in range(D)) - f32(sig_d * mu32) * gW[n] + bW[n] for n in range(N)]
    sq = lambda ys: sum((y - e) ** 2 for y, e in zip(ys, exact))
    return sq(unfused), sq(deferred), sum(e * e for e in exact)


for title, stored in [("x in fp32", False), ("x stored in bf16", True)]:
    print(title)
    for ratio in [0, 0.5, 1, 2, 4, 16, 64]:
        nu = nd = den = 0.0
        for _ in range(M):
            x_true = [f32(ratio + random.gauss(0, 1)) for _ in range(D)]
            x = [bf16(v) for v in x_true] if stored else x_true
            u, d, e = row_errors(x_true, x)
            nu, nd, den = nu + u, nd + d, den + e
        print(f"  |mu|/std {ratio:5}: unfused {math.sqrt(nu / den):.1e}  deferred {math.sqrt(nd / den):.1e}")
