"""remainder, fmod, floor_divide, div rounding modes, pow, square, atan2, maximum,
minimum, logical_* and bitwise_*: every form, dtypes, broadcasts, 0-dim, empty,
wrapped numbers, special values, in place and out=.

Half: torch 1.13's CPU atan2 lacks Half; kiln computes it in float, so those
cases take that reference (see unary.py).
"""

import itertools
import math

import torch

from generate import ALL, FLOATS, INTS, Case

A = torch.ops.aten
NAN, INF = float("nan"), float("inf")

SHAPES = [([3, 4], [3, 4]), ([2, 3, 4], [4]), ([3, 1], [1, 5]), ([], [2, 3]), ([0, 3], [3]),
          ([2, 3], []), ([], [])]
SPECIAL = [NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 3.0, 1e30, -7.0, 0.5]


def pairs(dtype):
    """Every (a, b) over SPECIAL, as two contiguous tensors."""
    a, b = zip(*itertools.product(SPECIAL, SPECIAL))
    return (torch.tensor(a, dtype=torch.float64).to(dtype),
            torch.tensor(b, dtype=torch.float64).to(dtype))


def in_float(fn):
    def ref(*args, **kwargs):
        dt = next(a.dtype for a in args if isinstance(a, torch.Tensor))
        up = [a.float() if isinstance(a, torch.Tensor) else a for a in args]
        return fn(*up, **kwargs).to(dt)
    return ref


def inplace_ref(fn):
    """An in-place form torch.ops.aten lacks (maximum_, minimum_): the functional
    result written back into self under the in-place rules (no broadcasting of
    self, a safe cast into its dtype)."""
    def ref(a, b):
        r = fn(a, b)
        if r.shape != a.shape:
            raise RuntimeError(f"output with shape {list(a.shape)} doesn't match {list(r.shape)}")
        if not torch.can_cast(r.dtype, a.dtype):
            raise RuntimeError(f"result type {r.dtype} can't be cast to {a.dtype}")
        return a.copy_(r)
    return ref


def nonzero(g, shape, dt, layout="any", low=-9, high=9):
    """Divisors away from zero (ints: no zeros; floats: |b| >= 0.25)."""
    t = g.tensor(shape, dt, layout, low, high)
    if dt == torch.bool:
        return t
    if dt.is_floating_point:
        return torch.where(t.abs() < 0.25, torch.full_like(t, 0.5), t)
    return torch.where(t == 0, torch.ones_like(t), t)


