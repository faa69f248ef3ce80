"""Reductions: sum, mean, prod, amax/amin, max/min, argmax/argmin, var/std,
logsumexp, all/any, norm. Every overload, every dtype PyTorch 1.13 admits on the
CPU and the ones it refuses, all layouts, 0-dim, empty inputs and empty reduced
dims, keepdim both ways, dim lists (single, several, negative, repeated, empty,
None), dtype= arguments, NaN/inf inputs and ties."""

import math

import torch

from generate import ALL, FLOATS, INTS, Case

NAN, INF = float("nan"), float("inf")

# (shape, dim lists to reduce over)
DIM_CASES = [
    ([2, 3, 4], [[0], [-1], [0, 2], [2, 0], [-3, 1, 2], []]),
    ([5], [[0], [-1], []]),
    ([], [[0], [-1], []]),
    ([4, 0, 3], [[0], [1], [0, 2], []]),
    ([1, 6], [[0], [1]]),
    ([7, 33], [[0], [1]]),
]
BAD_DIMS = [([2, 3], [0, -2]), ([2, 3], [1, 1]), ([2, 3], [2]), ([], [0, -1]), ([], [1])]


def put(t, values, seed):
    """Writes `values` at seeded positions of t (through its view)."""
    if t.numel() == 0:
        return t
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for v in values:
            i = int(torch.randint(0, t.numel(), (1,), generator=g))
            if t.dim() == 0:
                t.fill_(v)
                continue
            idx = []
            for s in reversed(t.shape):
                idx.append(i % s)
                i //= s
            t[tuple(reversed(idx))] = v
    return t


def specials(g, shape, dtype, values, seed, layout="any"):
    return put(g.tensor(shape, dtype, layout), values, seed)


def round_storage(t):
    """Rounds every element of t's storage in place, keeping t's layout."""
    flat = torch.empty(0, dtype=t.dtype).set_(t.storage(), 0, (t.storage().size(),), (1,))
    flat.copy_(flat.double().round())
    return t


def ties(g, shape, dtype, layout="any"):
    """Few distinct values, so extremes repeat."""
    if dtype == torch.bool:
        return g.tensor(shape, dtype, layout)
    t = g.tensor(shape, dtype, layout, low=0, high=3)
    return round_storage(t) if dtype.is_floating_point else t


def sparse(g, shape, dtype, layout="any"):
    """Mostly zeros: all/any decide on a few elements."""
    if dtype.is_floating_point:
        return round_storage(g.tensor(shape, dtype, layout, low=0, high=1.3))
    return g.tensor(shape, dtype, layout, low=0, high=2)


def loose(dt):
    """PyTorch rounds partial sums of 16-bit floats to the 16-bit type between
    its loops over several dims; kiln keeps them in float. Near-zero results
    then differ by a few units of the partials' last place."""
    return {"atol": {torch.float16: 1e-2, torch.bfloat16: 8e-2}.get(dt)}


