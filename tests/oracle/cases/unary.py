"""Unary pointwise ops: every form, every dtype, layouts, 0-dim, empty, special values.

Half: torch 1.13's CPU kernels lack Half for most of these ops ("not implemented
for 'Half'"), a gap of that build rather than a rule (its CUDA kernels and later
CPU ones compute Half in float). kiln admits Half and computes it in float, so
those cases take a reference that does the same: the op in float32, rounded to
Half once (or step by step where PyTorch rounds each step and kiln keeps the
steps, see emulate_*). silu and gelu's tanh form round once in kiln where torch
1.13 rounds every step (Note [16-bit floats in pointwise kernels]): their 16-bit
cases compare with the float64 value rounded once (in_float64).
"""

import math

import torch

from generate import ALL, FLOATS, INTS, Case

A = torch.ops.aten
NAN, INF = float("nan"), float("inf")

FLOAT_FNS = ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt",
             "reciprocal", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh",
             "sigmoid", "erf", "erfc"]
# Ops whose torch 1.13 CPU kernels admit Half.
TORCH_HALF = {"exp2", "reciprocal", "frac", "neg", "abs", "sign", "square", "nan_to_num",
              "logical_not", "isnan", "isinf", "isfinite", "bitwise_not"}
# Value ranges that keep each function's interesting part in view.
RANGE = {"asin": (-1.2, 1.2), "acos": (-1.2, 1.2), "log": (-0.5, 4), "log2": (-0.5, 4),
         "log10": (-0.5, 4), "log1p": (-1.5, 4), "sqrt": (-0.5, 4), "rsqrt": (-0.5, 4)}
SHAPES = [[3, 4], [2, 3, 5], [], [0, 3], [37]]
SPECIALS = [NAN, -NAN, INF, -INF, 0.0, -0.0, 1e-40, 1e-8, 0.5, -0.5, 1.5, 2.5, -2.5, 3.5, 1e30,
            -1e30, 3.4e38, -3.4e38, 88.0, -104.0, 710.0, -1.0, 1.0, 0.99]


