"""add, sub, mul, div and comparisons: every form, dtype mixes, broadcasts, 0-dim, empty."""

import torch

from generate import ALL, FLOATS, INTS, Case

SHAPES = [([3, 4], [3, 4]), ([2, 3, 4], [4]), ([3, 1], [1, 5]), ([], [2, 3]), ([0, 3], [3]),
          ([2, 3], [])]
OPS = ["add", "sub", "mul", "div", "eq", "ne", "lt", "le", "gt", "ge"]


def cases(g):
    for op in OPS:
        for dt in ALL:
            if op == "sub" and dt == torch.bool:
                yield Case("sub.Tensor", [g.tensor([3], dt), g.tensor([3], dt)], name="sub bool")
                continue
            for sa, sb in SHAPES:
                a, b = g.tensor(sa, dt, "any"), g.tensor(sb, dt, "any")
                yield Case(f"{op}.Tensor", [a, b], name=f"{op} {dt} {sa} {sb}")
        # Mixed dtypes and 0-dim / wrapped-number promotion.
        for da, db in [(torch.int32, torch.float16), (torch.uint8, torch.int8),
                       (torch.float16, torch.bfloat16), (torch.bool, torch.int64),
                       (torch.int64, torch.float64), (torch.float32, torch.float64)]:
            yield Case(f"{op}.Tensor", [g.tensor([2, 3], da, "any"), g.tensor([3], db, "any")])
            yield Case(f"{op}.Tensor", [g.tensor([2, 3], da, "any"), g.tensor([], db)])
        for dt in (torch.float16, torch.int32, torch.uint8, torch.bool):
            for s in (2, 2.5, True):
                # torch.ops.aten treats a Python bool as an int; torch.<op> keeps it a bool.
                yield Case(f"{op}.Scalar", [g.tensor([2, 3], dt, "any"), s],
                           ref=getattr(torch, op), name=f"{op}.Scalar {dt} {s!r}")
    # alpha
    for dt in (torch.float32, torch.int64, torch.float16):
        yield Case("add.Tensor", [g.tensor([4, 3], dt, "any"), g.tensor([3], dt)], {"alpha": 3})
        yield Case("sub.Tensor", [g.tensor([4, 3], dt, "any"), g.tensor([3], dt)], {"alpha": 2})
    yield Case("add.Tensor", [g.tensor([3], torch.float32), g.tensor([3])], {"alpha": 0.5})
    yield Case("add.Tensor", [g.tensor([3], torch.int64), g.tensor([3], torch.int64)],
               {"alpha": 0.5}, name="add float alpha on ints")
    # Alphas the dtype cannot hold: PyTorch's CPU kernel converts alpha to the
    # dtype first (0.3 is 0.30078125 in bfloat16); integers refuse them.
    for dt in [torch.float16, torch.bfloat16, torch.float32, torch.float64] + INTS:
        for alpha in (0.3, -1.7, 1e-3):
            for op in ("add", "sub"):
                yield Case(f"{op}.Tensor", [g.tensor([4, 3], dt, "any"), g.tensor([3], dt, "any")],
                           {"alpha": alpha}, name=f"{op} {dt} alpha {alpha}")
            yield Case("add_.Tensor", [g.tensor([4, 3], dt, "contiguous"), g.tensor([4, 3], dt, "any")],
                       {"alpha": alpha}, name=f"add_ {dt} alpha {alpha}")
    # In place and out=.
    for op in ["add", "sub", "mul", "div", "lt", "eq"]:
        for da, db in [(torch.float32, torch.float32), (torch.float32, torch.int64),
                       (torch.float16, torch.float32), (torch.int64, torch.float32)]:
            self_ = g.tensor([3, 4], da, "contiguous")
            yield Case(f"{op}_.Tensor", [self_, g.tensor([4], db, "any")],
                       name=f"{op}_ {da} {db}")
        yield Case(f"{op}_.Tensor", [g.tensor([4]), g.tensor([3, 4])], name=f"{op}_ broadcast self")
        out_name = "out" if op in ("add", "sub", "mul", "div") else "Tensor_out"
        for out_dt in (torch.float32, torch.float64, torch.int64, torch.bool):
            yield Case(f"{op}.{out_name}", [g.tensor([3, 4]), g.tensor([4])],
                       {"out": g.tensor([3, 4], out_dt, "transposed")},
                       name=f"{op}.out into {out_dt}")
        yield Case(f"{op}.{out_name}", [g.tensor([3, 4]), g.tensor([4])],
                   {"out": g.tensor([0], torch.float32)}, name=f"{op}.out resize")
        yield Case(f"{op}.{out_name}", [g.tensor([3, 4]), g.tensor([4])],
                   {"out": g.tensor([5], torch.float32)}, name=f"{op}.out wrong shape")
    # Shape errors.
    yield Case("add.Tensor", [g.tensor([3, 4]), g.tensor([5])], name="add bad broadcast")
    yield Case("mul.Tensor", [g.tensor([2, 3]), g.tensor([3, 2])], name="mul bad broadcast")