def sum_mean_prod(g):
    for dt in ALL:
        for shape in ([3, 4], [], [0, 3], [2, 3, 5]):
            yield Case("sum", [g.tensor(shape, dt, "any")], **loose(dt), name=f"sum {dt} {shape}")
            yield Case("mean", [g.tensor(shape, dt, "any")], **loose(dt),
                       name=f"mean {dt} {shape}")
            yield Case("prod", [g.tensor(shape, dt, "any", low=-2, high=2)], rtol=1e-5,
                       name=f"prod {dt} {shape}")
        for shape, dim_lists in DIM_CASES:
            for dims in dim_lists:
                for keep in (False, True):
                    yield Case("sum.dim_IntList", [g.tensor(shape, dt, "any"), dims, keep],
                               **loose(dt), name=f"sum {dt} {shape} {dims} {keep}")
                    if dt.is_floating_point or dims == [0]:
                        yield Case("mean.dim", [g.tensor(shape, dt, "any"), dims, keep],
                                   **loose(dt), name=f"mean {dt} {shape} {dims} {keep}")
            for d in (0, -1):
                yield Case("prod.dim_int", [g.tensor(shape, dt, "any", low=-2, high=2), d,
                                            bool(d)], rtol=1e-5, name=f"prod {dt} {shape} {d}")
    # dim=None and dim=[] both reduce everything (1.13).
    for keep in (False, True):
        yield Case("sum.dim_IntList", [g.tensor([2, 3]), None, keep])
        yield Case("mean.dim", [g.tensor([2, 3]), None, keep])
    for shape, dims in BAD_DIMS:
        yield Case("sum.dim_IntList", [g.tensor(shape), dims], name=f"sum bad dims {dims}")
        yield Case("mean.dim", [g.tensor(shape), dims], name=f"mean bad dims {dims}")
    yield Case("prod.dim_int", [g.tensor([2, 3]), 2], name="prod dim out of range")
    yield Case("prod.dim_int", [g.tensor([]), -2], name="prod 0-dim dim out of range")
    # dtype= casts the input first.
    for src, dst in [(torch.float32, torch.float64), (torch.float16, torch.float32),
                     (torch.int32, torch.int8), (torch.uint8, torch.uint8),
                     (torch.float32, torch.int32), (torch.int64, torch.float16),
                     (torch.float32, torch.bool), (torch.int16, torch.bool),
                     (torch.bfloat16, torch.float64), (torch.bool, torch.int32)]:
        x = g.tensor([6, 7], src, "any", low=-100, high=250)
        yield Case("sum", [x], {"dtype": dst}, name=f"sum {src} dtype {dst}")
        yield Case("sum.dim_IntList", [x, [1], True], {"dtype": dst},
                   name=f"sum.dim {src} dtype {dst}")
        yield Case("mean", [x], {"dtype": dst}, name=f"mean {src} dtype {dst}")
        yield Case("mean.dim", [x, [0]], {"dtype": dst}, name=f"mean.dim {src} dtype {dst}")
        xs = g.tensor([3, 4], src, "any", low=-2, high=3)
        yield Case("prod", [xs], {"dtype": dst}, rtol=1e-5, name=f"prod {src} dtype {dst}")
        yield Case("prod.dim_int", [xs, 1], {"dtype": dst}, rtol=1e-5,
                   name=f"prod.dim {src} dtype {dst}")
    # Integer wrap-around.
    yield Case("sum", [g.tensor([40], torch.int64, "any", low=2**61, high=2**62)])
    yield Case("prod", [g.tensor([30], torch.int64, "any", low=100, high=1000)])
    yield Case("prod.dim_int", [g.tensor([4, 20], torch.int32, "any", low=-50, high=50), 1],
               {"dtype": torch.int32})
    # NaN and inf.
    for dt in FLOATS:
        for vals in ([NAN], [INF], [-INF], [INF, -INF]):
            x = specials(g, [4, 5], dt, vals, 17)
            yield Case("sum.dim_IntList", [x, [1]], name=f"sum {dt} {vals}")
            yield Case("mean.dim", [x, [0]], name=f"mean {dt} {vals}")
            if dt in (torch.float32, torch.float64):
                yield Case("prod.dim_int", [x, 1], name=f"prod {dt} {vals}")
    # out=: computes in out's dtype; resizes; dtype must agree with out.
    x = g.tensor([3, 4], torch.float32, "any")
    for out_dt in (torch.float32, torch.float64, torch.int64, torch.float16, torch.bool):
        for op in ("sum.IntList_out", "mean.out"):
            yield Case(op, [x, [0]], {"out": g.tensor([4], out_dt, "contiguous")},
                       name=f"{op} into {out_dt}")
    xi = g.tensor([3, 4], torch.int32, "any")
    yield Case("sum.IntList_out", [xi, [1]], {"out": g.tensor([3], torch.float32, "offset")})
    yield Case("mean.out", [xi, [1]], {"out": g.tensor([3], torch.float32, "offset")})
    yield Case("mean.out", [xi, [1]], {"dtype": torch.float64,
                                       "out": g.tensor([3], torch.float64, "offset")})
    for op in ("sum.IntList_out", "mean.out"):
        yield Case(op, [x, [1], True], {"out": g.tensor([0])}, name=f"{op} resize empty")
        yield Case(op, [x, [1]], {"out": g.tensor([5])}, name=f"{op} resize smaller")
        yield Case(op, [x, [0, 1]], {"out": g.tensor([2, 2], layout="transposed")},
                   name=f"{op} resize to 0-dim")
        yield Case(op, [x, [0]], {"out": g.tensor([4], layout="strided")},
                   name=f"{op} strided out")
        yield Case(op, [x, None], {"dtype": torch.float64, "out": g.tensor([])},
                   name=f"{op} dtype mismatch")
        yield Case(op, [x, [0]], {"dtype": torch.float64, "out": g.tensor([4], torch.float64, "offset")},
                   name=f"{op} dtype match")
    # PyTorch's mean.out refuses an out whose elements share memory (its sum.out
    # and amax.out write them in an unspecified order; kiln refuses those too).
    yield Case("mean.out", [x, [0]], {"out": g.tensor([4], layout="expanded")},
               name="mean.out overlapping out")
    yield Case("sum.IntList_out", [g.tensor([4, 5]), [1]],
               {"out": g.tensor([5, 4], layout="contiguous").t()}, name="sum.out into transposed")
    # Long reductions: the parallel split and the outer-reduction blocks.
    yield Case("sum", [g.tensor([200003])], name="sum long")
    yield Case("sum", [g.tensor([300, 700], torch.float16, "transposed")], name="sum long f16")
    yield Case("sum.dim_IntList", [g.tensor([2, 90000]), [1]], name="sum long rows")
    yield Case("sum.dim_IntList", [g.tensor([900, 257]), [0]], name="sum outer")
    yield Case("mean.dim", [g.tensor([3, 300, 257], layout="strided"), [0, 1]], name="mean outer")
    yield Case("sum", [g.tensor([200003], torch.int32, low=-1000, high=1000)], name="sum long int")


