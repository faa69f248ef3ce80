"""max_pool1d/2d (with and without indices), avg_pool1d/2d, the adaptive pools
and interpolate: batched and unbatched inputs, every float dtype (avg: int64
too), kernel, stride (omitted, one int, pairs), padding, dilation, ceil_mode
(with a last window that would start in the padding), count_include_pad,
divisor_override, adaptive windows that do and do not divide the input,
interpolate's modes with size and scale_factor (recomputed or not) and
align_corners, inputs in every generator layout, empty batches, and the shape,
argument and dtype errors.

PyTorch 1.13 has no float16 pooling or interpolation on the CPU (its CUDA
has): float16 references are computed in float64 (pools) or float32
(interpolate, whose positions depend on the dtype's arithmetic) and rounded
once. bfloat16 pools are PyTorch's own; bfloat16 interpolation is computed in
float32 and rounded once, because PyTorch 1.13's CPU rounds the scale to
bfloat16 and kiln does not (Note [interpolate]). avg sums in another order
than PyTorch, so it allows that many roundings of the largest magnitude.

Deviations kept out of this file (tested in tests/errors/pooling_errors_test.cpp
and tests/runtime/cpu/pooling_test.cpp): max_pool1d with a kernel larger than
the padded input (PyTorch returns an empty result, kiln raises), a one-element
size list for a 4-D interpolate (PyTorch raises, kiln applies it to both dims),
antialias (PyTorch has it for bilinear, kiln raises), and the index of a NaN
maximum (PyTorch: the last NaN, kiln: the first).
"""

import torch
import torch.nn.functional as F

from generate import Case

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
A = torch.ops.aten

