"""where, lerp, addcmul, addcdiv and clamp: every form, dtypes, three-way broadcasts,
0-dim, empty, mixed dtypes, special values, in place and out=.

Half: torch 1.13's CPU lerp, addcmul, addcdiv and clamp lack Half; kiln computes
Half in float and rounds once, so those cases take that reference (see unary.py).
"""

import torch

from generate import ALL, FLOATS, INTS, Case

A = torch.ops.aten
NAN, INF = float("nan"), float("inf")

SHAPES3 = [([3, 4], [3, 4], [3, 4]), ([2, 3, 4], [4], [3, 1]), ([3, 1], [1, 5], []),
           ([], [2, 3], [2, 1]), ([0, 3], [3], [1]), ([], [], []), ([4], [2, 1, 4], [4])]
SPECIAL = [NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 1e30, 0.5]


def in_float(fn):
    """fn on float32 copies of the tensor arguments, the result in the inputs' common dtype."""
    def ref(*args, **kwargs):
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        dt = tensors[0].dtype
        for t in tensors[1:]:
            dt = torch.promote_types(dt, t.dtype)
        up = [a.float() if isinstance(a, torch.Tensor) else a for a in args]
        out = kwargs.pop("out", None)
        r = fn(*up, **kwargs).to(dt)
        if out is not None:
            out.resize_(r.shape)
            return out.copy_(r)
        return r
    return ref


def in_float_(fn):
    """The in-place form of in_float: fn's result written back into the first argument."""
    def ref(self, *args, **kwargs):
        r = in_float(fn)(self, *args, **kwargs)
        if r.shape != self.shape:
            raise RuntimeError("output shape doesn't match the broadcast shape")
        return self.copy_(r)
    return ref


def where_cases(g):
    for dt in ALL:
        for sc, sa, sb in SHAPES3:
            cond = g.tensor(sc, torch.bool, "any")
            yield Case("where.self", [cond, g.tensor(sa, dt, "any"), g.tensor(sb, dt, "any")],
                       name=f"where {dt} {sc} {sa} {sb}")
        yield Case("where.self", [g.tensor([40], torch.bool, "contiguous"),
                                  g.tensor([40], dt, "contiguous"), g.tensor([], dt)],
                   name=f"where {dt} scalar other")
    for cdt in (torch.uint8, torch.int64, torch.float32, torch.int8):
        yield Case("where.self", [g.tensor([3, 4], cdt, "any", 0, 2), g.tensor([3, 4]),
                                  g.tensor([4])], name=f"where condition {cdt}")
    for da, db in [(torch.float32, torch.int64), (torch.float16, torch.float32),
                   (torch.int32, torch.uint8), (torch.bool, torch.int8), (torch.bfloat16, torch.float16),
                   (torch.float64, torch.float16)]:
        cond = g.tensor([2, 3], torch.bool, "any")
        yield Case("where.self", [cond, g.tensor([2, 3], da, "any"), g.tensor([3], db, "any")],
                   name=f"where {da} {db}")
        yield Case("where.self", [cond, g.tensor([], da), g.tensor([2, 3], db, "any")],
                   name=f"where 0-dim {da} {db}")
    s = torch.tensor(SPECIAL)
    yield Case("where.self", [s > 0, s, -s], name="where specials")
    for dst in (torch.float32, torch.float64, torch.int64):
        yield Case("where.self_out", [g.tensor([3, 4], torch.bool, "any"), g.tensor([3, 4]),
                                      g.tensor([4])], {"out": g.tensor([3, 4], dst, "transposed")},
                   name=f"where.self_out float32 into {dst}")
    yield Case("where.self_out", [g.tensor([3, 4], torch.bool), g.tensor([3, 4], torch.int32),
                                  g.tensor([4], torch.int32)], {"out": g.tensor([0], torch.int32)},
               name="where.self_out resize")
    yield Case("where.self", [g.tensor([3, 4], torch.bool), g.tensor([3, 4]), g.tensor([5])],
               name="where bad broadcast")