def extremes(g):
    for dt in ALL:
        for shape, dim_lists in DIM_CASES:
            for dims in dim_lists:
                for keep in (False, True):
                    yield Case("amax", [g.tensor(shape, dt, "any"), dims, keep],
                               name=f"amax {dt} {shape} {dims} {keep}")
                    yield Case("amin", [g.tensor(shape, dt, "any"), dims, keep],
                               name=f"amin {dt} {shape} {dims} {keep}")
        for shape in ([3, 4], [], [0, 3], [2, 3, 5], [1]):
            for op in ("max", "min"):
                yield Case(op, [g.tensor(shape, dt, "any")], name=f"{op} {dt} {shape}")
            for op in ("argmax", "argmin"):
                for keep in (False, True):
                    yield Case(op, [g.tensor(shape, dt, "any"), None, keep],
                               name=f"{op} {dt} {shape} None {keep}")
        for shape in ([3, 4], [], [0, 3], [3, 0], [2, 3, 5]):
            for d in range(-max(len(shape), 1), max(len(shape), 1)):
                for keep in (False, True):
                    for op in ("max.dim", "min.dim", "argmax", "argmin"):
                        yield Case(op, [g.tensor(shape, dt, "any"), d, keep],
                                   name=f"{op} {dt} {shape} {d} {keep}")
        # Ties: the first index wins.
        for op in ("max.dim", "min.dim", "argmax", "argmin"):
            yield Case(op, [ties(g, [6, 9], dt), 1], name=f"{op} ties {dt}")
            yield Case(op, [ties(g, [9, 6], dt), 0, True], name=f"{op} ties dim 0 {dt}")
        yield Case("argmax", [ties(g, [5, 7], dt, "transposed")], name=f"argmax ties flat {dt}")
        yield Case("argmin", [ties(g, [5, 7], dt, "expanded")], name=f"argmin ties flat {dt}")
    # NaN propagates; argmax/argmin return the first NaN.
    for dt in FLOATS:
        for vals in ([NAN], [NAN, NAN, NAN], [INF, -INF], [NAN, INF]):
            x = specials(g, [5, 6], dt, vals, 3)
            for op in ("max.dim", "min.dim", "argmax", "argmin"):
                yield Case(op, [x, 1], name=f"{op} {dt} {vals}")
                yield Case(op, [x, 0, True], name=f"{op} dim 0 {dt} {vals}")
            yield Case("argmax", [x], name=f"argmax flat {dt} {vals}")
            yield Case("argmin", [x], name=f"argmin flat {dt} {vals}")
            for op in ("amax", "amin"):
                yield Case(op, [x, [1]], name=f"{op} {dt} {vals}")
                yield Case(op, [x, [0]], name=f"{op} dim 0 {dt} {vals}")
            yield Case("max", [x], name=f"max {dt} {vals}")
            yield Case("min", [x], name=f"min {dt} {vals}")
    for shape, dims in BAD_DIMS:
        yield Case("amax", [g.tensor(shape), dims], name=f"amax bad dims {dims}")
    yield Case("max.dim", [g.tensor([2, 3]), 2], name="max.dim out of range")
    yield Case("argmax", [g.tensor([]), 1], name="argmax 0-dim out of range")
    # out=: dtypes must match exactly.
    x = g.tensor([3, 4])
    for op in ("amax.out", "amin.out"):
        for out_dt in (torch.float32, torch.float64, torch.int64):
            yield Case(op, [x, [0]], {"out": g.tensor([4], out_dt, "offset")}, name=f"{op} into {out_dt}")
        yield Case(op, [x, [1], True], {"out": g.tensor([0])}, name=f"{op} resize")
        yield Case(op, [x, []], {"out": g.tensor([], layout="contiguous")}, name=f"{op} all")
        yield Case(op, [g.tensor([0, 3]), [0]], {"out": g.tensor([3], layout="strided")}, name=f"{op} empty dim")
        yield Case(op, [g.tensor([4, 6], torch.int16), [1]],
                   {"out": g.tensor([8], torch.int16, "strided")}, name=f"{op} strided out")
    # Long: split and outer blocks, with positions.
    big = specials(g, [150001], torch.float32, [7.5], 5)
    yield Case("amax", [big, [0]], name="amax long")
    yield Case("argmax", [big], name="argmax long")
    yield Case("max.dim", [big, 0], name="max.dim long")
    yield Case("argmin", [g.tensor([3, 50000], torch.int32, low=-10, high=10), 1],
               name="argmin long rows ties")
    yield Case("min.dim", [ties(g, [700, 130], torch.float32), 0], name="min.dim outer ties")
    yield Case("argmax", [ties(g, [300, 400], torch.int64, "transposed")],
               name="argmax long transposed ties")


