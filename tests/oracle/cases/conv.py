"""conv1d and conv2d: batched and unbatched inputs, every float dtype, stride,
padding (ints, pairs, one-element lists, "same" with odd and even totals,
"valid"), dilation, groups (depthwise included), with and without bias,
operands in every generator layout, a 1x1 kernel, a kernel as large as the
padded input, empty batches and channels, and the shape, argument and dtype
errors.

PyTorch 1.13 has no float16 convolution on the CPU and computes bfloat16 ones
through oneDNN's own rounding: 16-bit references are computed in float64 and
rounded once. kiln sums each output's C/groups * k products in another order
than PyTorch (float32 for 16-bit dtypes), so floating results allow that many
roundings of the largest magnitude involved (the same convolution over
absolute values, plus |bias|).

PyTorch computes integer convolutions on the CPU (its slow reference path);
kiln refuses them (Note [conv]), so they are tested in
tests/errors/conv_errors_test.cpp, not here.
"""

import math

import torch

from generate import Case

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
LOW = (torch.float16, torch.bfloat16)
A = torch.ops.aten

# (input shape, weight shape, bias, stride, padding, dilation, groups)
CONV2D = [
    ([2, 4, 7, 6], [6, 4, 3, 3], True, 1, 0, 1, 1),
    ([4, 7, 6], [6, 4, 3, 3], True, 1, 0, 1, 1),
    ([2, 4, 7, 6], [6, 4, 3, 3], False, 2, 0, 1, 1),
    ([2, 3, 8, 7], [5, 3, 3, 2], True, [2, 1], [1, 0], [1, 2], 1),
    ([3, 8, 7], [5, 3, 2, 3], False, [1, 3], [2, 1], [2, 1], 1),
    ([2, 4, 6, 6], [6, 4, 3, 3], True, [1], [2], [2], 1),
    ([2, 4, 6, 5], [6, 2, 3, 3], True, 1, 1, 1, 2),
    ([2, 4, 6, 5], [4, 1, 3, 3], True, 1, 1, 1, 4),       # depthwise
    ([4, 6, 5], [8, 1, 3, 3], False, 2, 1, 1, 4),         # depthwise, multiplier 2
    ([2, 6, 5, 5], [6, 2, 3, 3], False, 2, [0, 1], 2, 3),
    ([2, 4, 5, 5], [3, 4, 1, 1], True, 1, 0, 1, 1),       # 1x1
    ([2, 4, 5, 6], [3, 4, 1, 1], False, 2, 0, 1, 1),      # 1x1, strided
    ([2, 3, 4, 5], [2, 3, 6, 7], True, 1, 1, 1, 1),       # kernel = padded input
    ([3, 4, 5], [2, 3, 4, 5], False, 1, 0, 1, 1),         # kernel = input
    ([2, 3, 7, 7], [2, 3, 3, 3], True, 10, 0, 1, 1),      # stride past the input
    ([1, 2, 5, 5], [3, 2, 3, 3], True, 1, 0, 1, 1),
    ([0, 4, 5, 5], [6, 4, 3, 3], True, 1, 0, 1, 1),       # empty batch
]
CONV2D_STR = [
    ([2, 4, 6, 5], [6, 4, 3, 3], True, 1, "same", 1, 1),
    ([2, 4, 6, 5], [6, 4, 2, 4], True, 1, "same", 1, 1),         # odd total: extra at the end
    ([4, 6, 5], [6, 4, 2, 3], False, [1, 1], "same", [1, 2], 1),
    ([2, 4, 6, 5], [4, 2, 4, 3], True, 1, "same", [3, 2], 2),
    ([1, 1, 2, 2], [1, 1, 3, 3], False, 1, "same", 2, 1),        # padding wider than the input
    ([2, 4, 6, 5], [6, 4, 3, 3], True, 2, "valid", 1, 1),
    ([4, 6, 5], [4, 1, 3, 2], True, 1, "valid", [2, 1], 4),
]
CONV1D = [
    ([2, 4, 9], [6, 4, 3], True, 1, 0, 1, 1),
    ([4, 9], [6, 4, 3], True, 1, 0, 1, 1),
    ([2, 4, 9], [6, 4, 3], False, 2, 2, 1, 1),
    ([2, 4, 11], [6, 4, 3], True, [3], [1], [3], 1),
    ([2, 4, 9], [6, 2, 4], True, 1, 1, 2, 2),
    ([4, 9], [4, 1, 3], True, 1, 1, 1, 4),                # depthwise
    ([2, 4, 9], [3, 4, 1], False, 1, 0, 1, 1),             # size-1 kernel
    ([2, 3, 5], [2, 3, 9], True, 1, 2, 1, 1),              # kernel = padded input
    ([0, 4, 9], [6, 4, 3], True, 1, 0, 1, 1),
]
CONV1D_STR = [
    ([2, 4, 9], [6, 4, 3], True, 1, "same", 1, 1),
    ([4, 9], [6, 4, 4], False, 1, "same", 1, 1),
    ([2, 4, 9], [6, 2, 2], True, [1], "same", 3, 2),
    ([2, 4, 9], [6, 4, 3], True, 2, "valid", 2, 1),
]