def lerp_cases(g):
    weights = [0.3, 0.7, -0.2, 1.3, 0.0, 1.0, 0.5, 0.4999, NAN, INF, 2]
    for dt in ALL:
        for sa, sb, _ in SHAPES3:
            for w in (0.3, 0.75):
                ref = in_float(A.lerp.Scalar) if dt == torch.float16 else None
                yield Case("lerp.Scalar", [g.tensor(sa, dt, "any"), g.tensor(sb, dt, "any"), w],
                           ref=ref, name=f"lerp.Scalar {dt} {sa} {sb} {w}")
        if dt.is_floating_point:
            for sa, sb, sw in SHAPES3:
                ref = in_float(A.lerp.Tensor) if dt == torch.float16 else None
                yield Case("lerp.Tensor", [g.tensor(sa, dt, "any"), g.tensor(sb, dt, "any"),
                                           g.tensor(sw, dt, "any", -0.5, 1.5)], ref=ref,
                           name=f"lerp.Tensor {dt} {sa} {sb} {sw}")
    for dt in FLOATS:
        ref = in_float(A.lerp.Scalar) if dt == torch.float16 else None
        for w in weights:
            yield Case("lerp.Scalar", [g.tensor([40], dt, "contiguous"),
                                       g.tensor([40], dt, "contiguous"), w], ref=ref,
                       name=f"lerp.Scalar {dt} weight {w}")
        a = torch.tensor(SPECIAL * len(SPECIAL), dtype=torch.float64).to(dt)
        b = torch.tensor([x for x in SPECIAL for _ in SPECIAL], dtype=torch.float64).to(dt)
        yield Case("lerp.Scalar", [a, b, 0.3], ref=ref, name=f"lerp.Scalar {dt} specials")
        reft = in_float(A.lerp.Tensor) if dt == torch.float16 else None
        yield Case("lerp.Tensor", [a, b, torch.full_like(a, 0.7)], ref=reft,
                   name=f"lerp.Tensor {dt} specials")
        yield Case("lerp.Tensor", [g.tensor([11], dt), g.tensor([11], dt),
                                   torch.tensor(weights, dtype=torch.float64).to(dt)], ref=reft,
                   name=f"lerp.Tensor {dt} weights")
    # dtype rules.
    yield Case("lerp.Scalar", [g.tensor([3]), g.tensor([3], torch.float64), 0.5], name="lerp end dtype")
    yield Case("lerp.Tensor", [g.tensor([3]), g.tensor([3]), g.tensor([], torch.float64)],
               name="lerp weight dtype")
    yield Case("lerp.Scalar", [g.tensor([3], torch.int64), g.tensor([3], torch.int64), 1],
               name="lerp int")
    yield Case("lerp.Scalar", [g.tensor([3]), g.tensor([3]), 1e300], name="lerp weight overflows float")
    # In place and out=.
    for dt in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        refs = in_float_(A.lerp.Scalar) if dt == torch.float16 else None
        reft = in_float_(A.lerp.Tensor) if dt == torch.float16 else None
        yield Case("lerp_.Scalar", [g.tensor([3, 4], dt, "transposed"), g.tensor([4], dt), 0.3],
                   ref=refs, name=f"lerp_.Scalar {dt}")
        yield Case("lerp_.Tensor", [g.tensor([3, 4], dt, "strided"), g.tensor([4], dt),
                                    g.tensor([3, 1], dt)], ref=reft, name=f"lerp_.Tensor {dt}")
    yield Case("lerp_.Scalar", [g.tensor([4]), g.tensor([3, 4]), 0.3], name="lerp_ broadcast self")
    for dst in (torch.float32, torch.float64, torch.int64, torch.float16):
        yield Case("lerp.Scalar_out", [g.tensor([3, 4]), g.tensor([4]), 0.6],
                   {"out": g.tensor([3, 4], dst, "transposed")}, name=f"lerp.Scalar_out into {dst}")
    yield Case("lerp.Scalar_out", [g.tensor([3, 4]), g.tensor([4]), 0.6], {"out": g.tensor([0])},
               name="lerp.Scalar_out resize")