def var_std(g):
    for dt in ALL:
        for op in ("var.correction", "std.correction"):
            for shape, dim_lists in DIM_CASES:
                for dims in dim_lists + [None]:
                    for keep in (False, True):
                        yield Case(op, [g.tensor(shape, dt, "any"), dims],
                                   {"correction": None, "keepdim": keep},
                                   name=f"{op} {dt} {shape} {dims} {keep}")
    for op in ("var.correction", "std.correction"):
        for corr in (0, 1, 2, 3, 5, -1):
            for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
                yield Case(op, [g.tensor([3, 4], dt, "any"), [0]], {"correction": corr},
                           name=f"{op} {dt} correction {corr}")
            yield Case(op, [g.tensor([4, 3], layout="any"), None],
                       {"correction": corr, "keepdim": True}, name=f"{op} all correction {corr}")
            yield Case(op, [g.tensor([]), None], {"correction": corr},
                       name=f"{op} 0-dim correction {corr}")
        for vals in ([NAN], [INF], [-INF, INF]):
            yield Case(op, [specials(g, [4, 6], torch.float32, vals, 9), [1]],
                       {"correction": 1}, name=f"{op} {vals}")
        for shape, dims in BAD_DIMS:
            yield Case(op, [g.tensor(shape), dims], {"correction": 1}, name=f"{op} bad {dims}")
        # Long: the split path merges partial moments.
        yield Case(op, [g.tensor([160000], low=100, high=103), None], {"correction": 1},
                   name=f"{op} long offset")
        yield Case(op, [g.tensor([600, 301], torch.float64), [0]], {"correction": 0},
                   name=f"{op} outer")