# (op, input shape, weight shape, bias shape or None, stride, padding, dilation, groups, what)
ERRORS = [
    ("conv2d", [5, 5], [6, 4, 3, 3], None, 1, 0, 1, 1, "2-D input"),
    ("conv2d", [1, 2, 4, 5, 5], [6, 4, 3, 3], None, 1, 0, 1, 1, "5-D input"),
    ("conv1d", [2, 4, 5, 5], [6, 4, 3], None, 1, 0, 1, 1, "4-D input to conv1d"),
    ("conv2d", [2, 4, 5, 5], [6, 4, 3], None, 1, 0, 1, 1, "3-D weight"),
    ("conv1d", [2, 4, 5], [6, 4, 3, 3], None, 1, 0, 1, 1, "4-D weight to conv1d"),
    ("conv2d", [2, 5, 5, 5], [6, 4, 3, 3], None, 1, 0, 1, 1, "in-channels mismatch"),
    ("conv2d", [2, 5, 5, 5], [6, 2, 3, 3], None, 1, 0, 1, 2, "groups do not divide C"),
    ("conv2d", [2, 8, 5, 5], [6, 2, 3, 3], None, 1, 0, 1, 4, "groups do not divide O"),
    ("conv2d", [2, 4, 5, 5], [2, 1, 3, 3], None, 1, 0, 1, 4, "fewer out channels than groups"),
    ("conv2d", [2, 4, 5, 5], [0, 4, 3, 3], None, 1, 0, 1, 1, "no out channels"),
    ("conv2d", [2, 4, 5, 5], [6, 4, 3, 3], None, 1, 0, 1, 0, "groups 0"),
    ("conv1d", [2, 4, 5], [6, 4, 3], None, 1, 0, 1, -1, "groups -1"),
    ("conv2d", [2, 4, 5, 5], [6, 4, 3, 3], [5], 1, 0, 1, 1, "bias of 5"),
    ("conv2d", [2, 4, 5, 5], [6, 4, 3, 3], [6, 1], 1, 0, 1, 1, "2-D bias"),
    ("conv2d", [2, 4, 5, 5], [6, 4, 3, 3], None, 0, 0, 1, 1, "stride 0"),
    ("conv2d", [2, 4, 5, 5], [6, 4, 3, 3], None, [1, -1], 0, 1, 1, "stride -1"),
    ("conv2d", [2, 4, 5, 5], [6, 4, 3, 3], None, 1, 0, 0, 1, "dilation 0"),
    ("conv1d", [2, 4, 5], [6, 4, 3], None, 1, 0, [-2], 1, "dilation -2"),
    ("conv2d", [2, 4, 5, 5], [6, 4, 3, 3], None, 1, -1, 1, 1, "padding -1"),
    ("conv2d", [2, 4, 5, 5], [6, 4, 3, 3], None, [1, 1, 1], 0, 1, 1, "three strides"),
    ("conv2d", [2, 4, 5, 5], [6, 4, 3, 3], None, [], 0, 1, 1, "no strides"),
    ("conv2d", [2, 4, 5, 5], [6, 4, 3, 3], None, 1, [0, 0, 0], 1, 1, "three paddings"),
    ("conv2d", [2, 4, 5, 5], [6, 4, 3, 3], None, 1, 0, [1, 1, 1], 1, "three dilations"),
    ("conv1d", [2, 4, 5], [6, 4, 3], None, [1, 2], 0, 1, 1, "two strides to conv1d"),
    ("conv2d", [2, 4, 5, 5], [6, 4, 6, 6], None, 1, 0, 1, 1, "kernel larger than input"),
    ("conv2d", [2, 4, 5, 5], [6, 4, 3, 3], None, 1, 0, 3, 1, "dilated kernel larger"),
    ("conv2d", [2, 4, 0, 5], [6, 4, 3, 3], None, 1, 1, 1, 1, "empty spatial dim"),
    ("conv1d", [2, 4, 5], [6, 4, 7], None, 1, 0, 1, 1, "conv1d kernel larger"),
    ("conv2d", [2, 4, 5, 5], [6, 4, 0, 3], None, 1, 0, 1, 1, "empty kernel"),
    ("conv2d.padding", [2, 4, 5, 5], [6, 4, 3, 3], None, 2, "same", 1, 1, "same with stride 2"),
    ("conv2d.padding", [2, 4, 5, 5], [6, 4, 3, 3], None, [1, 2], "same", 1, 1,
     "same with stride [1, 2]"),
    ("conv1d.padding", [2, 4, 5], [6, 4, 3], None, 2, "same", 1, 1, "conv1d same, stride 2"),
    ("conv2d.padding", [2, 4, 5, 5], [6, 4, 3, 3], None, 1, "full", 1, 1, "unknown padding"),
    ("conv2d.padding", [2, 4, 2, 2], [6, 4, 3, 3], None, 1, "valid", 1, 1, "valid too small"),
]