def addc_cases(g):
    for op in ("addcmul", "addcdiv"):
        for dt in ALL:
            for sa, sb, sc in SHAPES3:
                for v in (1, 0.5):
                    lo, hi = (-20, 20) if not dt.is_floating_point else (-3, 3)
                    den = g.tensor(sc, dt, "any", lo, hi)
                    if dt.is_floating_point:
                        den = torch.where(den.abs() < 0.25, torch.full_like(den, 0.5), den)
                    ref = in_float(getattr(A, op).default) if dt == torch.float16 else None
                    yield Case(op, [g.tensor(sa, dt, "any", lo, hi), g.tensor(sb, dt, "any", lo, hi),
                                    den], {"value": v}, ref=ref,
                               name=f"{op} {dt} {sa} {sb} {sc} value={v}")
        for dt in FLOATS:
            ref = in_float(getattr(A, op).default) if dt == torch.float16 else None
            for v in (2, -1, 0.3, 0, True, 1e-3):
                yield Case(op, [g.tensor([40], dt), g.tensor([40], dt), g.tensor([40], dt, "any", 0.5, 3)],
                           {"value": v}, ref=ref, name=f"{op} {dt} value={v!r}")
            s = torch.tensor(SPECIAL * 2, dtype=torch.float64).to(dt)
            yield Case(op, [s, s.flip(0), s.roll(3)], ref=ref, name=f"{op} {dt} specials")
        for dt in INTS:
            yield Case(op, [g.tensor([3, 4], dt, "any", -50, 50), g.tensor([4], dt, "any", -50, 50),
                            g.tensor([3, 1], dt, "any", 1, 50)], {"value": 3}, name=f"{op} {dt} value=3")
        yield Case(op, [g.tensor([3], torch.int8), g.tensor([3], torch.int8), g.tensor([3], torch.int8)],
                   {"value": 1000}, name=f"{op} int8 value overflows")
        yield Case(op, [g.tensor([3]), g.tensor([3]), g.tensor([3])], {"value": 1e300},
                   name=f"{op} float value overflows")
        # Mixed dtypes.
        for da, db, dc in [(torch.float32, torch.float64, torch.float32),
                           (torch.int64, torch.float32, torch.float32),
                           (torch.float32, torch.int64, torch.int64),
                           (torch.float16, torch.float32, torch.bfloat16),
                           (torch.int32, torch.int64, torch.int8),
                           (torch.float32, torch.int64, torch.float32)]:
            yield Case(op, [g.tensor([2, 3], da, "any", 1, 5), g.tensor([3], db, "any", 1, 5),
                            g.tensor([], dc, "any", 1, 5)], name=f"{op} {da} {db} {dc}")
        # In place and out=.
        for da, db in [(torch.float32, torch.float32), (torch.float64, torch.float32),
                       (torch.float32, torch.float64), (torch.int64, torch.int64),
                       (torch.bfloat16, torch.bfloat16)]:
            yield Case(f"{op}_", [g.tensor([3, 4], da, "transposed", 1, 5),
                                  g.tensor([4], db, "any", 1, 5), g.tensor([3, 1], db, "any", 1, 5)],
                       {"value": 2}, name=f"{op}_ {da} {db}")
        yield Case(f"{op}_", [g.tensor([4]), g.tensor([3, 4]), g.tensor([4], torch.float32, "any", 1, 2)],
                   name=f"{op}_ broadcast self")
        for src, dst in [(torch.float32, torch.float32), (torch.float32, torch.float64),
                         (torch.int64, torch.int64), (torch.float32, torch.int64)]:
            yield Case(f"{op}.out", [g.tensor([3, 4], src, "any", 1, 5), g.tensor([4], src, "any", 1, 5),
                                     g.tensor([4], src, "any", 1, 5)],
                       {"out": g.tensor([3, 4], dst, "transposed")}, name=f"{op}.out {src}->{dst}")
        yield Case(f"{op}.out", [g.tensor([3, 4]), g.tensor([4]), g.tensor([4], torch.float32, "any", 1, 2)],
                   {"out": g.tensor([0])}, name=f"{op}.out resize")