# (input shape, kernel_size, stride, padding, dilation, ceil_mode)
MAX2D = [
    ([2, 3, 7, 6], 2, [], 0, 1, False),
    ([3, 7, 6], [3, 2], [2, 1], [1, 0], 1, False),
    ([2, 3, 8, 7], 3, 2, 1, 1, True),
    ([2, 2, 9, 8], [3, 3], [2, 3], [1, 1], [2, 1], False),
    ([2, 2, 9, 8], [2, 3], 2, [1, 0], [2, 2], True),
    ([1, 2, 4, 4], 2, 3, 1, 1, True),            # the last window would start in the padding
    ([2, 3, 5, 5], 5, 1, 2, 1, False),           # kernel = input, most taps padding
    ([2, 3, 5, 6], 1, 2, 0, 1, False),           # 1x1, strided
    ([3, 6, 5], [2], [1], [1], [1], True),
    ([0, 3, 6, 6], 2, 2, 0, 1, False),           # empty batch
]
MAX1D = [
    ([2, 3, 9], 2, [], 0, 1, False),
    ([3, 9], 3, 2, 1, 1, False),
    ([2, 3, 10], 3, 2, 1, 2, True),
    ([2, 2, 4], 2, 3, 1, 1, True),
    ([4, 7], 4, 1, 2, 1, True),
    ([0, 3, 8], 2, 2, 0, 1, False),
]
# (input shape, kernel_size, stride, padding, ceil_mode, count_include_pad[, divisor_override])
AVG2D = [
    ([2, 3, 7, 6], 2, [], 0, False, True, None),
    ([3, 7, 6], [3, 2], [2, 1], [1, 0], False, True, None),
    ([2, 3, 7, 6], [3, 2], [2, 1], [1, 1], False, False, None),
    ([2, 3, 8, 7], 3, 2, 1, True, True, None),
    ([2, 3, 8, 7], 3, 2, 1, True, False, None),
    ([1, 2, 4, 4], 2, 3, 1, True, True, None),
    ([2, 3, 7, 6], 3, 2, 1, False, True, 4),
    ([2, 3, 7, 6], 3, 2, 1, True, False, -3),
    ([0, 3, 6, 6], 2, 2, 0, False, True, None),
]
AVG1D = [
    ([2, 3, 9], 2, [], 0, False, True),
    ([3, 9], 3, 2, 1, False, True),
    ([2, 3, 10], 3, 2, 1, True, False),
    ([2, 3, 10], 3, 2, 1, True, True),
    ([2, 2, 4], 2, 3, 1, True, True),
    ([0, 3, 8], 2, 2, 0, False, True),
]
# (input shape, output_size)
ADAPTIVE2D = [
    ([2, 3, 8, 6], [4, 3]),     # divides: a plain pool
    ([2, 3, 7, 6], [3, 4]),
    ([3, 7, 5], [5, 3]),
    ([2, 3, 5, 4], [7, 9]),     # larger than the input
    ([2, 3, 6, 5], [1, 1]),     # global
    ([2, 3, 6, 5], [2, 1]),
    ([0, 3, 6, 5], [2, 2]),
    ([2, 3, 6, 5], [0, 2]),     # an empty output
]
ADAPTIVE1D = [
    ([2, 3, 12], [4]),
    ([2, 3, 11], [4]),
    ([3, 7], [5]),
    ([2, 3, 5], [8]),
    ([2, 3, 6], 1),
    ([0, 3, 6], [2]),
    ([2, 3, 6], [0]),
]
# (input shape, size, scale_factor, mode, align_corners, recompute_scale_factor)
INTERP = [
    ([2, 3, 7, 6], [5, 9], None, "nearest", None, None),
    ([2, 3, 7, 6], [14, 12], None, "nearest", None, None),
    ([2, 3, 7, 6], 4, None, "nearest", None, None),
    ([2, 3, 7, 6], None, [2.0, 1.5], "nearest", None, None),
    ([2, 3, 7, 6], None, 1.7, "nearest", None, None),
    ([2, 3, 7, 6], None, [0.6, 2.3], "nearest", None, True),
    ([2, 3, 10, 6], None, [1.05, 1.0], "nearest", None, None),   # the size stays, the scale does not
    ([2, 3, 7], [17], None, "nearest", None, None),
    ([2, 3, 7], None, 2.5, "nearest", None, None),
    ([2, 3, 7, 6], [5, 9], None, "nearest-exact", None, None),
    ([2, 3, 7], None, 1.3, "nearest-exact", None, None),
    ([2, 3, 7, 6], [5, 9], None, "bilinear", False, None),
    ([2, 3, 7, 6], [5, 9], None, "bilinear", True, None),
    ([2, 3, 7, 6], [14, 3], None, "bilinear", None, None),
    ([2, 3, 7, 6], None, [2.0, 0.7], "bilinear", False, None),
    ([2, 3, 7, 6], None, [1.6, 2.2], "bilinear", True, None),
    ([2, 3, 7, 6], None, [1.6, 2.2], "bilinear", False, True),
    ([2, 3, 7, 6], [1, 1], None, "bilinear", True, None),
    ([2, 3, 7, 6], [7, 11], None, "bilinear", False, None),      # one dim copied
    ([2, 3, 7], [19], None, "linear", False, None),
    ([2, 3, 7], [4], None, "linear", True, None),
    ([2, 3, 9], None, 1.37, "linear", False, None),
    ([2, 3, 1], [5], None, "linear", True, None),
    ([2, 3, 7, 6], [3, 4], None, "area", None, None),
    ([2, 3, 7], None, 0.5, "area", None, None),
    ([0, 3, 7, 6], [5, 9], None, "bilinear", False, None),
    ([0, 3, 7], [5], None, "nearest", None, None),
]