def division_cases(g):
    # (case op, out overload, kwargs)
    ops = [("remainder.Tensor", "remainder.Tensor_out", "remainder_.Tensor", {}),
           ("fmod.Tensor", "fmod.Tensor_out", "fmod_.Tensor", {}),
           ("floor_divide", "floor_divide.out", "floor_divide_.Tensor", {}),
           ("div.Tensor_mode", "div.out_mode", "div_.Tensor_mode", {"rounding_mode": "trunc"}),
           ("div.Tensor_mode", "div.out_mode", "div_.Tensor_mode", {"rounding_mode": "floor"}),
           ("div.Tensor_mode", "div.out_mode", "div_.Tensor_mode", {"rounding_mode": None})]
    for op, out_op, inplace_op, kw in ops:
        tag = f"{op} {kw.get('rounding_mode', '')}"
        for dt in ALL:
            for sa, sb in SHAPES:
                lo = 0 if dt == torch.uint8 else -20
                a = g.tensor(sa, dt, "any", lo, 20)
                b = nonzero(g, sb, dt, "any", lo, 9)
                yield Case(op, [a, b], kw, name=f"{tag} {dt} {sa} {sb}")
        for dt in FLOATS:
            a, b = pairs(dt)
            yield Case(op, [a, b], kw, name=f"{tag} {dt} specials")
            # Large quotients, where 16-bit rounding of the steps shows.
            a = g.tensor([40], dt, "contiguous", -300, 300)
            b = g.tensor([40], dt, "contiguous", -3, 3)
            yield Case(op, [a, b], kw, name=f"{tag} {dt} large quotients")
        for dt in INTS:
            lo, hi = (-128, 127) if dt == torch.int8 else (0, 255) if dt == torch.uint8 else (-1000, 1000)
            a = torch.tensor([lo, hi, -7, 7, -7, 7, 0, lo, 5, -5], dtype=torch.int64).to(dt)
            b = torch.tensor([-1 if dt != torch.uint8 else 1, 1, 2, -2, -2, 2, 3, 7, -3, 3],
                             dtype=torch.int64).to(dt)
            if dt == torch.uint8:
                b = b.abs()
            yield Case(op, [a, b], kw, name=f"{tag} {dt} signs")
            yield Case(op, [a, torch.tensor([1, 2, 0, 3, 1, 1, 1, 1, 1, 1], dtype=dt)], kw,
                       name=f"{tag} {dt} divisor zero")
        # Mixed dtypes, 0-dim tensors and wrapped numbers.
        for da, db in [(torch.int32, torch.float16), (torch.uint8, torch.int8),
                       (torch.int64, torch.float64), (torch.float16, torch.bfloat16),
                       (torch.float32, torch.int64), (torch.bool, torch.int32)]:
            yield Case(op, [g.tensor([2, 3], da, "any", 1, 9), nonzero(g, [3], db, "any", 1, 9)], kw,
                       name=f"{tag} {da}/{db}")
            yield Case(op, [g.tensor([2, 3], da, "any", 1, 9), nonzero(g, [], db, "any", 1, 9)], kw,
                       name=f"{tag} {da}/0-dim {db}")
        # In place and out=.
        for da, db in [(torch.float32, torch.float32), (torch.float32, torch.int64),
                       (torch.int64, torch.float32), (torch.int32, torch.int64),
                       (torch.bfloat16, torch.float32), (torch.float16, torch.float16)]:
            yield Case(inplace_op, [g.tensor([3, 4], da, "contiguous", -20, 20),
                                    nonzero(g, [4], db, "any", 1, 9)], kw,
                       name=f"{inplace_op} {kw} {da} {db}")
        yield Case(inplace_op, [g.tensor([4]), nonzero(g, [3, 4], torch.float32)], kw,
                   name=f"{inplace_op} broadcast self")
        for src, dst in [(torch.float32, torch.float64), (torch.int64, torch.float32),
                         (torch.float32, torch.int64), (torch.int32, torch.int32),
                         (torch.int64, torch.int16)]:
            yield Case(out_op, [g.tensor([3, 4], src, "any", -20, 20), nonzero(g, [4], src)],
                       dict(kw, out=g.tensor([3, 4], dst, "transposed")),
                       name=f"{out_op} {kw} {src}->{dst}")
        yield Case(out_op, [g.tensor([3, 4], torch.float32, "transposed"), nonzero(g, [4], torch.float32)],
                   dict(kw, out=g.tensor([0], torch.float32)), name=f"{out_op} {kw} resize")
    # Scalar overloads (torch.<op> keeps a Python bool a bool; aten treats it as an int).
    for op, fn in [("remainder.Scalar", torch.remainder), ("fmod.Scalar", torch.fmod),
                   ("floor_divide.Scalar", torch.floor_divide)]:
        for dt in (torch.float32, torch.float16, torch.int32, torch.uint8, torch.bool, torch.bfloat16):
            for s in (3, -2.5, True, 0.0, 0):
                if op.startswith("floor_divide") and dt == torch.float16 and s == 0:
                    pass
                yield Case(op, [g.tensor([2, 5], dt, "any", -9, 9), s], ref=fn,
                           name=f"{op} {dt} {s!r}")
    for op in ("remainder_.Scalar", "fmod_.Scalar"):
        for dt, s in ((torch.float32, 2.5), (torch.int64, 3), (torch.int64, 2.5), (torch.int16, -4)):
            yield Case(op, [g.tensor([3, 4], dt, "contiguous", -9, 9), s], name=f"{op} {dt} {s}")
    for mode in ("trunc", "floor", None):
        for dt in (torch.float32, torch.int64, torch.uint8, torch.bfloat16):
            for s in (3, -2.5, 0):
                yield Case("div.Scalar_mode", [g.tensor([2, 5], dt, "any", -9, 9), s],
                           {"rounding_mode": mode}, name=f"div.Scalar_mode {mode} {dt} {s}")
    yield Case("div.Tensor_mode", [g.tensor([3]), g.tensor([3])], {"rounding_mode": "round"},
               name="div bad rounding mode")
    yield Case("div.Scalar_mode", [g.tensor([3]), 2], {"rounding_mode": "ceil"},
               name="div.Scalar bad rounding mode")