def clamp_cases(g):
    bounds = [(-1, 1), (0.5, None), (None, 0.5), (2, -1), (-1.5, 1.5), (True, None), (0, 300),
              (NAN, 1.0), (NAN, None), (None, NAN), (-1000, 50), (-1, None), (1e39, None)]
    for dt in ALL:
        for lo, hi in bounds:
            x = g.tensor([3, 5], dt, "any", -4 if dt != torch.uint8 else 0, 4 if dt != torch.uint8 else 250)
            # torch.clamp keeps a Python bool bound a bool; aten treats it as an int.
            ref = torch.clamp
            if dt == torch.float16:
                ref = in_float(torch.clamp)
            yield Case("clamp", [x, lo, hi], ref=ref, name=f"clamp {dt} [{lo}, {hi}]")
        for shape in ([], [0, 3], [2, 3, 4]):
            ref = in_float(A.clamp.default) if dt == torch.float16 else None
            yield Case("clamp", [g.tensor(shape, dt, "any", -4, 4), -1, 2], ref=ref,
                       name=f"clamp {dt} {shape}")
    for dt in FLOATS:
        s = torch.tensor(SPECIAL * 4, dtype=torch.float64).to(dt)
        ref = in_float(A.clamp.default) if dt == torch.float16 else None
        yield Case("clamp", [s, -2.0, 2.0], ref=ref, name=f"clamp {dt} specials")
        yield Case("clamp", [s, -INF, 0.0], ref=ref, name=f"clamp {dt} specials -inf")
    yield Case("clamp", [g.tensor([3])], name="clamp no bounds")
    yield Case("clamp", [g.tensor([3]), None, None], name="clamp None bounds")
    # Tensor bounds.
    for dt in ALL:
        for sa, sb, sc in SHAPES3:
            lo = g.tensor(sb, dt, "any", -3, 0)
            hi = g.tensor(sc, dt, "any", 0, 3)
            ref = in_float(A.clamp.Tensor) if dt == torch.float16 else None
            x = g.tensor(sa, dt, "any", -4, 4)
            yield Case("clamp.Tensor", [x, lo, hi], ref=ref, name=f"clamp.Tensor {dt} {sa} {sb} {sc}")
            yield Case("clamp.Tensor", [x, lo, None], ref=ref, name=f"clamp.Tensor min {dt} {sa} {sb}")
            yield Case("clamp.Tensor", [x, None, hi], ref=ref, name=f"clamp.Tensor max {dt} {sa} {sc}")
    for dt in FLOATS:
        ref = in_float(A.clamp.Tensor) if dt == torch.float16 else None
        a = torch.tensor(SPECIAL * len(SPECIAL), dtype=torch.float64).to(dt)
        b = torch.tensor([x for x in SPECIAL for _ in SPECIAL], dtype=torch.float64).to(dt)
        yield Case("clamp.Tensor", [a, b, b.flip(0)], ref=ref, name=f"clamp.Tensor {dt} specials")
        yield Case("clamp.Tensor", [a, b, None], ref=ref, name=f"clamp.Tensor min {dt} specials")
        yield Case("clamp.Tensor", [a, None, b], ref=ref, name=f"clamp.Tensor max {dt} specials")
        yield Case("clamp.Tensor", [a, b.abs(), -b.abs()], ref=ref, name=f"clamp.Tensor {dt} min>max")
    for da, db in [(torch.int32, torch.float32), (torch.float16, torch.float32), (torch.uint8, torch.int8),
                   (torch.bool, torch.int64), (torch.float32, torch.float64)]:
        yield Case("clamp.Tensor", [g.tensor([2, 3], da, "any", 0, 4), g.tensor([3], db, "any", 0, 2), None],
                   name=f"clamp.Tensor {da} min {db}")
        yield Case("clamp.Tensor", [g.tensor([2, 3], da, "any", 0, 4), None, g.tensor([], db, "any", 1, 3)],
                   name=f"clamp.Tensor {da} max 0-dim {db}")
    yield Case("clamp.Tensor", [g.tensor([3])], name="clamp.Tensor no bounds")
    # In place and out=.
    for dt, lo, hi in [(torch.float32, -1, 1), (torch.int64, -1, 1), (torch.int64, 0.5, None),
                       (torch.bfloat16, -0.3, 0.3), (torch.bool, 0, 1), (torch.uint8, 3, 7)]:
        yield Case("clamp_", [g.tensor([3, 4], dt, "transposed", 0, 9), lo, hi], ref=None,
                   name=f"clamp_ {dt} [{lo}, {hi}]")
    for dt in (torch.float32, torch.int32, torch.float64):
        yield Case("clamp_.Tensor", [g.tensor([3, 4], dt, "strided", -4, 4), g.tensor([4], dt, "any", -3, 0),
                                     g.tensor([3, 1], dt, "any", 0, 3)], name=f"clamp_.Tensor {dt}")
    yield Case("clamp_.Tensor", [g.tensor([3, 4], torch.int32), g.tensor([4], torch.float32), None],
               name="clamp_.Tensor int with float bound")
    yield Case("clamp_.Tensor", [g.tensor([4]), g.tensor([3, 4]), None], name="clamp_.Tensor broadcast self")
    for src, dst in [(torch.float32, torch.float32), (torch.float32, torch.float64),
                     (torch.int64, torch.int64), (torch.int64, torch.float32), (torch.bool, torch.int64)]:
        yield Case("clamp.out", [g.tensor([3, 4], src, "any", -4, 4), -1, 2],
                   {"out": g.tensor([3, 4], dst, "transposed")}, name=f"clamp.out {src}->{dst}")
        yield Case("clamp.Tensor_out", [g.tensor([3, 4], src, "any", -4, 4), g.tensor([4], src, "any", -3, 0),
                                        None], {"out": g.tensor([3, 4], dst, "transposed")},
                   name=f"clamp.Tensor_out {src}->{dst}")
    yield Case("clamp.out", [g.tensor([3, 4]), -1, 2], {"out": g.tensor([0])}, name="clamp.out resize")
    yield Case("clamp.Tensor_out", [g.tensor([3, 4]), None, g.tensor([4])], {"out": g.tensor([0])},
               name="clamp.Tensor_out resize")


