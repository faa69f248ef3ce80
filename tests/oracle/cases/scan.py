"""cumsum and cumprod (+ out=): every dtype (and PyTorch 1.13's refusals), all
layouts, every dim of 0-dim to 3-d inputs, empty inputs, dtype= arguments, NaN
and inf, out= dtypes, resizes and layouts, and long scans."""

import torch

from generate import ALL, FLOATS, Case

NAN, INF = float("nan"), float("inf")
SHAPES = [[3, 4], [], [0, 3], [2, 3, 5], [7], [1, 6]]


def put(t, values, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for v in values:
            i = int(torch.randint(0, t.numel(), (1,), generator=g))
            idx = []
            for s in reversed(t.shape):
                idx.append(i % s)
                i //= s
            t[tuple(reversed(idx))] = v
    return t


def cases(g):
    for op in ("cumsum", "cumprod"):
        lo, hi = (-3, 3) if op == "cumsum" else (-1.6, 1.6)
        for dt in ALL:
            for shape in SHAPES:
                for d in range(-max(len(shape), 1), max(len(shape), 1)):
                    yield Case(op, [g.tensor(shape, dt, "any", low=lo, high=hi), d],
                               name=f"{op} {dt} {shape} {d}")
            yield Case(op, [g.tensor([2, 3], dt), 2], name=f"{op} {dt} dim out of range")
            yield Case(op, [g.tensor([], dt), 1], name=f"{op} {dt} 0-dim dim out of range")
        # dtype= casts first; float16 and bool results have no cpu kernel in 1.13
        # (except for 0-dim and empty inputs, which run none).
        for src, dst in [(torch.int32, torch.int8), (torch.float32, torch.float64),
                         (torch.int64, torch.float32), (torch.float32, torch.float16),
                         (torch.float16, torch.float32), (torch.bfloat16, torch.float32),
                         (torch.float32, torch.bool), (torch.uint8, torch.int16),
                         (torch.bool, torch.int32), (torch.float64, torch.bfloat16),
                         (torch.float32, torch.int64)]:
            x = g.tensor([5, 6], src, "any", low=-40, high=120)
            if op == "cumprod":
                x = g.tensor([5, 6], src, "any", low=-2, high=3)
            yield Case(op, [x, 1], {"dtype": dst}, name=f"{op} {src} dtype {dst}")
            yield Case(op, [x, 0], {"dtype": dst}, name=f"{op} {src} dtype {dst} dim 0")
            yield Case(op, [g.tensor([], src), 0], {"dtype": dst},
                       name=f"{op} 0-dim {src} dtype {dst}")
            yield Case(op, [g.tensor([0, 4], src), 1], {"dtype": dst},
                       name=f"{op} empty {src} dtype {dst}")
        for dt in FLOATS:
            for vals in ([NAN], [INF], [-INF], [INF, -INF], [0.0]):
                yield Case(op, [put(g.tensor([4, 6], dt, "contiguous"), vals, 5), 1],
                           name=f"{op} {dt} {vals}")
                yield Case(op, [put(g.tensor([6, 4], dt, "transposed"), vals, 6), 0],
                           name=f"{op} {dt} {vals} dim 0")
        # out=: the out tensor's dtype is the compute dtype; dtype= must match it.
        x = g.tensor([3, 4], torch.float32, "any", low=-2, high=2)
        xi = g.tensor([3, 4], torch.int64, "any", low=-50, high=100)
        for src in (x, xi):
            for out_dt in (torch.float32, torch.float64, torch.int64, torch.int8, torch.bfloat16,
                           torch.float16, torch.bool):
                yield Case(f"{op}.out", [src, 1], {"out": g.tensor([3, 4], out_dt, "offset")},
                           name=f"{op}.out {src.dtype} into {out_dt}")
        yield Case(f"{op}.out", [x, 1], {"dtype": torch.float64,
                                         "out": g.tensor([3, 4], torch.float64, "strided")},
                   name=f"{op}.out dtype match")
        yield Case(f"{op}.out", [x, 1], {"dtype": torch.float64, "out": g.tensor([3, 4])},
                   name=f"{op}.out dtype mismatch")
        yield Case(f"{op}.out", [x, 0], {"out": g.tensor([0])}, name=f"{op}.out resize")
        yield Case(f"{op}.out", [x, 0], {"out": g.tensor([20])}, name=f"{op}.out resize larger")
        yield Case(f"{op}.out", [x, 0], {"out": g.tensor([4, 3], layout="contiguous").t()},
                   name=f"{op}.out transposed")
        yield Case(f"{op}.out", [g.tensor([]), 0], {"out": g.tensor([3], torch.float16)},
                   name=f"{op}.out 0-dim into float16")
        # Long scans: lines in parallel, adjacent lines in blocks.
        yield Case(op, [g.tensor([3, 40000], low=lo, high=hi), 1], name=f"{op} long rows")
        yield Case(op, [g.tensor([40000, 3], low=lo, high=hi), 0], name=f"{op} long columns")
        yield Case(op, [g.tensor([300, 200], torch.bfloat16, "any", low=lo, high=hi), 0],
                   name=f"{op} blocks")
        yield Case(op, [g.tensor([50000], torch.int32, low=-100, high=100), 0],
                   name=f"{op} long int")