def pow_cases(g):
    for dt in ALL:
        for sa, sb in SHAPES:
            if dt.is_floating_point:
                a = g.tensor(sa, dt, "any", 0.1, 3)
                b = g.tensor(sb, dt, "any", -3, 3)
            else:
                a = g.tensor(sa, dt, "any", -5, 6)
                b = g.tensor(sb, dt, "any", 0 if dt == torch.uint8 else -2, 6)
            yield Case("pow.Tensor_Tensor", [a, b], name=f"pow {dt} {sa} {sb}")
        if dt.is_floating_point:
            yield Case("pow.Tensor_Tensor", [g.tensor([3, 4], dt, "any", -3, 3),
                                             g.tensor([4], dt, "any", -3, 3)],
                       name=f"pow {dt} negative bases")
    for dt in FLOATS:
        a, b = pairs(dt)
        yield Case("pow.Tensor_Tensor", [a, b], name=f"pow {dt} specials")
    for dt in (torch.int64, torch.int32, torch.int8, torch.uint8, torch.int16):
        a = torch.tensor([2, -2, 3, 1, -1, -1, 0, 0, 7, -3], dtype=torch.int64).to(dt)
        b = torch.tensor([62, 63, 41, -5, -5, -4, 0, -1, 30, 3], dtype=torch.int64).to(dt)
        yield Case("pow.Tensor_Tensor", [a, b], name=f"pow {dt} overflow and negative exponents")
    # Mixed dtypes and 0-dim / wrapped exponents.
    for da, db in [(torch.int32, torch.float32), (torch.float16, torch.float64),
                   (torch.uint8, torch.int8), (torch.bool, torch.int64), (torch.float32, torch.int64)]:
        yield Case("pow.Tensor_Tensor", [g.tensor([2, 3], da, "any", 0, 4),
                                         g.tensor([3], db, "any", 0, 3)], name=f"pow {da}**{db}")
        yield Case("pow.Tensor_Tensor", [g.tensor([2, 3], da, "any", 0, 4),
                                         g.tensor([], db, "any", 0, 3)], name=f"pow {da}**0-dim {db}")
    # Tensor ** number: the special exponents, dtypes, numpy's negative-integer rule.
    exps = [0, 1, 2, 3, -1, -2, 0.5, -0.5, 2.5, -1.5, 1.0, 0.0, 2.0, 3.0, -2.0, 1e300, True, False, 10, 0.3]
    for dt in ALL:
        for e in exps:
            base = g.tensor([3, 5], dt, "any", -4 if not dt.is_floating_point else 0.1, 4)
            # torch.pow keeps a Python bool exponent a bool; aten treats it as an int.
            yield Case("pow.Tensor_Scalar", [base, e], ref=torch.pow, name=f"pow {dt} ** {e!r}")
    for dt in FLOATS:
        s = torch.tensor(SPECIAL * 3, dtype=torch.float64).to(dt)
        for e in (0.5, -0.5, -1, 2, 3, -2, 2.5, 0, 1, -3, INF, NAN):
            yield Case("pow.Tensor_Scalar", [s, e], name=f"pow {dt} specials ** {e}")
    yield Case("pow.Tensor_Scalar", [g.tensor([3], torch.int8), 300], name="pow int8 exponent overflows")
    yield Case("pow.Tensor_Scalar", [g.tensor([3], torch.float16), 1e5], name="pow half exponent overflows")
    yield Case("pow.Tensor_Scalar", [g.tensor([3], torch.bfloat16), 1e39], name="pow bf16 exponent overflows")
    yield Case("pow.Tensor_Scalar", [g.tensor([3], torch.int64), -1], name="pow int ** negative int")
    yield Case("pow.Tensor_Scalar", [g.tensor([3], torch.bool), -1], name="pow bool ** negative int")
    yield Case("pow.Tensor_Scalar", [g.tensor([3], torch.int64), -1.0], name="pow int ** negative float")
    yield Case("pow.Tensor_Scalar", [g.tensor([0, 3]), 2.5])
    yield Case("pow.Tensor_Scalar", [g.tensor([]), 2.5])
    # number ** tensor.
    for dt in ALL:
        for base in (2, 2.5, 1, 1.0, -3, 0, True, False, 0.5):
            e = g.tensor([3, 4], dt, "any", -3 if dt != torch.uint8 else 0, 4)
            yield Case("pow.Scalar", [base, e], ref=torch.pow, name=f"pow {base!r} ** {dt}")
    yield Case("pow.Scalar", [2, g.tensor([4, 3], torch.float32, "transposed")],
               ref=torch.pow, check_strides=True, name="pow.Scalar output is row-major")
    yield Case("pow.Scalar", [2.0, g.tensor([0, 2])], ref=torch.pow)
    yield Case("pow.Scalar", [2.0, g.tensor([])], ref=torch.pow)
    # In place and out=.
    for da, db in [(torch.float32, torch.float32), (torch.float32, torch.int64),
                   (torch.int64, torch.float32), (torch.int32, torch.int64),
                   (torch.bfloat16, torch.bfloat16)]:
        yield Case("pow_.Tensor", [g.tensor([3, 4], da, "contiguous", 0.5, 3),
                                   g.tensor([4], db, "any", 0, 3)], name=f"pow_ {da} {db}")
    for da, e in [(torch.float32, 2), (torch.float32, 0.5), (torch.int64, 2), (torch.int64, 2.5),
                  (torch.float16, 3), (torch.bool, 2), (torch.bfloat16, -2), (torch.int32, 0)]:
        yield Case("pow_.Scalar", [g.tensor([3, 4], da, "transposed", 0.5, 3), e],
                   name=f"pow_.Scalar {da} {e}")
    for src, dst in [(torch.float32, torch.float64), (torch.int64, torch.float32),
                     (torch.float32, torch.int64), (torch.int32, torch.int64)]:
        yield Case("pow.Tensor_Tensor_out", [g.tensor([3, 4], src, "any", 0, 3),
                                             g.tensor([4], src, "any", 0, 3)],
                   {"out": g.tensor([3, 4], dst, "transposed")}, name=f"pow.out {src}->{dst}")
    yield Case("pow.Tensor_Tensor_out", [g.tensor([3, 4], torch.float32, "transposed"),
                                         g.tensor([4])], {"out": g.tensor([0])}, name="pow.out resize")
    # square: pow(x, 2).
    for dt in ALL:
        for shape in ([3, 4], [], [0, 2], [2, 3, 4]):
            lo, hi = (-20, 20) if not dt.is_floating_point else (-3, 3)
            yield Case("square", [g.tensor(shape, dt, "any", lo, hi)], name=f"square {dt} {shape}")
    for dt in FLOATS:
        yield Case("square", [torch.tensor(SPECIAL * 3, dtype=torch.float64).to(dt)],
                   name=f"square {dt} specials")
    for dt in (torch.float32, torch.int64, torch.bool, torch.float16, torch.uint8):
        yield Case("square_", [g.tensor([3, 4], dt, "contiguous")], name=f"square_ {dt}")
    for src, dst in [(torch.float32, torch.float32), (torch.float32, torch.float64),
                     (torch.int64, torch.int64), (torch.bool, torch.int64), (torch.bool, torch.bool),
                     (torch.int32, torch.int64)]:
        yield Case("square.out", [g.tensor([3, 4], src, "any")],
                   {"out": g.tensor([3, 4], dst, "transposed")}, name=f"square.out {src}->{dst}")


