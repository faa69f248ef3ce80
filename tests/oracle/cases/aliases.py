"""Ops PyTorch spells two ways, under their second spelling (runtime/ops/aliases.cpp):
max(a, b) / min(a, b) for maximum / minimum, narrow with a tensor start, and the method
form x.where(cond, y) (Note [Oracle API cases]). Non-contiguous and broadcast inputs."""

import torch

from generate import ALL, Case

WRITABLE = ["contiguous", "transposed", "strided", "offset"]


def max_min_cases(g):
    for name in ("max", "min"):
        ref = getattr(torch, "maximum" if name == "max" else "minimum")
        for dt in ALL:
            for layout in g.LAYOUTS:
                a = g.tensor([3, 4], dt, layout)
                yield Case(f"{name}.other", [a, g.tensor([4], dt, "any")],
                           name=f"{name}.other {dt} {layout} broadcast")
                yield Case(f"{name}.other", [g.tensor([3, 1], dt, "any"), a],
                           name=f"{name}.other {dt} {layout} both broadcast")
            yield Case(f"api.{name}", [g.tensor([2, 3], dt, "any"), g.tensor([3], dt, "any")],
                       ref=ref, name=f"api.{name} {dt}")
        for da, db in ((torch.int32, torch.float16), (torch.bool, torch.int8),
                       (torch.float32, torch.float64), (torch.uint8, torch.int64)):
            yield Case(f"{name}.other", [g.tensor([2, 3], da), g.tensor([2, 3], db)],
                       name=f"{name}.other promote {da} {db}")
        nan = float("nan")
        yield Case(f"{name}.other", [torch.tensor([1.0, nan, 3.0]), torch.tensor([nan, 2.0, 1.0])],
                   name=f"{name}.other nan")
        yield Case(f"{name}.other", [g.tensor([]), g.tensor([2, 2])], name=f"{name}.other 0-dim")
        yield Case(f"{name}.other", [g.tensor([3]), g.tensor([4])], name=f"{name}.other bad broadcast")
        for layout in WRITABLE:
            yield Case(f"{name}.out", [g.tensor([3, 4]), g.tensor([4], layout="any")],
                       {"out": g.tensor([3, 4], torch.float32, layout)},
                       name=f"{name}.out {layout}")
        yield Case(f"{name}.out", [g.tensor([3, 4]), g.tensor([4])], {"out": g.tensor([0])},
                   name=f"{name}.out resize")


def narrow_cases(g):
    for layout in g.LAYOUTS:
        x = g.tensor([5, 6], torch.float32, layout)
        for dim, start, length in ((0, 1, 3), (1, -4, 2), (-1, 0, 6), (0, 5, 0)):
            for sdt in (torch.int64, torch.int32, torch.int8):
                s = torch.tensor(start, dtype=sdt)
                yield Case("narrow.Tensor", [x, dim, s, length], check_strides=True,
                           name=f"narrow.Tensor {layout} {dim} {start} {length} {sdt}")
        yield Case("Tensor.narrow", [x, 1, torch.tensor(2), 3],
                   ref=lambda t, d, s, n: t.narrow(d, s, n), name=f"Tensor.narrow {layout}")
    x = g.tensor([5, 6])
    yield Case("narrow.Tensor", [x, 0, torch.tensor([1]), 2], name="narrow.Tensor 1-D start")
    yield Case("narrow.Tensor", [x, 0, torch.tensor(1.0), 2], name="narrow.Tensor float start")
    yield Case("narrow.Tensor", [x, 0, torch.tensor(True), 2], name="narrow.Tensor bool start")
    yield Case("narrow.Tensor", [x, 0, torch.tensor(4), 2], name="narrow.Tensor past the end")
    yield Case("narrow.Tensor", [x, 2, torch.tensor(0), 1], name="narrow.Tensor bad dim")


def where_method_cases(g):
    def method(x, cond, y):
        return x.where(cond, y)
    for dt in ALL:
        for layout in g.LAYOUTS:
            x = g.tensor([3, 4], dt, layout)
            yield Case("Tensor.where", [x, g.tensor([3, 4], torch.bool, "any"),
                                        g.tensor([4], dt, "any")], ref=method,
                       name=f"Tensor.where {dt} {layout}")
        yield Case("Tensor.where", [g.tensor([4], dt), g.tensor([3, 1], torch.bool, "any"),
                                    g.tensor([3, 4], dt, "any")], ref=method,
                   name=f"Tensor.where {dt} broadcast")
    for da, db in ((torch.int32, torch.float32), (torch.float16, torch.bfloat16),
                   (torch.bool, torch.int64)):
        yield Case("Tensor.where", [g.tensor([2, 3], da), g.tensor([2, 3], torch.bool),
                                    g.tensor([2, 3], db)], ref=method, name=f"Tensor.where {da} {db}")
    # A scalar other (torch 1.13's method takes tensors only; torch.where broadcasts it).
    for v in (2, 0.5, True):
        yield Case("Tensor.where", [g.tensor([2, 3]), g.tensor([2, 3], torch.bool), v],
                   ref=lambda x, c, y: torch.where(c, x, torch.tensor(y, dtype=x.dtype)),
                   name=f"Tensor.where scalar {v}")
    yield Case("Tensor.where", [g.tensor([2, 3]), g.tensor([2, 3], torch.float32),
                                g.tensor([2, 3])], ref=method, name="Tensor.where float condition")
    yield Case("Tensor.where", [g.tensor([2, 3]), g.tensor([4], torch.bool), g.tensor([2, 3])],
               ref=method, name="Tensor.where bad broadcast")


def cases(g):
    yield from max_min_cases(g)
    yield from narrow_cases(g)
    yield from where_method_cases(g)