# (op, args, what): PyTorch raises for each.
ERRORS = [
    ("max_pool2d", [[5, 5], 2], "2-D input"),
    ("max_pool2d", [[1, 2, 3, 5, 5], 2], "5-D input"),
    ("max_pool1d", [[2, 3, 5, 5], 2], "4-D input to max_pool1d"),
    ("max_pool2d", [[2, 3, 5, 5], [0, 2]], "kernel 0"),
    ("max_pool2d", [[2, 3, 5, 5], [2, 2, 2]], "three kernel ints"),
    ("max_pool2d", [[2, 3, 5, 5], 2, [0, 1]], "stride 0"),
    ("max_pool2d", [[2, 3, 5, 5], 2, [1, 1, 1]], "three strides"),
    ("max_pool2d", [[2, 3, 5, 5], 2, 1, -1], "padding -1"),
    ("max_pool2d", [[2, 3, 5, 5], 3, 1, [2, 0]], "padding above half the kernel"),
    ("max_pool2d", [[2, 3, 5, 5], 2, 1, 0, [0, 1]], "dilation 0"),
    ("max_pool2d", [[2, 3, 5, 5], [2, 6]], "kernel larger than the input"),
    ("max_pool2d", [[2, 3, 5, 5], 2, 1, 0, 5], "dilated kernel larger"),
    ("max_pool2d", [[2, 0, 5, 5], 2], "no channels"),
    ("max_pool2d", [[3, 0, 5], 2], "empty height"),
    ("max_pool2d_with_indices", [[2, 3, 5, 5], [2, 7]], "kernel larger, with indices"),
    ("max_pool1d", [[2, 3, 5], [0]], "max_pool1d kernel 0"),
    ("max_pool1d", [[2, 3, 5], 2, [0]], "max_pool1d stride 0"),
    ("max_pool1d", [[2, 3, 5], 3, 1, 2], "max_pool1d padding above half"),
    ("max_pool1d", [[2, 0, 5], 2], "max_pool1d no channels"),
    ("max_pool1d", [[2, 3, 5], [2, 2]], "max_pool1d two kernel ints"),
    ("max_pool1d_with_indices", [[2, 3, 5], 7], "max_pool1d_with_indices kernel larger"),
    ("avg_pool2d", [[5, 5], 2], "avg 2-D input"),
    ("avg_pool2d", [[2, 3, 5, 5], 0], "avg kernel 0"),
    ("avg_pool2d", [[2, 3, 5, 5], 2, [1, 0]], "avg stride 0"),
    ("avg_pool2d", [[2, 3, 5, 5], 3, 1, 2], "avg padding above half"),
    ("avg_pool2d", [[2, 3, 5, 5], 2, 1, -1], "avg padding -1"),
    ("avg_pool2d", [[2, 3, 5, 5], [6, 2]], "avg kernel larger"),
    ("avg_pool2d", [[2, 3, 5, 5], 2, 1, 0, False, True, 0], "divisor_override 0"),
    ("avg_pool2d", [[2, 0, 5, 5], 2], "avg no channels"),
    ("avg_pool1d", [[2, 3, 5], [2, 2]], "avg_pool1d two kernel ints"),
    ("avg_pool1d", [[2, 3, 5], 6], "avg_pool1d kernel larger"),
    ("avg_pool1d", [[5], 2], "avg_pool1d 1-D input"),
    ("adaptive_avg_pool2d", [[2, 3, 5, 5], [-1, 2]], "adaptive output -1"),
    ("adaptive_avg_pool2d", [[2, 3, 5, 5], [2, 2, 2]], "adaptive three sizes"),
    ("adaptive_avg_pool2d", [[5, 5], [2, 2]], "adaptive 2-D input"),
    ("adaptive_avg_pool2d", [[2, 3, 0, 5], [2, 2]], "adaptive empty height"),
    ("adaptive_avg_pool1d", [[2, 3, 5], [2, 2]], "adaptive_avg_pool1d two sizes"),
    ("adaptive_avg_pool1d", [[5], [2]], "adaptive_avg_pool1d 1-D input"),
    ("adaptive_max_pool2d", [[2, 0, 5, 5], [2, 2]], "adaptive max no channels"),
    ("adaptive_max_pool2d", [[2, 3, 5, 5], [2, 2, 2]], "adaptive max three sizes"),
    ("adaptive_max_pool1d", [[2, 3, 0], [2]], "adaptive_max_pool1d empty length"),
]
# (input shape, size, scale_factor, mode, align_corners, recompute_scale_factor, antialias, what)
INTERP_ERRORS = [
    ([2, 3, 5, 5], None, None, "nearest", None, None, False, "neither size nor scale_factor"),
    ([2, 3, 5, 5], [3, 3], 2.0, "nearest", None, None, False, "both size and scale_factor"),
    ([2, 3, 5, 5], [3, 3, 3], None, "nearest", None, None, False, "three sizes"),
    ([2, 3, 5, 5], None, [2.0, 2.0, 2.0], "nearest", None, None, False, "three scale factors"),
    ([2, 3, 5, 5], [0, 3], None, "nearest", None, None, False, "size 0"),
    ([2, 3, 5, 5], [-2, 3], None, "bilinear", None, None, False, "size -2"),
    ([2, 3, 5, 5], None, 0.1, "nearest", None, None, False, "scale_factor to 0 elements"),
    ([2, 3, 5, 5], None, -2.0, "nearest", None, None, False, "negative scale_factor"),
    ([2, 3, 5, 5], [3, 3], None, "cubic", None, None, False, "unknown mode"),
    ([2, 3, 5, 5], [3, 3], None, "linear", None, None, False, "linear on 4-D"),
    ([2, 3, 5], [3], None, "bilinear", None, None, False, "bilinear on 3-D"),
    ([2, 3, 5, 5], [3, 3], None, "nearest", True, None, False, "align_corners with nearest"),
    ([2, 3, 5, 5], [3, 3], None, "area", False, None, False, "align_corners with area"),
    ([2, 3, 5, 5], [3, 3], None, "nearest", None, True, False, "recompute with size"),
    ([2, 3, 5, 5], [3, 3], None, "nearest", None, None, True, "antialias with nearest"),
    ([3, 5], [3], None, "nearest", None, None, False, "2-D input"),
    ([2, 0, 5, 5], [3, 3], None, "nearest", None, None, False, "no channels"),
    ([2, 3, 0, 5], [3, 3], None, "bilinear", None, None, False, "empty height"),
]