def specials(dtype, n=41):
    """A contiguous tensor cycling through special values; long enough that torch
    runs both its vectorized body and its scalar tail over them."""
    vals = (SPECIALS * (n // len(SPECIALS) + 1))[:n]
    return torch.tensor(vals, dtype=torch.float64).to(dtype)


def in_float(fn):
    """fn applied in float32, the result rounded to the input's 16-bit dtype."""
    def ref(x, *args, **kwargs):
        return fn(x.float(), *args, **kwargs).to(x.dtype)
    return ref


def in_float64(fn):
    """fn applied in float64, the result rounded to the input's dtype once."""
    def ref(x, *args, **kwargs):
        return fn(x.double(), *args, **kwargs).to(x.dtype)
    return ref


def rounded(dt):
    return lambda t: t.to(dt).float()


def emulate_round_decimals(x, decimals):
    r = rounded(x.dtype)
    f = x.float()
    ten = float(torch.tensor(10.0 ** abs(decimals)).to(x.dtype))
    if decimals >= 0:
        return (r(torch.round(r(f * ten))) / ten).to(x.dtype)
    return (r(torch.round(r(f / ten))) * ten).to(x.dtype)


def half_ref(op, fn=None):
    """Reference for a Half case of `op` when torch 1.13 refuses Half."""
    if op in TORCH_HALF:
        return None
    if fn is not None:
        return fn
    aten = getattr(A, op).default
    return in_float(aten)


def float_fn_cases(g):
    for op in FLOAT_FNS:
        low, high = RANGE.get(op, (-3.0, 3.0))
        for dt in ALL:
            for shape in SHAPES:
                ref = half_ref(op) if dt == torch.float16 else None
                if dt == torch.bfloat16 and op == "rsqrt":
                    # torch's scalar fallback rounds sqrt before 1/x; kiln (and torch's
                    # vectorized loop) round once.
                    ref = in_float(A.rsqrt.default)
                yield Case(op, [g.tensor(shape, dt, "any", low, high)], ref=ref,
                           name=f"{op} {dt} {shape}")
        for dt in FLOATS:
            ref = half_ref(op) if dt == torch.float16 else None
            if dt == torch.bfloat16 and op == "rsqrt":
                ref = in_float(A.rsqrt.default)
            vals = specials(dt)
            if op in ("sinh", "cosh"):
                # Near overflow torch's vectorized sinh/cosh (SLEEF) give inf where the
                # value is finite (sinh(710.0) = 1.1e308; bf16 sinh(88.5) = 1.4e38).
                vals = vals.masked_fill(vals.abs() > 80, 2.0)
            if op == "log1p" and dt == torch.float32:
                # torch's vectorized log1p (SLEEF) returns inf above 1e38; log1p(3.4e38) is 88.7.
                ref = lambda t: torch.log1p(t.double()).float()
            yield Case(op, [vals], ref=ref, name=f"{op} {dt} specials")
        # In place, out= (casting, resizing, wrong dtype), mixed dtypes.
        for layout in ("contiguous", "transposed", "strided", "offset"):
            yield Case(f"{op}_", [g.tensor([3, 4], torch.float32, layout, low, high)],
                       name=f"{op}_ {layout}")
        yield Case(f"{op}_", [g.tensor([3, 4], torch.float64, "any", low, high)])
        yield Case(f"{op}_", [g.tensor([3, 4], torch.bfloat16, "contiguous", low, high)],
                   ref=(lambda t: t.copy_(torch.rsqrt(t.float()))) if op == "rsqrt" else None,
                   name=f"{op}_ bfloat16")
        yield Case(f"{op}_", [g.tensor([3, 4], torch.int64, "any", low, high)],
                   name=f"{op}_ int64 (float result into long)")
        yield Case(f"{op}_", [g.tensor([3, 1], torch.float32).expand(3, 4)],
                   name=f"{op}_ into an expanded tensor")
        for src, dst in ((torch.float32, torch.float64), (torch.int32, torch.float32),
                         (torch.float64, torch.float32), (torch.float32, torch.int64),
                         (torch.float32, torch.float16), (torch.bool, torch.float64)):
            yield Case(f"{op}.out", [g.tensor([3, 4], src, "any", low, high)],
                       {"out": g.tensor([4, 3], dst, "transposed")},
                       name=f"{op}.out {src}->{dst} (resized)")
            yield Case(f"{op}.out", [g.tensor([3, 4], src, "any", low, high)],
                       {"out": g.tensor([3, 4], dst, "transposed")},
                       name=f"{op}.out {src}->{dst}")
        yield Case(f"{op}.out", [g.tensor([2, 3], torch.float32, "any", low, high)],
                   {"out": g.tensor([0], torch.float32)}, name=f"{op}.out resize empty")
        yield Case(f"{op}.out", [g.tensor([2, 3], torch.float32, "any", low, high)],
                   {"out": g.tensor([5], torch.float32)}, name=f"{op}.out wrong shape")
        yield Case(f"{op}.out", [g.tensor([3], torch.float32)],
                   {"out": g.tensor([1], torch.float32).expand(3)},
                   name=f"{op}.out overlapping")


def keep_dtype_cases(g):
    """neg, abs, sign, relu, floor, ceil, round, trunc, frac."""
    ops = ["neg", "abs", "sign", "relu", "floor", "ceil", "round", "trunc", "frac"]
    for op in ops:
        aten = getattr(A, op)
        for dt in ALL:
            hi = 300.0 if dt in (torch.uint8, torch.int16, torch.int32, torch.int64) else 3.0
            lo = -128.0 if dt == torch.int8 else -hi
            for shape in SHAPES:
                x = g.tensor(shape, dt, "any", lo, hi)
                ref = half_ref(op) if dt == torch.float16 else None
                yield Case(op, [x], ref=ref, name=f"{op} {dt} {shape}")
        for dt in FLOATS:
            ref = half_ref(op) if dt == torch.float16 else None
            yield Case(op, [specials(dt)], ref=ref, name=f"{op} {dt} specials")
        # Rounding halves to even and large values.
        for dt in FLOATS:
            x = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.49, -3.51, 1e6 + 0.5, 2.0 ** 23 + 1],
                             dtype=torch.float64).to(dt)
            ref = half_ref(op) if dt == torch.float16 else None
            yield Case(op, [x], ref=ref, name=f"{op} {dt} halves")
        x = torch.tensor([-128, -1, 0, 1, 127], dtype=torch.int8)
        yield Case(op, [x], name=f"{op} int8 extremes")
        x = torch.tensor([-2**63, -1, 0, 2**63 - 1], dtype=torch.int64)
        yield Case(op, [x], name=f"{op} int64 extremes")
        # In place and out=.
        for dt in (torch.float32, torch.int32, torch.bfloat16, torch.bool):
            ref = None
            yield Case(f"{op}_", [g.tensor([3, 4], dt, "any")], ref=ref, name=f"{op}_ {dt}")
        for src, dst in ((torch.float32, torch.float32), (torch.float32, torch.float64),
                         (torch.int64, torch.int64), (torch.int64, torch.float32),
                         (torch.float32, torch.int64), (torch.bool, torch.bool)):
            yield Case(f"{op}.out", [g.tensor([3, 4], src, "any")],
                       {"out": g.tensor([4, 3], dst, "transposed")}, name=f"{op}.out {src}->{dst}")
        yield Case(f"{op}.out", [g.tensor([2, 3], torch.float32)],
                   {"out": g.tensor([0], torch.float32)}, name=f"{op}.out resize")
    # round.decimals
    for dt in FLOATS:
        for d in (0, 1, 2, 3, 4, -1, -2):
            scale = 10.0 ** max(-d, 0) * 3
            x = g.tensor([3, 5], dt, "any", -scale, scale)
            ref = None
            if dt == torch.float16:
                ref = lambda t, decimals: emulate_round_decimals(t, decimals)
            yield Case("round.decimals", [x], {"decimals": d}, ref=ref,
                       name=f"round.decimals {dt} {d}")
        ref = (lambda t, decimals: emulate_round_decimals(t, decimals)) if dt == torch.float16 else None
        yield Case("round.decimals", [specials(dt)], {"decimals": 2}, ref=ref)
        yield Case("round.decimals", [g.tensor([], dt)], {"decimals": 1}, ref=ref)
        yield Case("round.decimals", [g.tensor([0, 2], dt)], {"decimals": 1}, ref=ref)
    for dt in (torch.float32, torch.float64):
        x = torch.tensor([0.125, 0.375, 1.005, 2.675, -0.125, 1234.5678, 0.5, 1.5], dtype=dt)
        yield Case("round.decimals", [x], {"decimals": 2}, name=f"round.decimals {dt} ties")
    for dt in (torch.int64, torch.int32, torch.bool, torch.uint8):
        yield Case("round.decimals", [g.tensor([3], dt)], {"decimals": 1},
                   name=f"round.decimals {dt} refused")