def ref_for(op, dt):
    """16-bit: the float64 convolution rounded once."""
    fn = getattr(A, op.split(".")[0])
    fn = getattr(fn, op.split(".")[1] if "." in op else "default")

    def ref(x, w, b, *rest):
        return fn(x.double(), w.double(), None if b is None else b.double(), *rest).to(dt)
    return ref if dt in LOW else None


def atol_for(op, x, w, b, rest, dt):
    """C/groups * k roundings of the largest magnitude the sums pass through."""
    fn = getattr(A, op.split(".")[0])
    fn = getattr(fn, op.split(".")[1] if "." in op else "default")
    mag = fn(x.double().abs(), w.double().abs(), None, *rest)
    if b is not None:
        shape = [-1] + [1] * (w.dim() - 2)
        mag = mag + b.double().abs().reshape(shape)
    top = mag.max().item() if mag.numel() else 0.0
    terms = math.prod(w.shape[1:])
    eps = torch.finfo(torch.float32 if dt in LOW else dt).eps
    return max(terms * eps * top, 1e-5)


def form_cases(g, name, op, forms):
    for shape, wshape, has_bias, stride, padding, dilation, groups in forms:
        for dt in FLOATS:
            x = g.tensor(shape, dt, "any")
            # PyTorch 1.13 fails an empty batch with a non-contiguous weight
            # (a view error in its empty-output path): that weight is contiguous.
            w = g.tensor(wshape, dt, "contiguous" if 0 in shape else "any")
            b = g.tensor([wshape[0]], dt, "any") if has_bias else None
            rest = [stride, padding, dilation, groups]
            yield Case(op, [x, w, b] + rest, ref=ref_for(op, dt),
                       atol=atol_for(op, x, w, b, rest, dt),
                       name=f"{name} {shape} {wshape} bias={has_bias} stride={stride} "
                            f"padding={padding} dilation={dilation} groups={groups} {dt}")


def cases(g):
    yield from form_cases(g, "conv2d", "conv2d", CONV2D)
    yield from form_cases(g, "conv2d", "conv2d.padding", CONV2D_STR)
    yield from form_cases(g, "conv1d", "conv1d", CONV1D)
    yield from form_cases(g, "conv1d", "conv1d.padding", CONV1D_STR)
    # Each layout of the input, the weight and the bias, one at a time.
    for layout in g.LAYOUTS:
        for op, shape, wshape, rest in [
                ("conv2d", [2, 4, 6, 5], [6, 2, 3, 2], [[2, 1], 1, [1, 2], 2]),
                ("conv1d", [3, 4, 8], [6, 4, 3], [1, 1, 2, 1]),
                ("conv2d.padding", [4, 6, 5], [4, 1, 3, 3], [1, "same", 1, 4])]:
            for which in range(3):
                lay = [layout if i == which else "contiguous" for i in range(3)]
                x = g.tensor(shape, torch.float32, lay[0])
                w = g.tensor(wshape, torch.float32, lay[1])
                b = g.tensor([wshape[0]], torch.float32, lay[2])
                yield Case(op, [x, w, b] + rest, atol=atol_for(op, x, w, b, rest, torch.float32),
                           name=f"{op} {['input', 'weight', 'bias'][which]} {layout}")
    # Keyword arguments, and the defaults.
    x, w = g.tensor([2, 4, 6, 6]), g.tensor([3, 4, 3, 3])
    yield Case("conv2d", [x, w], atol=atol_for("conv2d", x, w, None, [], torch.float32),
               name="conv2d defaults")
    yield Case("conv2d", [x, w], {"padding": [1, 2], "groups": 1, "stride": 2},
               atol=atol_for("conv2d", x, w, None, [2, [1, 2]], torch.float32),
               name="conv2d kwargs")
    yield Case("conv1d.padding", [g.tensor([2, 4, 7]), g.tensor([3, 4, 2])], {"padding": "same"},
               atol=1e-4, name="conv1d.padding kwargs")
    for op, shape, wshape, bshape, stride, padding, dilation, groups, what in ERRORS:
        b = g.tensor(bshape) if bshape is not None else None
        yield Case(op, [g.tensor(shape), g.tensor(wshape), b, stride, padding, dilation, groups],
                   name=f"{op} error: {what}")
    x, w = g.tensor([2, 4, 5, 5]), g.tensor([6, 4, 3, 3])
    yield Case("conv2d", [x, w.double()], name="conv2d error: weight dtype")
    yield Case("conv2d", [x, w, g.tensor([6], torch.float64)], name="conv2d error: bias dtype")
    yield Case("conv2d", [x.bool(), w.bool()], name="conv2d error: bool")
    yield Case("conv1d", [g.tensor([2, 4, 5]).bool(), g.tensor([6, 4, 3]).bool()],
               name="conv1d error: bool")
    yield Case("conv2d", [x, None], name="conv2d error: no weight")