def layout_cases(g):
    t = g.tensor([4, 3], torch.float32, "contiguous").t()
    for cond_layout in ("contiguous", "transposed", "expanded"):
        cond = g.tensor([3, 4], torch.bool, cond_layout)
        yield Case("where.self", [cond, t, g.tensor([3, 4])], check_strides=True,
                   name=f"where layout cond {cond_layout}")
        yield Case("where.self", [cond, g.tensor([4]), g.tensor([3, 1])], check_strides=True,
                   name=f"where layout broadcast cond {cond_layout}")
    yield Case("lerp.Scalar", [t, g.tensor([3, 4]), 0.3], check_strides=True, name="lerp layout")
    yield Case("addcmul", [g.tensor([4]), t, g.tensor([3, 1])], check_strides=True, name="addcmul layout")
    yield Case("clamp", [t, -1, 1], check_strides=True, name="clamp layout")
    yield Case("clamp.Tensor", [g.tensor([3, 4]), t, None], check_strides=True, name="clamp.Tensor layout")
    yield Case("clamp", [g.tensor([2, 3, 4], torch.int32, "contiguous").permute(1, 2, 0), 0.5, None],
               check_strides=True, name="clamp promoted layout")


def cases(g):
    yield from where_cases(g)
    yield from lerp_cases(g)
    yield from addc_cases(g)
    yield from clamp_cases(g)
    yield from layout_cases(g)