def logic_cases(g):
    for dt in ALL:
        for shape in SHAPES:
            x = g.tensor(shape, dt, "any")
            yield Case("logical_not", [x], name=f"logical_not {dt} {shape}")
            yield Case("bitwise_not", [g.tensor(shape, dt, "any", -100, 100)],
                       name=f"bitwise_not {dt} {shape}")
            for op in ("isnan", "isinf", "isfinite"):
                yield Case(op, [g.tensor(shape, dt, "any")], name=f"{op} {dt} {shape}")
            yield Case("nan_to_num", [g.tensor(shape, dt, "any")], name=f"nan_to_num {dt} {shape}")
    for dt in FLOATS:
        s = specials(dt)
        for op in ("logical_not", "isnan", "isinf", "isfinite"):
            yield Case(op, [s], name=f"{op} {dt} specials")
        yield Case("nan_to_num", [s], name=f"nan_to_num {dt} specials")
        yield Case("nan_to_num", [s], {"nan": 1.5, "posinf": 1e10, "neginf": -2.0},
                   name=f"nan_to_num {dt} custom")
        yield Case("nan_to_num", [s], {"posinf": 7.0}, name=f"nan_to_num {dt} posinf only")
        yield Case("nan_to_num_", [s.clone()], {"neginf": -7.0}, name=f"nan_to_num_ {dt}")
        yield Case("nan_to_num.out", [s], {"out": torch.empty(0, dtype=dt)},
                   name=f"nan_to_num.out {dt}")
    yield Case("nan_to_num", [g.tensor([3, 4], torch.int64, "any")], {"nan": 1.5, "posinf": 1e10})
    yield Case("nan_to_num.out", [specials(torch.float32)], {"out": torch.empty(0)})
    yield Case("nan_to_num.out", [specials(torch.float32)],
               {"out": torch.empty(0, dtype=torch.float64)}, name="nan_to_num.out other dtype")
    yield Case("nan_to_num.out", [g.tensor([3], torch.int64)],
               {"out": torch.empty(3, dtype=torch.float32)}, name="nan_to_num.out int->float")
    yield Case("nan_to_num_", [g.tensor([3, 4], torch.float32, "transposed")])
    # In place and out=.
    for dt in (torch.float32, torch.int32, torch.bool, torch.float16):
        yield Case("logical_not_", [g.tensor([3, 4], dt, "any")], name=f"logical_not_ {dt}")
        yield Case("bitwise_not_", [g.tensor([3, 4], dt, "any")], name=f"bitwise_not_ {dt}")
    for src, dst in ((torch.float32, torch.bool), (torch.float32, torch.float32),
                     (torch.int64, torch.int32), (torch.bool, torch.float64)):
        yield Case("logical_not.out", [g.tensor([3, 4], src, "any")],
                   {"out": g.tensor([4, 3], dst, "transposed")}, name=f"logical_not.out {src}->{dst}")
    for src, dst in ((torch.int64, torch.int64), (torch.int64, torch.int32), (torch.bool, torch.bool),
                     (torch.uint8, torch.int64), (torch.int32, torch.float32)):
        yield Case("bitwise_not.out", [g.tensor([3, 4], src, "any", -50, 50)],
                   {"out": g.tensor([3, 4], dst, "any")}, name=f"bitwise_not.out {src}->{dst}")
    yield Case("logical_not.out", [g.tensor([2, 3])], {"out": g.tensor([7], torch.bool)},
               name="logical_not.out wrong shape")


