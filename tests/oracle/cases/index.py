"""index_select, gather, scatter, scatter_add, the scatter reductions (scatter.reduce,
scatter_reduce.two), index_copy, masked_fill, index_add, one_hot, nonzero, argwhere,
masked_select and index_put (all indices defined): every form, all dtypes, every generator
layout for inputs and in-place targets, int32/int64 indices in several layouts, 0-dim,
empty, out-of-range indices and duplicate indices (scatter_add, the reductions)."""

import torch

from generate import ALL, FLOATS, INTS, Case

WRITABLE = ["contiguous", "transposed", "strided", "offset"]


def relayout(t, layout):
    """`t`'s values stored in `layout` (indices, masks and other value-exact inputs)."""
    shape = list(t.shape)
    if t.dim() == 0 or layout == "contiguous":
        return t.clone()
    if layout == "transposed" and t.dim() >= 2:
        perm = list(range(t.dim()))[::-1]
        return t.permute(perm).contiguous().permute(perm)
    if layout in ("strided", "transposed"):
        buf = torch.zeros(shape[:-1] + [shape[-1] * 2], dtype=t.dtype)
        buf[..., ::2] = t
        return buf[..., ::2]
    if layout == "offset":
        buf = torch.zeros([s + 1 for s in shape], dtype=t.dtype)
        view = buf[tuple(slice(1, None) for _ in shape)]
        view.copy_(t)
        return view
    raise ValueError(layout)


def unique_index(g, shape, dim, size):
    """An int64 index of `shape` whose entries along `dim` are distinct, in [0, size)."""
    full = list(shape)
    full[dim] = size
    perm = torch.rand(full, generator=g.rng).argsort(dim=dim)
    return perm.narrow(dim, 0, shape[dim]).contiguous()


def cases(g):
    yield from index_select_cases(g)
    yield from gather_cases(g)
    yield from scatter_cases(g)
    yield from scatter_reduce_cases(g)
    yield from index_copy_cases(g)
    yield from masked_fill_cases(g)
    yield from index_add_cases(g)
    yield from one_hot_cases(g)
    yield from nonzero_cases(g)
    yield from masked_select_cases(g)
    yield from index_put_cases(g)


def index_select_cases(g):
    layouts = WRITABLE + ["contiguous"]
    for dt in ALL:
        for i, layout in enumerate(g.LAYOUTS):
            x = g.tensor([5, 4], dt, layout)
            idx_layout = layouts[i % len(layouts)]
            yield Case("index_select", [x, 0, relayout(g.index([6], 5), idx_layout)],
                       name=f"index_select {dt} {layout}")
            yield Case("index_select", [x, -1, relayout(g.index([3], 4, torch.int32), "strided")],
                       name=f"index_select int32 {dt} {layout}")
    x3 = g.tensor([3, 4, 5], torch.float32, "any")
    for dim in (0, 1, 2, -2):
        yield Case("index_select", [x3, dim, g.index([7], x3.shape[dim])], name=f"index_select 3-D {dim}")
    x = g.tensor([5, 4])
    yield Case("index_select", [x, 1, torch.tensor(2)], name="index_select 0-dim index")
    yield Case("index_select", [g.tensor([4]), 0, torch.tensor(3)], name="index_select 1-D 0-dim index")
    yield Case("index_select", [g.tensor([]), 0, torch.tensor([0])], name="index_select 0-dim self")
    yield Case("index_select", [g.tensor([]), -1, torch.tensor(0)], name="index_select 0-dim both")
    yield Case("index_select", [x, 0, torch.zeros(0, dtype=torch.int64)], name="index_select empty index")
    yield Case("index_select", [g.tensor([0, 3]), 0, torch.zeros(0, dtype=torch.int64)],
               name="index_select empty self")
    yield Case("index_select", [g.tensor([2, 0]), 0, torch.tensor([1, 0, 1])],
               name="index_select empty slices")
    # Errors.
    yield Case("index_select", [x, 0, torch.tensor([1, 5])], name="index_select out of range")
    yield Case("index_select", [x, 0, torch.tensor([1, -1])], name="index_select negative")
    yield Case("index_select", [g.tensor([]), 0, torch.tensor([1])], name="index_select 0-dim oob")
    yield Case("index_select", [g.tensor([0, 3]), 0, torch.tensor([0])], name="index_select empty self oob")
    yield Case("index_select", [x, 0, torch.tensor([1], dtype=torch.int16)], name="index_select int16")
    yield Case("index_select", [x, 0, torch.tensor([1.0])], name="index_select float index")
    yield Case("index_select", [x, 0, torch.tensor([[1]])], name="index_select 2-D index")
    yield Case("index_select", [x, 2, torch.tensor([1])], name="index_select bad dim")
    # out=.
    for layout in WRITABLE:
        yield Case("index_select.out", [x, 1, torch.tensor([3, 0, 3])],
                   {"out": g.tensor([5, 3], torch.float32, layout)}, name=f"index_select.out {layout}")
    yield Case("index_select.out", [x, 0, torch.tensor([3, 0])], {"out": g.tensor([0])},
               name="index_select.out resize")
    yield Case("index_select.out", [x, 0, torch.tensor([3, 0])],
               {"out": g.tensor([2, 4], torch.float64)}, name="index_select.out wrong dtype")