def misc_cases(g):
    tensor_ops = ["atan2", "maximum", "minimum", "logical_and", "logical_or", "logical_xor"]
    for op in tensor_ops:
        for dt in ALL:
            for sa, sb in SHAPES:
                ref = None
                if op == "atan2" and dt == torch.float16:
                    ref = in_float(A.atan2.default)
                yield Case(op, [g.tensor(sa, dt, "any"), g.tensor(sb, dt, "any")], ref=ref,
                           name=f"{op} {dt} {sa} {sb}")
        for dt in FLOATS:
            a, b = pairs(dt)
            ref = in_float(A.atan2.default) if op == "atan2" and dt == torch.float16 else None
            yield Case(op, [a, b], ref=ref, name=f"{op} {dt} specials")
        for da, db in [(torch.int32, torch.float16), (torch.uint8, torch.int8),
                       (torch.float16, torch.bfloat16), (torch.bool, torch.int64),
                       (torch.int64, torch.float64), (torch.float32, torch.float64),
                       (torch.bool, torch.float32)]:
            ref = None
            if op == "atan2" and torch.float16 in (da, db):
                ref = lambda a, b: torch.atan2(a.float(), b.float()).to(torch.result_type(a, b))
            yield Case(op, [g.tensor([2, 3], da, "any"), g.tensor([3], db, "any")], ref=ref,
                       name=f"{op} {da} {db}")
            yield Case(op, [g.tensor([2, 3], da, "any"), g.tensor([], db, "any")], ref=ref,
                       name=f"{op} {da} 0-dim {db}")
        for da, db in [(torch.float32, torch.float32), (torch.float32, torch.int64),
                       (torch.int64, torch.float32), (torch.int32, torch.int64),
                       (torch.bool, torch.bool), (torch.float16, torch.float32)]:
            ref = None
            if op == "atan2" and da == torch.float16:
                continue
            ref = inplace_ref(getattr(torch, op)) if op in ("maximum", "minimum") else None
            yield Case(f"{op}_", [g.tensor([3, 4], da, "contiguous"), g.tensor([4], db, "any")],
                       ref=ref, name=f"{op}_ {da} {db}")
        ref = inplace_ref(getattr(torch, op)) if op in ("maximum", "minimum") else None
        yield Case(f"{op}_", [g.tensor([4]), g.tensor([3, 4])], ref=ref,
                   name=f"{op}_ broadcast self")
        for src, dst in [(torch.float32, torch.float64), (torch.int64, torch.float32),
                         (torch.float32, torch.int64), (torch.int32, torch.int32),
                         (torch.float32, torch.bool), (torch.bool, torch.float32)]:
            yield Case(f"{op}.out", [g.tensor([3, 4], src, "any"), g.tensor([4], src, "any")],
                       {"out": g.tensor([3, 4], dst, "transposed")}, name=f"{op}.out {src}->{dst}")
        yield Case(f"{op}.out", [g.tensor([3, 4], torch.float32, "transposed"), g.tensor([4])],
                   {"out": g.tensor([0], torch.float32)}, name=f"{op}.out resize")
    # bitwise: Tensor and Scalar forms.
    for name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
        for dt in ALL:
            for sa, sb in SHAPES:
                yield Case(f"{name}.Tensor", [g.tensor(sa, dt, "any", -100, 100),
                                              g.tensor(sb, dt, "any", -100, 100)],
                           name=f"{name} {dt} {sa} {sb}")
        for da, db in [(torch.int32, torch.bool), (torch.uint8, torch.int8), (torch.bool, torch.bool),
                       (torch.int64, torch.int16), (torch.int32, torch.float32)]:
            yield Case(f"{name}.Tensor", [g.tensor([2, 3], da, "any", -100, 100),
                                          g.tensor([3], db, "any", -100, 100)], name=f"{name} {da} {db}")
            yield Case(f"{name}.Tensor", [g.tensor([2, 3], da, "any", -100, 100),
                                          g.tensor([], db, "any", -100, 100)], name=f"{name} {da} 0-dim {db}")
        for dt in (torch.int32, torch.uint8, torch.bool, torch.float32, torch.int64):
            for s in (5, -1, True, 2.5):
                yield Case(f"{name}.Scalar", [g.tensor([2, 5], dt, "any", -100, 100), s],
                           ref=getattr(torch, name), name=f"{name}.Scalar {dt} {s!r}")
        for dt, s in ((torch.int32, 6), (torch.bool, True), (torch.int64, 2.5), (torch.uint8, 300)):
            yield Case(f"{name}_.Scalar", [g.tensor([3, 4], dt, "contiguous", 0, 100), s],
                       ref=lambda t, v, n=name: getattr(t, n + "_")(v), name=f"{name}_.Scalar {dt} {s}")
        for da, db in ((torch.int32, torch.int32), (torch.int32, torch.int64), (torch.bool, torch.int32),
                       (torch.int16, torch.bool)):
            yield Case(f"{name}_.Tensor", [g.tensor([3, 4], da, "contiguous", -100, 100),
                                           g.tensor([4], db, "any", -100, 100)], name=f"{name}_ {da} {db}")
        for src, dst in ((torch.int32, torch.int64), (torch.int64, torch.int32), (torch.int64, torch.float32),
                         (torch.bool, torch.bool), (torch.bool, torch.int8)):
            yield Case(f"{name}.Tensor_out", [g.tensor([3, 4], src, "any", -100, 100),
                                              g.tensor([4], src, "any", -100, 100)],
                       {"out": g.tensor([3, 4], dst, "transposed")}, name=f"{name}.out {src}->{dst}")


