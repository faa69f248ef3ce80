"""torch.nn.functional's activations: leaky_relu, elu, hardtanh, hardsigmoid, hardswish,
mish, log_sigmoid, and dropout where it draws nothing (train false, p 0 or 1, bad p).

Every form (functional, in place, out=), every dtype (integers and bool are refused, but
by hardtanh, which is clamp), the generator's layouts, 0-dim, empty, special values.
Half, and mish's BFloat16: torch 1.13's CPU kernels lack them (unary.py's docstring);
those cases take the op in float32 rounded once, as kiln computes them.
"""

import torch

from generate import ALL, FLOATS, Case

A = torch.ops.aten
NAN, INF = float("nan"), float("inf")
SHAPES = [[3, 4], [2, 3, 5], [], [0, 3], [37]]
SPECIALS = [NAN, -NAN, INF, -INF, 0.0, -0.0, 1e-40, 1e-8, 0.5, -0.5, 2.5, -2.5, -3.0, 3.0, 6.0,
            -6.0, 1e30, -1e30, 88.0, -104.0, -1.0, 1.0]


def specials(dtype, n=41):
    """A contiguous tensor cycling through special values, long enough for torch's
    vectorized body and its scalar tail."""
    vals = (SPECIALS * (n // len(SPECIALS) + 1))[:n]
    return torch.tensor(vals, dtype=torch.float64).to(dtype)


def in_float(fn):
    """fn applied in float32, the result rounded to the input's 16-bit dtype."""
    def ref(x, *args, **kwargs):
        return fn(x.float(), *args, **kwargs).to(x.dtype)
    return ref

# op -> (keyword arguments of a non-default call, torch's CPU dtypes beyond float32/64)
OPS = {
    "leaky_relu": ({"negative_slope": 0.2}, {torch.bfloat16}),
    "elu": ({"alpha": 1.5, "scale": 0.5, "input_scale": 2.0}, {torch.bfloat16}),
    "hardtanh": ({"min_val": -0.5, "max_val": 2.0}, {torch.bfloat16}),
    "hardsigmoid": ({}, {torch.bfloat16}),
    "hardswish": ({}, {torch.bfloat16}),
    "mish": ({}, set()),
    "log_sigmoid": ({}, {torch.bfloat16}),
}
HAS_INPLACE = {op for op in OPS if op != "log_sigmoid"}


def ref_for(op, dt):
    """The reference for `op` on dtype `dt`: torch's own unless its CPU kernel lacks dt."""
    if dt in (torch.float32, torch.float64) or dt in OPS[op][1] or not dt.is_floating_point:
        return None
    return in_float(getattr(A, op).default)


def inplace_ref(op):
    fn = getattr(A, op).default

    def ref(x, *args, **kwargs):
        return x.copy_(fn(x.float(), *args, **kwargs))
    return ref


def activation_cases(g):
    for op, (kwargs, _) in OPS.items():
        for dt in ALL:
            for shape in SHAPES:
                x = g.tensor(shape, dt, "any", -6.0, 6.0)
                yield Case(op, [x], ref=ref_for(op, dt), name=f"{op} {dt} {shape}")
            if kwargs:
                x = g.tensor([4, 5], dt, "any", -6.0, 6.0)
                yield Case(op, [x], kwargs, ref=ref_for(op, dt), name=f"{op} {dt} arguments")
        for dt in FLOATS:
            yield Case(op, [specials(dt)], ref=ref_for(op, dt), name=f"{op} {dt} specials")
        for layout in ("contiguous", "transposed", "strided", "offset"):
            x = g.tensor([3, 4], torch.float32, layout, -6.0, 6.0)
            if op in HAS_INPLACE:
                yield Case(f"{op}_", [x], kwargs, name=f"{op}_ {layout}")
        if op in HAS_INPLACE:
            for dt in (torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.bool):
                x = g.tensor([3, 4], dt, "any", -6.0, 6.0)
                ref = None
                if ref_for(op, dt) is not None and dt.is_floating_point:
                    ref = inplace_ref(op)
                yield Case(f"{op}_", [x], ref=ref, name=f"{op}_ {dt}")
            yield Case(f"{op}_", [g.tensor([3, 1]).expand(3, 4)],
                       name=f"{op}_ into an expanded tensor")
        for src, dst in ((torch.float32, torch.float32), (torch.float64, torch.float64),
                         (torch.float32, torch.float64), (torch.int64, torch.float32)):
            # torch's log_sigmoid.out lays a resized out= differently from its
            # TensorIterator ops (a deprecated resize); kiln lays it as those.
            if op != "log_sigmoid" or src != dst:
                yield Case(f"{op}.out", [g.tensor([3, 4], src, "any", -6.0, 6.0)],
                           {"out": g.tensor([4, 3], dst, "transposed")},
                           name=f"{op}.out {src}->{dst} (resized)")
            else:
                g.tensor([3, 4], src, "any", -6.0, 6.0)  # keeps the generator's sequence
                g.tensor([4, 3], dst, "transposed")
            yield Case(f"{op}.out", [g.tensor([3, 4], src, "any", -6.0, 6.0)],
                       {"out": g.tensor([3, 4], dst, "transposed")}, name=f"{op}.out {src}->{dst}")
        yield Case(f"{op}.out", [g.tensor([3], torch.float32)],
                   {"out": g.tensor([1], torch.float32).expand(3)}, name=f"{op}.out overlapping")
    # Edges of the arguments: zero and negative slopes, alpha 0, bounds crossing.
    x = g.tensor([5, 6], torch.float32, "any", -4.0, 4.0)
    for slope in (0.0, -0.5, 3.0):
        yield Case("leaky_relu", [x, slope], name=f"leaky_relu slope {slope}")
    for alpha, scale, input_scale in ((0.0, 1.0, 1.0), (1.0, 2.0, 0.5), (-1.0, 1.0, 30.0)):
        yield Case("elu", [x, alpha, scale, input_scale], name=f"elu {alpha} {scale} {input_scale}")
    yield Case("hardtanh", [x, 1.0, -1.0], name="hardtanh min above max")
    for dt in (torch.int64, torch.int32, torch.int8):
        xi = g.tensor([4, 5], dt, "any", -10, 10)
        yield Case("hardtanh", [xi, -2.5, 3.7], name=f"hardtanh {dt} truncated bounds")
        yield Case("hardtanh_", [g.tensor([4, 5], dt, "contiguous", -10, 10), -3, 4],
                   name=f"hardtanh_ {dt}")
    yield Case("hardtanh", [g.tensor([4], torch.uint8, "any", 0, 10), 0, 5],
               name="hardtanh uint8 non-negative bounds")
    yield Case("hardtanh", [g.tensor([4], torch.uint8, "any", 0, 10)],
               name="hardtanh uint8 negative bound")
    # Far tails: mish and log_sigmoid where exp overflows or underflows.
    for dt in (torch.float32, torch.float64):
        far = torch.tensor([-1000.0, -100.0, -30.0, -1e-3, 1e-3, 30.0, 100.0, 1000.0], dtype=dt)
        yield Case("mish", [far], name=f"mish {dt} tails")
        yield Case("log_sigmoid", [far], name=f"log_sigmoid {dt} tails")


def dropout_cases(g):
    for dt in ALL:
        x = g.tensor([3, 4], dt, "any")
        yield Case("dropout", [x, 0.5, False], name=f"dropout {dt} eval")
    for dt in FLOATS:
        x = g.tensor([3, 4], dt, "any")
        yield Case("dropout", [x, 0.0, True], name=f"dropout {dt} p 0")
        yield Case("dropout", [x, 1.0, True], name=f"dropout {dt} p 1")
    yield Case("dropout", [specials(torch.float32), 1.0, True], name="dropout p 1 specials")
    yield Case("dropout", [g.tensor([0, 3]), 0.5, True], name="dropout empty")
    for p in (-0.1, 1.5, float("nan")):
        for train in (False, True):
            yield Case("dropout", [g.tensor([3]), p, train], name=f"dropout p {p} train {train}")


def cases(g):
    yield from activation_cases(g)
    yield from dropout_cases(g)