def gather_cases(g):
    for dt in ALL:
        for layout in g.LAYOUTS:
            x = g.tensor([4, 5], dt, layout)
            yield Case("gather", [x, 1, relayout(g.index([4, 7], 5), "transposed")],
                       name=f"gather {dt} {layout} dim 1")
            yield Case("gather", [x, 0, relayout(g.index([3, 2], 4), "strided")],
                       name=f"gather {dt} {layout} dim 0")
    x3 = g.tensor([3, 4, 5], torch.float32, "any")
    for dim in (0, 1, 2, -1):
        shape = [2, 3, 4]
        shape[dim] = 6
        yield Case("gather", [x3, dim, g.index(shape, x3.shape[dim])], name=f"gather 3-D {dim}")
    yield Case("gather", [g.tensor([]), 0, torch.tensor(0)], name="gather 0-dim")
    yield Case("gather", [g.tensor([]), 0, torch.tensor([0, 0])], name="gather 0-dim self 1-D index")
    yield Case("gather", [g.tensor([3]), 0, torch.tensor(2)], name="gather 1-D self 0-dim index")
    yield Case("gather", [g.tensor([4, 5]), 0, torch.zeros(0, 9, dtype=torch.int64)],
               name="gather empty index")
    yield Case("gather", [g.tensor([4, 5]), 0, torch.zeros(0, dtype=torch.int32)],
               name="gather empty int32 index any rank")
    yield Case("gather", [g.tensor([4, 5]), 1, torch.zeros(2, 3, dtype=torch.int64)],
               kwargs={"sparse_grad": True}, name="gather sparse_grad")
    # Errors.
    x = g.tensor([4, 5])
    yield Case("gather", [x, 1, torch.tensor([[5]])], name="gather out of range")
    yield Case("gather", [x, 1, torch.tensor([[-1]])], name="gather negative")
    yield Case("gather", [x, 1, torch.tensor([[1]], dtype=torch.int32)], name="gather int32")
    yield Case("gather", [x, 1, torch.tensor([1])], name="gather rank mismatch")
    yield Case("gather", [x, 1, torch.zeros(5, 1, dtype=torch.int64)], name="gather index too big")
    yield Case("gather", [g.tensor([0, 2]), 0, torch.zeros(1, 1, dtype=torch.int64)],
               name="gather empty self")
    yield Case("gather", [x, 2, torch.zeros(1, 1, dtype=torch.int64)], name="gather bad dim")
    # out=.
    for layout in WRITABLE:
        yield Case("gather.out", [x, 1, g.index([4, 3], 5)],
                   {"out": g.tensor([4, 3], torch.float32, layout)}, name=f"gather.out {layout}")
    yield Case("gather.out", [x, 1, g.index([2, 3], 5)], {"out": g.tensor([7])},
               name="gather.out resize")
    yield Case("gather.out", [x, 1, g.index([2, 3], 5)], {"out": g.tensor([2, 3], torch.float64)},
               name="gather.out wrong dtype")