def layout_cases(g):
    """Output layouts follow PyTorch's rules for broadcast and permuted inputs."""
    combos = [("transposed", "contiguous"), ("contiguous", "transposed"), ("transposed", "transposed"),
              ("expanded", "transposed"), ("strided", "offset")]
    for op in ("remainder.Tensor", "atan2", "maximum", "logical_xor", "pow.Tensor_Tensor"):
        for la, lb in combos:
            a = g.tensor([3, 4], torch.float32, la, 0.5, 3)
            b = g.tensor([3, 4], torch.float32, lb, 0.5, 3)
            yield Case(op, [a, b], check_strides=True, name=f"{op} layout {la} {lb}")
        a = g.tensor([4, 3], torch.float32, "contiguous", 0.5, 3).t()
        yield Case(op, [a, g.tensor([4], torch.float32, "contiguous", 0.5, 3)], check_strides=True,
                   name=f"{op} layout transposed with row")
        yield Case(op, [g.tensor([3, 1], torch.float32, "contiguous", 0.5, 3), a], check_strides=True,
                   name=f"{op} layout column with transposed")
        yield Case(op, [g.tensor([], torch.float32, low=0.5, high=3), a], check_strides=True,
                   name=f"{op} layout 0-dim with transposed")
    a = g.tensor([2, 3, 4], torch.int64, "contiguous", 1, 9).permute(2, 0, 1)
    yield Case("div.Tensor_mode", [a, g.tensor([], torch.int64, low=1, high=5)], {"rounding_mode": "floor"},
               check_strides=True, name="div floor layout permuted")
    yield Case("pow.Tensor_Scalar", [a, 2], check_strides=True, name="pow scalar layout permuted")
    yield Case("pow.Tensor_Scalar", [a, 0], check_strides=True, name="pow scalar 0 layout permuted")