def activation_cases(g):
    for dt in ALL:
        for shape in SHAPES:
            half_or_bf = dt in (torch.float16, torch.bfloat16)
            ref = in_float64(lambda t: A.silu.default(t)) if half_or_bf else None
            yield Case("silu", [g.tensor(shape, dt, "any", -6, 6)], ref=ref,
                       name=f"silu {dt} {shape}")
            ref = in_float(lambda t: A.gelu.default(t)) if dt in (torch.float16, torch.bfloat16) else None
            # bf16: torch's scalar fallback rounds each step of the erf form, its
            # vectorized loop (and kiln) round once.
            yield Case("gelu", [g.tensor(shape, dt, "any", -5, 5)], ref=ref,
                       name=f"gelu {dt} {shape}")
            ref = in_float64(lambda t, approximate: A.gelu.default(t, approximate=approximate)) \
                if half_or_bf else None
            yield Case("gelu", [g.tensor(shape, dt, "any", -5, 5)], {"approximate": "tanh"},
                       ref=ref, name=f"gelu tanh {dt} {shape}")
            ref = in_float(lambda t, b, th: A.softplus.default(t, b, th)) if dt == torch.float16 else None
            yield Case("softplus", [g.tensor(shape, dt, "any", -30, 30), 1, 20], ref=ref,
                       name=f"softplus {dt} {shape}")
    for dt in FLOATS:
        s = specials(dt)
        half = dt == torch.float16
        bf = dt == torch.bfloat16
        yield Case("silu", [s], ref=in_float64(lambda t: A.silu.default(t)) if half or bf else None,
                   name=f"silu {dt} specials")
        yield Case("gelu", [s], ref=in_float(lambda t: A.gelu.default(t)) if half or bf else None,
                   name=f"gelu {dt} specials")
        yield Case("gelu", [s], {"approximate": "tanh"},
                   ref=in_float64(lambda t, approximate: A.gelu.default(t, approximate=approximate))
                   if half or bf else None, name=f"gelu tanh {dt} specials")
        for beta, th in ((1, 20), (2, 1), (0.5, 3.0), (-1, 2)):
            yield Case("softplus", [s, beta, th],
                       ref=in_float(lambda t, b, h: A.softplus.default(t, b, h)) if half else None,
                       name=f"softplus {dt} specials beta={beta}")
            yield Case("softplus", [g.tensor([4, 5], dt, "any", -30, 30), beta, th],
                       ref=in_float(lambda t, b, h: A.softplus.default(t, b, h)) if half else None,
                       name=f"softplus {dt} beta={beta} threshold={th}")
    yield Case("gelu", [g.tensor([3])], {"approximate": "erf"}, name="gelu bad approximate")
    yield Case("gelu_", [g.tensor([3, 4], torch.float32, "transposed")])
    yield Case("gelu_", [g.tensor([3, 4], torch.float64, "strided")], {"approximate": "tanh"})
    yield Case("gelu_", [g.tensor([3], torch.int64)], name="gelu_ int")
    yield Case("silu_", [g.tensor([3, 4], torch.float32, "offset")])
    yield Case("silu_", [g.tensor([3, 4], torch.bfloat16, "any")],
               ref=lambda t: t.copy_(A.silu.default(t.double())))
    for dst in (torch.float32, torch.float64, torch.int64):
        # Contiguous: torch 1.13's gelu.out leaves a non-contiguous out unwritten.
        yield Case("gelu.out", [g.tensor([3, 4])], {"out": g.tensor([3, 4], dst, "contiguous")},
                   name=f"gelu.out float32->{dst}")
        yield Case("gelu.out", [g.tensor([3, 4])], {"approximate": "tanh",
                                                    "out": g.tensor([3, 4], dst)},
                   name=f"gelu.out tanh float32->{dst}")
        yield Case("silu.out", [g.tensor([3, 4])], {"out": g.tensor([3, 4], dst, "transposed")},
                   name=f"silu.out float32->{dst}")
        yield Case("softplus.out", [g.tensor([3, 4]), 1, 20], {"out": g.tensor([3, 4], dst)},
                   name=f"softplus.out float32->{dst}")
    yield Case("softplus.out", [g.tensor([3, 4]), 2, 1], {"out": g.tensor([0])})
    yield Case("softplus", [g.tensor([3]), 1e300, 20], name="softplus beta overflows float")
    yield Case("softplus", [g.tensor([3], torch.float64), 1e300, 20], name="softplus beta double")