def scatter_cases(g):
    for dt in ALL:
        for layout in g.LAYOUTS:
            self_ = g.tensor([4, 5], dt, layout)
            src = g.tensor([3, 6], dt, "any")
            idx = relayout(unique_index(g, [3, 4], 1, 5), "transposed")
            yield Case("scatter.src", [self_, 1, idx, src], name=f"scatter.src {dt} {layout}")
            yield Case("scatter.value", [self_, 0, unique_index(g, [2, 5], 0, 4), 2],
                       name=f"scatter.value {dt} {layout}")
            if layout != "expanded":
                yield Case("scatter_.src", [g.tensor([4, 5], dt, layout), 0,
                                            relayout(unique_index(g, [3, 2], 0, 4), "strided"), src],
                           name=f"scatter_.src {dt} {layout}")
                yield Case("scatter_.value", [g.tensor([4, 5], dt, layout), 1,
                                              unique_index(g, [4, 2], 1, 5), 1],
                           name=f"scatter_.value {dt} {layout}")
            # Repeated indices: scatter_add sums them in a fixed order.
            idx_dup = g.index([6, 5], 4)
            yield Case("scatter_add", [self_, 0, idx_dup, g.tensor([6, 5], dt, "any")],
                       name=f"scatter_add {dt} {layout}")
            if layout != "expanded":
                yield Case("scatter_add_", [g.tensor([4, 5], dt, layout), 1,
                                            relayout(g.index([4, 9], 5), "offset"),
                                            g.tensor([4, 9], dt, "any")],
                           name=f"scatter_add_ {dt} {layout}")
    x3 = g.tensor([3, 4, 5], torch.float32, "any")
    for dim in (0, 1, 2):
        shape = [2, 3, 4]
        yield Case("scatter.src", [x3, dim, unique_index(g, shape, dim, x3.shape[dim]),
                                   g.tensor([3, 4, 5])], name=f"scatter 3-D {dim}")
        big = list(shape)
        big[dim] = 9
        yield Case("scatter_add", [x3, dim, g.index(big, x3.shape[dim]), g.tensor(big)],
                   name=f"scatter_add 3-D {dim}")
    # Index longer than self along dim (allowed; repeats summed).
    yield Case("scatter_add", [g.tensor([3, 4]), 0, g.index([5, 2], 3), g.tensor([5, 2])],
               name="scatter_add long index")
    yield Case("scatter_add", [g.tensor([4], torch.int8), 0, torch.tensor([0, 0, 0, 1]),
                               torch.full([4], 100, dtype=torch.int8)], name="scatter_add int8 wraps")
    yield Case("scatter_add", [g.tensor([3], torch.bool), 0, torch.tensor([0, 0, 2]),
                               torch.tensor([True, False, False])], name="scatter_add bool")
    # Values are converted to self's dtype.
    for dt, v in [(torch.int8, 2.7), (torch.bool, 2), (torch.uint8, -1), (torch.float16, 1e6),
                  (torch.int8, 1000), (torch.float32, 1e300), (torch.int32, float("nan")),
                  (torch.float32, float("inf")), (torch.uint8, -1.0)]:
        yield Case("scatter.value", [g.tensor([3, 4], dt), 0, torch.tensor([[1]]), v],
                   name=f"scatter.value {dt} {v}")
    yield Case("scatter.src", [g.tensor([]), 0, torch.tensor(0), g.tensor([])], name="scatter 0-dim")
    yield Case("scatter_add", [g.tensor([]), 0, torch.tensor([0, 0]), g.tensor([2])],
               name="scatter_add 0-dim self")
    yield Case("scatter.src", [g.tensor([3, 4]), 0, torch.zeros(0, dtype=torch.int32), g.tensor([1])],
               name="scatter empty index")
    # Errors.
    s = g.tensor([3, 4])
    yield Case("scatter.src", [s, 0, torch.tensor([[3]]), g.tensor([1, 1])], name="scatter out of range")
    yield Case("scatter.src", [s, 0, torch.tensor([[-1]]), g.tensor([1, 1])], name="scatter negative")
    yield Case("scatter_add", [s, 1, torch.tensor([[4]]), g.tensor([1, 1])], name="scatter_add out of range")
    yield Case("scatter.src", [s, 0, torch.tensor([[0]], dtype=torch.int32), g.tensor([1, 1])],
               name="scatter int32")
    yield Case("scatter.src", [s, 0, torch.tensor([[0]]), g.tensor([1, 1], torch.float64)],
               name="scatter src dtype")
    yield Case("scatter_add", [s, 0, torch.zeros(0, dtype=torch.int64), g.tensor([1, 1], torch.float64)],
               name="scatter_add empty index src dtype")
    yield Case("scatter.src", [s, 0, torch.tensor([[0, 1]]), g.tensor([1, 1])], name="scatter src small")
    yield Case("scatter.src", [s, 0, torch.zeros(1, 5, dtype=torch.int64), g.tensor([1, 5])],
               name="scatter self small")
    yield Case("scatter.src", [s, 0, torch.tensor([0]), g.tensor([1, 1])], name="scatter rank")
    yield Case("scatter.src", [s, 0, torch.tensor([[0]]), g.tensor([1])], name="scatter src rank")
    yield Case("scatter_.src", [g.tensor([3, 4], torch.float32, "expanded"), 0, torch.tensor([[0]]),
                                g.tensor([1, 1])], name="scatter_ expanded self")
    yield Case("scatter_add_", [g.tensor([3, 4], torch.float32, "expanded"), 0, torch.tensor([[0]]),
                                g.tensor([1, 1])], name="scatter_add_ expanded self")