def var_std_unbiased(g):
    """unbiased=, PyTorch's older spelling of correction (var, var.dim, std, std.dim), and
    kiln's C++ overloads that take it (Note [Oracle API cases])."""
    for name in ("var", "std"):
        for dt in (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32):
            for unbiased in (True, False):
                x = g.tensor([3, 4, 5], dt, "any")
                yield Case(name, [x, unbiased], name=f"{name} {dt} unbiased={unbiased}")
                for dims in ([1], [0, 2], [-1], None, []):
                    for keep in (False, True):
                        yield Case(f"{name}.dim", [g.tensor([3, 4, 5], dt, "any"), dims, unbiased, keep],
                                   name=f"{name}.dim {dt} {dims} unbiased={unbiased} keepdim={keep}")
                yield Case(f"api.{name}", [g.tensor([4, 6], dt, "any"), [1], unbiased, True],
                           ref=lambda t, d, u, k, f=getattr(torch, name): f(t, d, unbiased=u, keepdim=k),
                           name=f"api.{name} {dt} unbiased={unbiased}")
        yield Case(name, [g.tensor([5])], name=f"{name} default unbiased")
        yield Case(f"{name}.dim", [g.tensor([1, 4]), [0], True], name=f"{name}.dim one element")
        yield Case(f"{name}.dim", [g.tensor([])], {"dim": None}, name=f"{name}.dim 0-dim")
        yield Case(f"{name}.dim", [g.tensor([3, 4]), [2]], name=f"{name}.dim bad dim")


def logsumexp(g):
    for dt in ALL:
        for shape, dim_lists in DIM_CASES:
            for dims in dim_lists:
                for keep in (False, True):
                    yield Case("logsumexp", [g.tensor(shape, dt, "any"), dims, keep],
                               atol=2e-2 if dt == torch.bfloat16 else None,
                               name=f"logsumexp {dt} {shape} {dims} {keep}")
    for dt in (torch.float32, torch.float64, torch.bfloat16):
        for vals in ([NAN], [INF], [-INF], [INF, -INF], [NAN, INF]):
            yield Case("logsumexp", [specials(g, [4, 5], dt, vals, 21), [1]],
                       atol=2e-2 if dt == torch.bfloat16 else None,
                       name=f"logsumexp {dt} {vals}")
        x = torch.full([3, 4], -INF, dtype=dt)
        yield Case("logsumexp", [x, [1]], name=f"logsumexp all -inf {dt}")
        x = torch.full([3, 4], INF, dtype=dt)
        yield Case("logsumexp", [x, [0]], name=f"logsumexp all inf {dt}")
    yield Case("logsumexp", [g.tensor([3, 4], low=80, high=90), [1]], name="logsumexp large")
    yield Case("logsumexp", [g.tensor([3, 4], low=-900, high=-800, dtype=torch.float64), [0]],
               name="logsumexp very negative")
    for shape, dims in BAD_DIMS:
        yield Case("logsumexp", [g.tensor(shape), dims], name=f"logsumexp bad {dims}")
    yield Case("logsumexp", [g.tensor([100003]), [0]], name="logsumexp long")
    yield Case("logsumexp", [g.tensor([500, 300]), [0]], name="logsumexp outer")


def all_any(g):
    for dt in ALL:
        for op in ("all", "any"):
            for shape in ([3, 4], [], [0, 3], [2, 3, 5]):
                yield Case(op, [g.tensor(shape, dt, "any")], name=f"{op} {dt} {shape}")
                # Mostly-zero and all-nonzero inputs decide both results.
                yield Case(op, [sparse(g, shape, dt)], name=f"{op} {dt} {shape} sparse")
                yield Case(op, [g.tensor(shape, dt, "any", low=1, high=3)],
                           name=f"{op} {dt} {shape} nonzero")
            for shape in ([3, 4], [], [0, 3], [3, 0], [2, 3, 5]):
                for d in range(-max(len(shape), 1), max(len(shape), 1)):
                    for keep in (False, True):
                        yield Case(f"{op}.dim", [sparse(g, shape, dt), d, keep],
                                   name=f"{op}.dim {dt} {shape} {d} {keep}")
    for op in ("all", "any"):
        yield Case(op, [specials(g, [3, 3], torch.float32, [NAN], 1).mul(0)], name=f"{op} nan")
        yield Case(f"{op}.dim", [g.tensor([2, 3]), 2], name=f"{op}.dim out of range")
        yield Case(op, [g.tensor([100000], torch.uint8, low=1, high=3)], name=f"{op} long")


