"""copy_, fill_, clone, contiguous, _to_copy and full/zeros/ones."""

import torch

from generate import ALL, FLOATS, Case


def cases(g):
    for dt in ALL:
        for layout in g.LAYOUTS:
            if layout == "expanded":
                continue  # writing into a stride-0 view is an error in both
            dst = g.tensor([3, 4], dt, layout)
            yield Case("fill_.Scalar", [dst, 2], name=f"fill_ {dt} {layout}")
            src = g.tensor([3, 4], FLOATS[0], "any")
            yield Case("copy_", [g.tensor([3, 4], dt, layout), src],
                       name=f"copy_ float32->{dt} {layout}")
    # Broadcast source, 0-dim, empty.
    yield Case("copy_", [g.tensor([2, 3, 4]), g.tensor([4], torch.float64)])
    yield Case("copy_", [g.tensor([2, 3]), g.tensor([], torch.int64)])
    yield Case("copy_", [g.tensor([0, 3]), g.tensor([3])])
    yield Case("copy_", [g.tensor([2, 3]), g.tensor([3, 2])], name="copy_ bad shape")
    for dt in ALL:
        x = g.tensor([2, 5, 3], dt, "any")
        yield Case("clone", [x])
        yield Case("contiguous", [x], ref=lambda t: t.contiguous(), check_strides=True)
        for to in (torch.float32, torch.int64, torch.bool, torch.float16):
            yield Case("_to_copy", [x], {"dtype": to})
    yield Case("_to_copy", [g.tensor([4, 3], torch.float32, "transposed")],
               {"dtype": torch.float64}, check_strides=True, name="_to_copy keeps layout")
    for size in ([2, 3], [], [0, 4]):
        for dt in (None, torch.int32, torch.bool, torch.float16):
            kw = {} if dt is None else {"dtype": dt}
            yield Case("zeros", [size], kw)
            yield Case("ones", [size], kw)
        yield Case("full", [size, 7], {})
        yield Case("full", [size, 2.5], {})
        # torch.ops.aten.full treats a Python bool as an int; torch.full infers bool.
        yield Case("full", [size, True], {}, ref=lambda s, v: torch.full(s, v))
    yield Case("full", [[-1, 2], 1.0], {}, name="full negative size")