def scatter_reduce_cases(g):
    """Note [Scatter reductions]: repeated indices combine in index order; 16-bit floats
    round at every step, as torch's CPU kernel does."""
    nan = float("nan")
    for dt in ALL:
        for layout in g.LAYOUTS:
            self_ = g.tensor([4, 5], dt, layout)
            idx = relayout(g.index([6, 5], 4), "transposed")
            for reduce in ("add", "multiply"):
                yield Case("scatter.reduce", [self_, 0, idx, g.tensor([6, 5], dt, "any")],
                           {"reduce": reduce}, name=f"scatter.reduce {reduce} {dt} {layout}")
                yield Case("scatter.value_reduce", [self_, 1, g.index([4, 7], 5), 2],
                           {"reduce": reduce}, name=f"scatter.value_reduce {reduce} {dt} {layout}")
                if layout != "expanded":
                    yield Case("scatter_.reduce", [g.tensor([4, 5], dt, layout), 1,
                                                   relayout(g.index([3, 8], 5), "strided"),
                                                   g.tensor([3, 8], dt, "any")], {"reduce": reduce},
                               name=f"scatter_.reduce {reduce} {dt} {layout}")
                    yield Case("scatter_.value_reduce", [g.tensor([4, 5], dt, layout), 0,
                                                         g.index([6, 2], 4), 3], {"reduce": reduce},
                               name=f"scatter_.value_reduce {reduce} {dt} {layout}")
        for reduce in ("sum", "prod", "mean", "amax", "amin"):
            for include_self in (True, False):
                tag = f"{reduce} {dt} include_self={include_self}"
                yield Case("scatter_reduce.two",
                           [g.tensor([4, 5], dt, "any"), 0, g.index([7, 5], 4),
                            g.tensor([7, 5], dt, "any"), reduce], {"include_self": include_self},
                           name=f"scatter_reduce {tag}")
                yield Case("scatter_reduce_.two",
                           [g.tensor([4, 5], dt, WRITABLE[len(tag) % len(WRITABLE)]), 1,
                            relayout(g.index([4, 9], 5), "offset"), g.tensor([4, 9], dt, "any"),
                            reduce], {"include_self": include_self},
                           name=f"scatter_reduce_ {tag}")
    for reduce in ("sum", "prod", "mean", "amax", "amin"):
        for layout in g.LAYOUTS:
            yield Case("scatter_reduce.two",
                       [g.tensor([4, 5], torch.float32, layout), 1,
                        relayout(g.index([3, 7], 5), WRITABLE[len(layout) % len(WRITABLE)]),
                        g.tensor([3, 7], torch.float32, layout), reduce],
                       name=f"scatter_reduce {reduce} {layout}")
        x3 = g.tensor([3, 4, 5], torch.float64, "any")
        for dim in (0, 1, 2, -1):
            big = [2, 3, 4]
            big[dim] = 9
            yield Case("scatter_reduce.two", [x3, dim, g.index(big, x3.shape[dim]), g.tensor(big),
                                              reduce], {"include_self": dim % 2 == 0},
                       name=f"scatter_reduce 3-D {reduce} {dim}")
        # NaN wins in amax / amin, from self or src.
        vals = torch.tensor([1.0, nan, 3.0, -2.0])
        yield Case("scatter_reduce.two", [vals, 0, torch.tensor([0, 0, 1, 1, 3]),
                                          torch.tensor([nan, 2.0, 5.0, -1.0, 0.5]), reduce],
                   name=f"scatter_reduce {reduce} nan")
        yield Case("scatter_reduce.two", [g.tensor([]), 0, torch.tensor([0, 0]), g.tensor([2]),
                                          reduce], name=f"scatter_reduce {reduce} 0-dim self")
        yield Case("scatter_reduce.two", [g.tensor([3, 4]), 0, torch.zeros(0, dtype=torch.int64),
                                          g.tensor([1]), reduce], name=f"scatter_reduce {reduce} empty")
    # Integer mean floors, negative sums included; sums and products wrap.
    yield Case("scatter_reduce.two", [torch.tensor([-1, 2, 3, 4]), 0, torch.tensor([0, 0, 1]),
                                      torch.tensor([2, -8, 5]), "mean"], name="scatter_reduce mean floor")
    yield Case("scatter_reduce.two", [torch.tensor([100, 2], dtype=torch.int8), 0,
                                      torch.tensor([0, 0, 1]),
                                      torch.tensor([100, 90, 5], dtype=torch.int8), "sum"],
               name="scatter_reduce int8 sum wraps")
    yield Case("scatter.reduce", [torch.tensor([100, 7], dtype=torch.int16), 0,
                                  torch.tensor([0, 0, 1]),
                                  torch.tensor([300, 300, 5], dtype=torch.int16)],
               {"reduce": "multiply"}, name="scatter.reduce int16 product wraps")
    yield Case("scatter.value_reduce", [g.tensor([3, 4], torch.int32), 0, torch.tensor([[1, 2]]), 2.7],
               {"reduce": "add"}, name="scatter.value_reduce float value into int")
    # Errors.
    s_ = g.tensor([3, 4])
    yield Case("scatter.reduce", [s_, 0, torch.tensor([[1]]), g.tensor([1, 1])], {"reduce": "sum"},
               name="scatter.reduce bad reduce")
    yield Case("scatter.value_reduce", [s_, 0, torch.tensor([[1]]), 2], {"reduce": "mean"},
               name="scatter.value_reduce bad reduce")
    yield Case("scatter_reduce.two", [s_, 0, torch.tensor([[1]]), g.tensor([1, 1]), "add"],
               name="scatter_reduce bad reduce")
    yield Case("scatter_reduce.two", [g.tensor([3], torch.bool), 0, torch.tensor([0, 1]),
                                      g.tensor([2], torch.bool), "mean"], name="scatter_reduce bool mean")
    yield Case("scatter_reduce.two", [s_, 0, torch.tensor([[3]]), g.tensor([1, 1]), "amax"],
               name="scatter_reduce out of range")
    yield Case("scatter_reduce.two", [s_, 0, torch.tensor([[1]], dtype=torch.int32),
                                      g.tensor([1, 1]), "sum"], name="scatter_reduce int32 index")
    yield Case("scatter_reduce.two", [s_, 0, torch.tensor([[1]]), g.tensor([1, 1], torch.float64),
                                      "sum"], name="scatter_reduce src dtype")
    yield Case("scatter.reduce", [s_, 0, torch.tensor([[0, 1]]), g.tensor([1, 1])],
               {"reduce": "add"}, name="scatter.reduce src small")
    yield Case("scatter_reduce_.two", [g.tensor([3, 4], torch.float32, "expanded"), 0,
                                       torch.tensor([[0]]), g.tensor([1, 1]), "prod"],
               name="scatter_reduce_ expanded self")