NORM_PS = [0, 1, 2, 3, 0.5, INF, -INF, -1, 2.5]


def norm_tol(dt):
    """PyTorch 1.13 accumulates 16-bit float norms in the 16-bit type, rounding
    every step; kiln accumulates in double. Roots amplify the difference."""
    return {"rtol": {torch.float16: 5e-3, torch.bfloat16: 4e-2}.get(dt)}


def norms(g):
    for dt in ALL:
        for p in NORM_PS:
            for shape in ([3, 4], [], [0, 3]):
                yield Case("norm.Scalar", [g.tensor(shape, dt, "any"), p], **norm_tol(dt),
                           name=f"norm {dt} {shape} p={p}")
        for shape, dim_lists in DIM_CASES:
            for dims in dim_lists:
                for keep in (False, True):
                    yield Case("norm.ScalarOpt_dim", [g.tensor(shape, dt, "any"), 2, dims, keep],
                               **norm_tol(dt), name=f"norm.dim {dt} {shape} {dims} {keep}")
    for p in NORM_PS + [None]:
        for dt in FLOATS:
            yield Case("norm.ScalarOpt_dim", [g.tensor([4, 5], dt, "any"), p, [1], True],
                       **norm_tol(dt), name=f"norm.dim {dt} p={p}")
            yield Case("norm.ScalarOpt_dim", [g.tensor([0, 5], dt, "any"), p, [0]],
                       name=f"norm.dim empty {dt} p={p}")
            yield Case("norm.ScalarOpt_dim", [g.tensor([3, 0], dt, "any"), p, [0]],
                       name=f"norm.dim empty output {dt} p={p}")
        for vals in ([NAN], [INF], [-INF], [0.0, 0.0, 0.0]):
            yield Case("norm.ScalarOpt_dim", [specials(g, [4, 5], torch.float32, vals, 2), p,
                                              [1]], name=f"norm p={p} {vals}")
    for shape, dims in BAD_DIMS:
        yield Case("norm.ScalarOpt_dim", [g.tensor(shape), 2, dims], name=f"norm bad {dims}")
    yield Case("norm.Scalar", [g.tensor([100003]), 2], name="norm long")
    yield Case("norm.Scalar", [g.tensor([100003]), INF], name="norm inf long")
    yield Case("norm.ScalarOpt_dim", [g.tensor([400, 300]), 1, [0]], name="norm outer")


def nan_tie_rows(g):
    """Rows of NaN, ties, +-inf and +-0 (every float dtype, contiguous,
    transposed and strided): a NaN wins max and min, the first of equal
    values gives the index, reduced along either dim and over all."""
    rows = torch.tensor([[1, NAN, 3, NAN], [NAN, 2, 2, 1], [2, 2, 1, 2], [-INF, -INF, INF, INF],
                         [0.0, -0.0, 0.0, -0.0], [NAN, NAN, NAN, NAN], [INF, NAN, -INF, 1]])
    for dt in FLOATS:
        x = rows.to(dt)
        for lay, xx in (("contiguous", x), ("transposed", x.t().contiguous().t()),
                        ("strided", torch.cat([x, x], 1)[:, ::2])):
            for d in (0, 1):
                for op in ("argmax", "argmin", "max.dim", "min.dim"):
                    yield Case(op, [xx, d, True], name=f"{op} {dt} {lay} nan/tie rows dim {d}")
                for op in ("amax", "amin"):
                    yield Case(op, [xx, [d]], name=f"{op} {dt} {lay} nan/tie rows dim {d}")
            for op in ("max", "min", "argmax", "argmin"):
                yield Case(op, [xx], name=f"{op} {dt} {lay} nan/tie rows")


def cases(g):
    yield from sum_mean_prod(g)
    yield from nan_tie_rows(g)
    yield from extremes(g)
    yield from var_std(g)
    yield from var_std_unbiased(g)
    yield from logsumexp(g)
    yield from all_any(g)
    yield from norms(g)