def exact_cases(g):
    """Bit-exact agreement (rtol = atol = 0) on tensors long enough for torch's
    vectorized loops, where kiln rounds the steps torch rounds."""
    for dt in (torch.bfloat16, torch.float16, torch.float32, torch.float64):
        a = g.tensor([203], dt, "contiguous", -300, 300)
        b = nonzero(g, [203], dt, "contiguous", -4, 4)
        for op, kw in (("div.Tensor_mode", {"rounding_mode": "trunc"}),
                       ("div.Tensor_mode", {"rounding_mode": "floor"}), ("floor_divide", {}),
                       ("remainder.Tensor", {}), ("fmod.Tensor", {}), ("maximum", {}),
                       ("minimum", {})):
            yield Case(op, [a, b], kw, rtol=0.0, atol=0.0, name=f"{op} {kw} {dt} exact")
        for e in (2, 3, -2, 0, 1):
            yield Case("pow.Tensor_Scalar", [g.tensor([203], dt, "contiguous", -4, 4), e],
                       rtol=0.0, atol=0.0, name=f"pow {dt} ** {e} exact")
    for dt in INTS:
        a = g.tensor([203], dt, "contiguous", -120, 120)
        b = nonzero(g, [203], dt, "contiguous", -9, 9)
        for op, kw in (("div.Tensor_mode", {"rounding_mode": "floor"}), ("remainder.Tensor", {}),
                       ("pow.Tensor_Tensor", {}), ("bitwise_xor.Tensor", {})):
            yield Case(op, [a, b], kw, name=f"{op} {kw} {dt} long")