def index_copy_cases(g):
    for dt in ALL:
        for layout in g.LAYOUTS:
            self_ = g.tensor([5, 3], dt, layout)
            yield Case("index_copy", [self_, 0, torch.tensor([4, 0, 2]), g.tensor([3, 3], dt, "any")],
                       name=f"index_copy {dt} {layout}")
            if layout != "expanded":
                yield Case("index_copy_", [g.tensor([4, 6], dt, layout), 1,
                                           relayout(torch.tensor([5, 1]), "strided"),
                                           g.tensor([4, 2], dt, "any")], name=f"index_copy_ {dt} {layout}")
    # A KV cache: [batch, heads, positions, dim], written at a few positions through a
    # transposed view, as attention code does.
    for layout in WRITABLE:
        cache = g.tensor([2, 8, 3, 4], torch.float32, layout).transpose(1, 2)
        yield Case("index_copy_", [cache, 2, torch.tensor([5, 6, 7]),
                                   g.tensor([2, 3, 3, 4], torch.float32, "any")],
                   name=f"index_copy_ kv cache {layout}")
    x3 = g.tensor([3, 4, 5], torch.float32, "any")
    for dim in (0, 1, -1):
        n = x3.shape[dim]
        perm = torch.randperm(n, generator=g.rng)[:2]
        shape = list(x3.shape)
        shape[dim] = 2
        yield Case("index_copy", [x3, dim, perm, g.tensor(shape)], name=f"index_copy 3-D {dim}")
    yield Case("index_copy", [g.tensor([3]), 0, torch.tensor([1]), g.tensor([])], name="index_copy 0-dim source")
    yield Case("index_copy", [g.tensor([3]), 0, torch.tensor(2), g.tensor([])], name="index_copy 0-dim both")
    yield Case("index_copy", [g.tensor([]), 0, torch.tensor([0]), g.tensor([1])], name="index_copy 0-dim self")
    yield Case("index_copy", [g.tensor([]), -1, torch.tensor(0), g.tensor([])], name="index_copy all 0-dim")
    yield Case("index_copy", [g.tensor([5, 2]), 0, torch.zeros(0, dtype=torch.int64), g.tensor([0, 2])],
               name="index_copy empty index")
    yield Case("index_copy_", [g.tensor([5, 0]), 0, torch.tensor([1, 3]), g.tensor([2, 0])],
               name="index_copy_ empty slices")
    # Errors.
    x = g.tensor([5, 2])
    yield Case("index_copy", [x, 0, torch.tensor([1, 5]), g.tensor([2, 2])], name="index_copy out of range")
    yield Case("index_copy", [x, 0, torch.tensor([1, -1]), g.tensor([2, 2])], name="index_copy negative")
    yield Case("index_copy_", [g.tensor([5, 2]), 0, torch.tensor([1, 7]), g.tensor([2, 2])],
               name="index_copy_ out of range")
    yield Case("index_copy", [x, 0, torch.tensor([1, 3], dtype=torch.int32), g.tensor([2, 2])],
               name="index_copy int32")
    yield Case("index_copy", [x, 0, torch.tensor([1, 3]), g.tensor([2, 2], torch.float64)],
               name="index_copy dtype")
    yield Case("index_copy", [x, 0, torch.tensor([1, 3]), g.tensor([2, 3])], name="index_copy slice shape")
    yield Case("index_copy", [x, 0, torch.tensor([1, 3]), g.tensor([3, 2])], name="index_copy count")
    yield Case("index_copy", [x, 0, torch.tensor([1, 3]), g.tensor([2])], name="index_copy rank")
    yield Case("index_copy", [x, 0, torch.tensor([1]), g.tensor([])], name="index_copy 0-dim source 2-D self")
    yield Case("index_copy", [x, 0, torch.tensor([[1, 3]]), g.tensor([2, 2])], name="index_copy 2-D index")
    yield Case("index_copy", [x, 2, torch.tensor([1]), g.tensor([1, 2])], name="index_copy bad dim")
    yield Case("index_copy_", [g.tensor([5, 2], torch.float32, "expanded"), 0, torch.tensor([1]),
                               g.tensor([1, 2])], name="index_copy_ expanded self")