def layout_cases(g):
    """Outputs take the input's layout (dense permutations kept), as in PyTorch."""
    for op in ("exp", "neg", "logical_not", "isnan", "floor", "sigmoid", "bitwise_not", "square"):
        for dt in (torch.float32, torch.int32):
            if op == "bitwise_not" and dt == torch.float32:
                continue
            for layout in ("transposed", "strided", "offset", "expanded"):
                x = g.tensor([2, 3, 4], dt, layout)
                yield Case(op, [x], check_strides=True, name=f"{op} {dt} layout {layout}")
            x = g.tensor([2, 3, 4], dt, "contiguous").permute(1, 2, 0)
            yield Case(op, [x], check_strides=True, name=f"{op} {dt} layout permuted")
    x = g.tensor([4, 3], torch.float32, "contiguous").t()
    yield Case("round.decimals", [x], {"decimals": 1}, check_strides=True,
               name="round.decimals layout")
    yield Case("exp.out", [g.tensor([4, 3], torch.int64, "contiguous").t()],
               {"out": torch.empty(0)}, check_strides=True, name="exp.out resized like its input")
    yield Case("neg.out", [g.tensor([2, 3, 4], torch.float32, "contiguous").permute(2, 0, 1)],
               {"out": torch.empty(5)}, check_strides=True, name="neg.out resized like its input")


def exact_cases(g):
    """Bit-exact agreement (rtol = atol = 0) where kiln rounds the steps torch rounds,
    on tensors long enough for torch's vectorized loops."""
    for dt in (torch.bfloat16, torch.float32, torch.float64):
        for d in (0, 1, 2, 4, -1):
            yield Case("round.decimals", [g.tensor([203], dt, "contiguous", -300, 300)],
                       {"decimals": d}, rtol=0.0, atol=0.0, name=f"round.decimals {dt} {d} exact")
        for op in ("neg", "abs", "sign", "relu", "floor", "ceil", "round", "trunc", "frac"):
            yield Case(op, [g.tensor([203], dt, "contiguous", -300, 300)], rtol=0.0, atol=0.0,
                       name=f"{op} {dt} exact")


def cases(g):
    yield from float_fn_cases(g)
    yield from keep_dtype_cases(g)
    yield from logic_cases(g)
    yield from activation_cases(g)
    yield from layout_cases(g)
    yield from exact_cases(g)