def sign_grid_cases(g):
    """Integer division on every pair of signs and magnitudes around the
    divisor (a grid of -7..7), its transpose, a 0-dim divisor (zero, negative,
    float) and an empty dividend; the extremes of each dtype under abs, neg and
    division by -1 (int32 and int64 minimum by -1 is undefined: left out)."""
    grid = torch.tensor([-7, -6, -5, -1, 0, 1, 5, 6, 7])
    a_grid = grid.repeat_interleave(9).reshape(9, 9)
    b_grid = grid.repeat(9).reshape(9, 9)
    ops = [("div.Tensor_mode", {"rounding_mode": "floor"}),
           ("div.Tensor_mode", {"rounding_mode": "trunc"}), ("floor_divide", {}),
           ("remainder.Tensor", {}), ("fmod.Tensor", {})]
    for dt in [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]:
        a, b = a_grid.to(dt), b_grid.to(dt)
        b_nz = torch.where(b == 0, torch.ones_like(b) * 3, b)
        for op, kw in ops:
            name = f"{op} {kw.get('rounding_mode', '')} {dt}"
            yield Case(op, [a, b_nz], kw, name=f"{name} sign grid")
            yield Case(op, [a.t(), b_nz.t()], kw, name=f"{name} sign grid transposed")
            yield Case(op, [a, b], kw, name=f"{name} sign grid by zero")
            yield Case(op, [a, torch.tensor(0, dtype=dt)], kw, name=f"{name} by 0-dim zero")
            yield Case(op, [a, torch.tensor(-3, dtype=dt)], kw, name=f"{name} by 0-dim -3")
            yield Case(op, [a, torch.tensor(2.5)], kw, name=f"{name} by 0-dim float")
            yield Case(op, [a[:0], torch.tensor(0, dtype=dt)], kw, name=f"{name} empty by zero")
        lo = 0 if dt == torch.uint8 else torch.iinfo(dt).min
        ext = torch.tensor([lo, lo + 1, -1 if lo else 2, 0, 1, torch.iinfo(dt).max], dtype=dt)
        for op in ("abs", "neg", "sign", "bitwise_not", "square"):
            yield Case(op, [ext], name=f"{op} {dt} extremes")
        if dt in (torch.int64, torch.int32):
            ext = ext[1:]
        for op, kw in ops:
            yield Case(op, [ext, torch.tensor(-1, dtype=dt)], kw, name=f"{op} {kw} {dt} extremes by -1")


def cases(g):
    yield from division_cases(g)
    yield from sign_grid_cases(g)
    yield from pow_cases(g)
    yield from misc_cases(g)
    yield from layout_cases(g)
    yield from exact_cases(g)