def masked_fill_cases(g):
    for dt in ALL:
        for i, layout in enumerate(g.LAYOUTS):
            x = g.tensor([3, 4], dt, layout)
            mask = relayout(g.tensor([3, 4], torch.bool, "contiguous"), WRITABLE[i % len(WRITABLE)])
            yield Case("masked_fill.Scalar", [x, mask, 1], name=f"masked_fill {dt} {layout}")
            yield Case("masked_fill.Tensor", [x, g.tensor([4], torch.bool), torch.tensor(0)],
                       name=f"masked_fill.Tensor {dt} {layout}")
            if layout != "expanded":
                yield Case("masked_fill_.Scalar", [g.tensor([3, 4], dt, layout),
                                                   g.tensor([3, 1], torch.bool, "any"), 0],
                           name=f"masked_fill_ {dt} {layout}")
                yield Case("masked_fill_.Tensor", [g.tensor([3, 4], dt, layout),
                                                   g.tensor([4], torch.bool, "any"), torch.tensor(1.0)],
                           name=f"masked_fill_.Tensor {dt} {layout}")
    x = g.tensor([3, 4])
    # The functional form broadcasts self to the mask as well.
    yield Case("masked_fill.Scalar", [g.tensor([4]), g.tensor([3, 4], torch.bool), -2.5],
               name="masked_fill broadcast self")
    yield Case("masked_fill_.Scalar", [g.tensor([4]), g.tensor([3, 4], torch.bool), -2.5],
               name="masked_fill_ broadcast self")
    yield Case("masked_fill.Scalar", [x, torch.tensor(True), 5], name="masked_fill 0-dim mask")
    yield Case("masked_fill.Scalar", [g.tensor([]), torch.tensor(True), 5], name="masked_fill 0-dim")
    yield Case("masked_fill.Scalar", [g.tensor([0, 2]), torch.tensor(True), 5], name="masked_fill empty")
    yield Case("masked_fill.Scalar", [x, g.tensor([3], torch.bool), 5], name="masked_fill bad broadcast")
    yield Case("masked_fill.Scalar", [x, g.tensor([3, 4], torch.float32), 5], name="masked_fill float mask")
    for dt, v in [(torch.int8, 500), (torch.int64, 2.7), (torch.bool, 0.5), (torch.float16, 1e6),
                  (torch.float32, float("inf")), (torch.float16, float("nan")), (torch.uint8, -1),
                  (torch.uint8, -1.0), (torch.int32, float("inf"))]:
        yield Case("masked_fill.Scalar", [g.tensor([2, 3], dt), g.tensor([2, 3], torch.bool), v],
                   name=f"masked_fill {dt} {v}")
    for dt, v in [(torch.int64, torch.tensor(3.7, dtype=torch.float64)), (torch.float32, torch.tensor(3)),
                  (torch.int8, torch.tensor(True)), (torch.int8, torch.tensor(300))]:
        yield Case("masked_fill.Tensor", [g.tensor([2, 3], dt), g.tensor([2, 3], torch.bool), v],
                   name=f"masked_fill.Tensor {dt} {v.dtype}")
        yield Case("masked_fill_.Tensor", [g.tensor([2, 3], dt), g.tensor([3], torch.bool), v],
                   name=f"masked_fill_.Tensor {dt} {v.dtype}")
    yield Case("masked_fill.Tensor", [x, g.tensor([4], torch.bool), torch.tensor([3.0])],
               name="masked_fill.Tensor 1-D value")


def index_add_cases(g):
    for dt in ALL:
        alpha = True if dt == torch.bool else (3 if not dt.is_floating_point else 0.5)
        for layout in g.LAYOUTS:
            self_ = g.tensor([5, 3], dt, layout)
            # Repeated indices accumulate.
            idx = torch.tensor([4, 0, 4, 2, 0, 4])
            yield Case("index_add", [self_, 0, idx, g.tensor([6, 3], dt, "any")],
                       name=f"index_add {dt} {layout}")
            yield Case("index_add", [self_, 0, idx, g.tensor([6, 3], dt, "any")],
                       {"alpha": alpha}, name=f"index_add {dt} {layout} alpha")
            if layout != "expanded":
                yield Case("index_add_", [g.tensor([4, 6], dt, layout), 1,
                                          relayout(torch.tensor([5, 1, 5], dtype=torch.int32),
                                                   "strided"),
                                          g.tensor([4, 3], dt, "any")],
                           name=f"index_add_ {dt} {layout}")
    x3 = g.tensor([3, 4, 5], torch.float32, "any")
    for dim in (0, 1, -1):
        n = x3.shape[dim]
        shape = list(x3.shape)
        shape[dim] = 7
        yield Case("index_add", [x3, dim, g.index([7], n), g.tensor(shape)], {"alpha": -2.0},
                   name=f"index_add 3-D {dim}")
    yield Case("index_add", [g.tensor([5], torch.int32), 0, torch.tensor([1, 1]),
                             g.tensor([2], torch.int32)], {"alpha": 2.5},
               name="index_add int alpha truncated")
    yield Case("index_add", [g.tensor([4], torch.int8), 0, torch.tensor([0, 0, 0, 1]),
                             torch.full([4], 100, dtype=torch.int8)], name="index_add int8 wraps")
    yield Case("index_add", [g.tensor([3]), 0, torch.tensor([1]), g.tensor([])],
               name="index_add 0-dim source")
    yield Case("index_add", [g.tensor([]), 0, torch.tensor([0]), g.tensor([])],
               name="index_add 0-dim self")
    yield Case("index_add", [g.tensor([5, 2]), 0, torch.zeros(0, dtype=torch.int64),
                             g.tensor([0, 2])], name="index_add empty index")
    # Must-fail: out of range, wrong dtypes, shapes, overlap.
    yield Case("index_add", [g.tensor([3, 2]), 0, torch.tensor([3]), g.tensor([1, 2])],
               name="index_add out of range")
    yield Case("index_add", [g.tensor([3, 2]), 0, torch.tensor([-1]), g.tensor([1, 2])],
               name="index_add negative index")
    yield Case("index_add", [g.tensor([3, 2]), 2, torch.tensor([0]), g.tensor([1, 2])],
               name="index_add dim out of range")
    yield Case("index_add", [g.tensor([3, 2]), 0, torch.tensor([0.0]), g.tensor([1, 2])],
               name="index_add float index")
    yield Case("index_add", [g.tensor([3, 2]), 0, torch.tensor([0]),
                             g.tensor([1, 2], torch.float64)], name="index_add source dtype")
    yield Case("index_add", [g.tensor([3, 2]), 0, torch.tensor([0]), g.tensor([1, 3])],
               name="index_add slice shape")
    yield Case("index_add", [g.tensor([3, 2]), 0, torch.tensor([0, 1]), g.tensor([1, 2])],
               name="index_add index count")
    yield Case("index_add", [g.tensor([3, 2]), 0, torch.tensor([[0]]), g.tensor([1, 2])],
               name="index_add 2-D index")
    yield Case("index_add_", [g.tensor([3, 2], torch.float32, "expanded"), 0, torch.tensor([0]),
                              g.tensor([1, 2])], name="index_add_ expanded self")