def low_ref(fn, dt, via):
    """16-bit: the op on the input converted to `via`, rounded once."""
    def ref(x, *rest):
        out = fn(x.to(via), *rest)
        if isinstance(out, tuple):
            return out[0].to(dt), out[1]
        return out.to(dt)
    return ref


def pool_ref(op, dt):
    if dt == torch.float16:
        return low_ref(getattr(A, op).default, dt, torch.float64)
    if dt == torch.bfloat16 and op.startswith(("avg", "adaptive_avg")):
        return low_ref(getattr(A, op).default, dt, torch.float64)
    return None


def avg_atol(x, terms, dt):
    eps = torch.finfo(torch.float32 if dt in (torch.float16, torch.bfloat16) else dt).eps
    top = x.double().abs().max().item() if x.numel() else 0.0
    return max(terms * eps * top, 1e-5)


def interp_ref(dt):
    def ref(x, *rest):
        if dt in (torch.float16, torch.bfloat16):
            return F.interpolate(x.float(), *rest).to(dt)
        return F.interpolate(x, *rest)
    return ref


def prod(v, n):
    v = v if isinstance(v, list) else [v] * n
    out = 1
    for e in v:
        out *= e
    return out


def cases(g):
    for op, forms, nd in [("max_pool2d", MAX2D, 2), ("max_pool1d", MAX1D, 1)]:
        for shape, k, s, p, d, ceil in forms:
            for dt in FLOATS:
                for name in (op, op + "_with_indices"):
                    x = g.tensor(shape, dt, "any")
                    yield Case(name, [x, k, s, p, d, ceil], ref=pool_ref(name, dt),
                               name=f"{name} {shape} k={k} s={s} p={p} d={d} ceil={ceil} {dt}")
    for op, forms, nd in [("avg_pool2d", AVG2D, 2), ("avg_pool1d", AVG1D, 1)]:
        for shape, k, s, p, ceil, cip, *div in forms:
            rest = [k, s, p, ceil, cip] + div
            for dt in FLOATS + [torch.int64]:
                x = g.tensor(shape, dt, "any", low=-20, high=20) if dt == torch.int64 else \
                    g.tensor(shape, dt, "any")
                yield Case(op, [x] + rest, ref=pool_ref(op, dt),
                           atol=None if dt == torch.int64 else avg_atol(x, prod(k, nd), dt),
                           name=f"{op} {shape} k={k} s={s} p={p} ceil={ceil} "
                                f"count_include_pad={cip} divisor={div} {dt}")
    for ops, forms in [(["adaptive_avg_pool2d", "adaptive_max_pool2d"], ADAPTIVE2D),
                       (["adaptive_avg_pool1d", "adaptive_max_pool1d"], ADAPTIVE1D)]:
        for shape, out in forms:
            for dt in FLOATS:
                for op in ops:
                    x = g.tensor(shape, dt, "any")
                    window = 1
                    for s in shape[-2:] if op.endswith("2d") else shape[-1:]:
                        window *= s
                    yield Case(op, [x, out], ref=pool_ref(op, dt),
                               atol=avg_atol(x, window, dt) if "avg" in op else None,
                               name=f"{op} {shape} output_size={out} {dt}")
    for shape, size, sf, mode, ac, rsf in INTERP:
        for dt in FLOATS:
            x = g.tensor(shape, dt, "any")
            yield Case("interpolate", [x, size, sf, mode, ac, rsf], ref=interp_ref(dt),
                       name=f"interpolate {shape} size={size} scale_factor={sf} mode={mode} "
                            f"align_corners={ac} recompute={rsf} {dt}")
    # uint8 nearest, as PyTorch's CPU allows.
    for size, sf in [([5, 9], None), (None, [1.5, 2.5])]:
        x = g.tensor([2, 3, 7, 6], torch.uint8, "any", low=0, high=255)
        yield Case("interpolate", [x, size, sf, "nearest"], ref=interp_ref(torch.uint8),
                   name=f"interpolate uint8 nearest size={size} scale_factor={sf}")
    # Each layout of the input, one at a time.
    for layout in g.LAYOUTS:
        for op, shape, rest in [("max_pool2d_with_indices", [2, 3, 7, 6], [3, 2, 1, 1, True]),
                                ("avg_pool2d", [3, 7, 6], [[3, 2], [2, 1], [1, 0], True, False]),
                                ("adaptive_avg_pool2d", [2, 3, 7, 6], [[3, 4]]),
                                ("adaptive_max_pool1d", [2, 3, 11], [4])]:
            x = g.tensor(shape, torch.float32, layout)
            yield Case(op, [x] + rest, atol=1e-5, name=f"{op} {layout}")
        x = g.tensor([2, 3, 7, 6], torch.float32, layout)
        yield Case("interpolate", [x, [5, 9], None, "bilinear", False], ref=F.interpolate,
                   name=f"interpolate bilinear {layout}")
    # Keyword arguments, and the defaults.
    x = g.tensor([2, 3, 8, 8])
    yield Case("max_pool2d", [x, 2], name="max_pool2d defaults")
    yield Case("max_pool2d_with_indices", [x, [3, 2]], {"padding": 1, "ceil_mode": True},
               name="max_pool2d_with_indices kwargs")
    yield Case("avg_pool2d", [x, 3], {"divisor_override": 5, "stride": [2, 1]},
               name="avg_pool2d kwargs")
    yield Case("avg_pool1d", [g.tensor([2, 3, 9]), 3], {"count_include_pad": False, "padding": 1},
               name="avg_pool1d kwargs")
    yield Case("interpolate", [x], {"scale_factor": [1.5, 0.5], "mode": "bilinear",
                                    "align_corners": True},
               ref=lambda x, **kw: F.interpolate(x, **kw), name="interpolate kwargs")
    yield Case("interpolate", [x, [3, 5]], ref=F.interpolate, name="interpolate defaults")
    for op, args, what in ERRORS:
        yield Case(op, [g.tensor(args[0])] + args[1:], name=f"{op} error: {what}")
    for shape, size, sf, mode, ac, rsf, aa, what in INTERP_ERRORS:
        yield Case("interpolate", [g.tensor(shape), size, sf, mode, ac, rsf, aa],
                   ref=F.interpolate, name=f"interpolate error: {what}")
    # Dtypes PyTorch 1.13 refuses.
    x = g.tensor([2, 3, 6, 6])
    for op, rest in [("max_pool2d", [2]), ("max_pool2d_with_indices", [2]),
                     ("adaptive_max_pool2d", [[2, 2]]), ("adaptive_avg_pool2d", [[2, 2]])]:
        yield Case(op, [x.long()] + rest, name=f"{op} error: int64")
    yield Case("max_pool1d", [x[0].int(), 2], name="max_pool1d error: int32")
    yield Case("avg_pool2d", [x.int(), 2], name="avg_pool2d error: int32")
    yield Case("avg_pool2d", [x.bool(), 2], name="avg_pool2d error: bool")
    yield Case("avg_pool1d", [x[0].to(torch.uint8), 2], name="avg_pool1d error: uint8")
    yield Case("interpolate", [x.long(), [3, 3]], ref=F.interpolate,
               name="interpolate error: int64 nearest")
    yield Case("interpolate", [x.to(torch.uint8), [3, 3], None, "bilinear"], ref=F.interpolate,
               name="interpolate error: uint8 bilinear")