def one_hot_cases(g):
    for layout in g.LAYOUTS:
        idx = relayout(g.index([3, 4], 5), layout if layout != "expanded" else "contiguous")
        yield Case("one_hot", [idx], name=f"one_hot inferred {layout}")
        yield Case("one_hot", [idx, 7], name=f"one_hot 7 classes {layout}")
    yield Case("one_hot", [torch.tensor(3)], name="one_hot 0-dim")
    yield Case("one_hot", [torch.tensor([0, 0, 1]), 2], name="one_hot exact classes")
    yield Case("one_hot", [torch.zeros(0, dtype=torch.int64), 3], name="one_hot empty")
    yield Case("one_hot", [torch.zeros(0, dtype=torch.int64)], name="one_hot empty inferred")
    yield Case("one_hot", [torch.tensor([0, 3]), 3], name="one_hot index too large")
    yield Case("one_hot", [torch.tensor([0, -1])], name="one_hot negative inferred")
    yield Case("one_hot", [torch.tensor([0, -1]), 3], name="one_hot negative")
    yield Case("one_hot", [torch.tensor([0, 1], dtype=torch.int32), 3], name="one_hot int32")
    yield Case("one_hot", [torch.tensor([0.0, 1.0]), 3], name="one_hot float")


def sparse(g, shape, dt, layout):
    """A tensor of `shape` in `layout` with about half its elements zero."""
    x = g.tensor(shape, dt, layout)
    if dt == torch.bool or x.numel() == 0:
        return x
    keep = g.tensor(shape, torch.bool, "contiguous")
    return torch.where(keep, x, torch.zeros((), dtype=dt))


def nonzero_cases(g):
    for dt in ALL:
        for layout in g.LAYOUTS:
            x = sparse(g, [4, 5], dt, layout)
            yield Case("nonzero", [x], name=f"nonzero {dt} {layout}")
            yield Case("argwhere", [x], name=f"argwhere {dt} {layout}")
    yield Case("nonzero", [sparse(g, [2, 3, 4], torch.float32, "any")], name="nonzero 3-D")
    yield Case("nonzero", [torch.tensor([float("nan"), 0.0, -0.0, float("inf")])],
               name="nonzero specials")
    yield Case("nonzero", [torch.tensor(2.0)], name="nonzero 0-dim set")
    yield Case("nonzero", [torch.tensor(0)], name="nonzero 0-dim zero")
    yield Case("nonzero", [torch.zeros(3, 4)], name="nonzero all zero")
    yield Case("nonzero", [g.tensor([2, 0, 3])], name="nonzero empty")
    yield Case("argwhere", [torch.tensor(True)], name="argwhere 0-dim")


def masked_select_cases(g):
    for dt in ALL:
        for layout in g.LAYOUTS:
            x = g.tensor([4, 5], dt, layout)
            yield Case("masked_select", [x, g.tensor([4, 5], torch.bool, "any")],
                       name=f"masked_select {dt} {layout}")
    x = g.tensor([3, 4])
    yield Case("masked_select", [x, g.tensor([4], torch.bool)], name="masked_select broadcast mask")
    yield Case("masked_select", [g.tensor([3, 1]), g.tensor([2, 3, 4], torch.bool)],
               name="masked_select broadcast both")
    yield Case("masked_select", [torch.tensor(2.0), g.tensor([2, 2], torch.bool)],
               name="masked_select 0-dim self")
    yield Case("masked_select", [x, g.tensor([3, 4], torch.uint8, "any", 0, 2)],
               name="masked_select uint8 mask")
    yield Case("masked_select", [x, torch.zeros(3, 4, dtype=torch.bool)], name="masked_select none")
    yield Case("masked_select", [g.tensor([0, 4]), g.tensor([0, 4], torch.bool)],
               name="masked_select empty")
    yield Case("masked_select", [x, g.tensor([3, 4], torch.int64, "any", 0, 2)],
               name="masked_select int64 mask")
    yield Case("masked_select", [x, g.tensor([5], torch.bool)], name="masked_select shape mismatch")


def index_put_cases(g):
    for dt in ALL:
        for layout in WRITABLE:
            x = g.tensor([5, 4], dt, layout)
            rows = unique_index(g, [3], 0, 5)
            yield Case("index_put_", [x, [rows], g.tensor([4], dt, "any")],
                       name=f"index_put_ rows {dt} {layout}")
            yield Case("index_put", [x, [relayout(rows, "strided"), torch.tensor([0, -1, 2])],
                                     g.tensor([3], dt, "any")],
                       name=f"index_put points {dt} {layout}")
            if dt != torch.bool:
                yield Case("index_put_", [x, [torch.tensor([1, 3, 1, 1])], g.tensor([4, 4], dt, "any")],
                           {"accumulate": True}, name=f"index_put_ accumulate {dt} {layout}")
    # The KV-cache write: every batch row at its own position, all heads.
    cache = g.tensor([2, 3, 6, 4], torch.float32, "contiguous")
    yield Case("index_put_", [cache, [torch.arange(2).unsqueeze(1), torch.arange(3).unsqueeze(0),
                                      torch.tensor([4])], g.tensor([2, 3, 4])],
               name="index_put_ kv cache one position")
    yield Case("index_put_", [g.tensor([2, 6, 4], torch.float16, "transposed"),
                              [torch.arange(2).unsqueeze(1), torch.tensor([[1, 2], [4, 5]])],
                              g.tensor([2, 2, 4], torch.float16)],
               name="index_put_ per-row positions")
    # Masks: one over a leading dim, one over two dims, uint8.
    x = g.tensor([4, 3])
    yield Case("index_put_", [x, [torch.tensor([True, False, True, True])], torch.tensor(7.0)],
               name="index_put_ row mask")
    yield Case("index_put_", [x, [g.tensor([4, 3], torch.bool)], torch.tensor(-1.0)],
               name="index_put_ 2-D mask")
    yield Case("index_put_", [x, [torch.tensor([1, 0, 0, 1], dtype=torch.uint8)],
                              g.tensor([3])], name="index_put_ uint8 mask")
    yield Case("index_put_", [x, [torch.tensor([False] * 4)], g.tensor([3])],
               name="index_put_ empty mask")
    yield Case("index_put", [g.tensor([3, 4, 5]), [torch.tensor([[0], [2]]), torch.tensor([1, 3])],
                             g.tensor([2, 2, 5])], name="index_put broadcast indices")
    yield Case("index_put", [g.tensor([3, 4]), [torch.zeros(0, dtype=torch.int64)], g.tensor([4])],
               name="index_put no positions")
    yield Case("index_put_", [g.tensor([3, 4], torch.int32), [torch.tensor([0, 0, 2])],
                              g.tensor([4], torch.int32)], {"accumulate": True},
               name="index_put_ int accumulate broadcast values")
    # Errors.
    yield Case("index_put_", [g.tensor([3, 4]), [torch.tensor([0, 3])], g.tensor([4])],
               name="index_put_ out of range")
    yield Case("index_put_", [g.tensor([3, 4]), [torch.tensor([0, -4])], g.tensor([4])],
               name="index_put_ negative out of range")
    yield Case("index_put_", [g.tensor([3, 4]), [torch.tensor([0]), torch.tensor([4])],
                              g.tensor([1])], name="index_put_ second dim out of range")
    yield Case("index_put_", [g.tensor([3, 4]), [torch.tensor([0], dtype=torch.int32)],
                              g.tensor([4])], name="index_put_ int32 index")
    yield Case("index_put_", [g.tensor([3, 4]), [torch.tensor([0.0])], g.tensor([4])],
               name="index_put_ float index")
    yield Case("index_put_", [g.tensor([3, 4]), [torch.tensor([0])], g.tensor([4], torch.float64)],
               name="index_put_ values dtype")
    yield Case("index_put_", [g.tensor([3, 4]), [torch.tensor([0, 1])], g.tensor([3])],
               name="index_put_ values shape")
    yield Case("index_put_", [g.tensor([3, 4]), [torch.tensor([0])] * 3, g.tensor([1])],
               name="index_put_ too many indices")
    yield Case("index_put_", [g.tensor([3, 4]), [torch.tensor([True, False])], g.tensor([4])],
               name="index_put_ mask shape")
    # (PyTorch 1.13 writes an expanded self, whose rows share memory; kiln
    # refuses it, as index_add_: tests/errors/index_errors_test.cpp.)
