"""sort, sort.stable, argsort and topk, searchsorted and bucketize: every dtype (and PyTorch 1.13's
refusals), all layouts, every dim, 0-dim and empty inputs, both directions,
NaN, and ties.

PyTorch guarantees the order of equal elements only for a stable sort. Where
an unstable sort or topk meets ties, the reference is PyTorch's stable sort:
the values are the same whatever the order of ties, and kiln's sort is stable
(Note [Sort order] in runtime/cpu/sort.cpp), so its indices are the stable ones.
Without ties the cases call the ops themselves."""

import itertools

import torch

from generate import ALL, FLOATS, INTS, Case

NAN, INF = float("nan"), float("inf")
SHAPES = [[6], [3, 4], [], [0, 3], [2, 3, 5], [4, 1]]


def stable_sort(self, dim=-1, descending=False):
    return tuple(torch.sort(self, dim=dim, descending=descending, stable=True))


def stable_sort_kw(self, *, stable, dim=-1, descending=False):
    return stable_sort(self, dim, descending)


def stable_argsort(self, dim=-1, descending=False):
    return torch.sort(self, dim=dim, descending=descending, stable=True).indices


def stable_topk(self, k, dim=-1, largest=True, sorted=True):
    if self.dim() == 0:
        return tuple(torch.topk(self, k, dim, largest, sorted))
    v, i = torch.sort(self, dim=dim, descending=largest, stable=True)
    return v.narrow(dim, 0, k).contiguous(), i.narrow(dim, 0, k).contiguous()


def tied(dt):
    """True when random values of dt repeat (so the reference must be stable)."""
    return not dt.is_floating_point or dt in (torch.float16, torch.bfloat16)


_UNIQUE_LAYOUTS = itertools.cycle(["contiguous", "transposed", "strided", "offset"])


def lay(dt):
    """A layout for dt: any when ties are handled, else one without broadcast
    (stride-0) dims, which would repeat values."""
    return "any" if tied(dt) else next(_UNIQUE_LAYOUTS)


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


def sorts(g):
    for dt in ALL:
        ref = stable_sort if tied(dt) else None
        for shape in SHAPES:
            for d in range(-max(len(shape), 1), max(len(shape), 1)):
                for desc in (False, True):
                    x = g.tensor(shape, dt, lay(dt), low=-50, high=50)
                    yield Case("sort", [x, d, desc], ref=ref, name=f"sort {dt} {shape} {d} {desc}")
                    yield Case("argsort", [g.tensor(shape, dt, lay(dt), low=-50, high=50), d, desc],
                               ref=stable_argsort if tied(dt) else None,
                               name=f"argsort {dt} {shape} {d} {desc}")
                    for stable in (True, False):
                        yield Case("sort.stable", [g.tensor(shape, dt, "any", low=-3, high=3)],
                                   {"stable": stable, "dim": d, "descending": desc},
                                   ref=None if stable else stable_sort_kw,
                                   name=f"sort.stable {dt} {shape} {d} {desc} {stable}")
        yield Case("sort", [g.tensor([2, 3], dt), 2], name=f"sort {dt} dim out of range")
    yield Case("sort.stable", [g.tensor([4])], {"stable": None}, name="sort.stable None")
    yield Case("sort", [g.tensor([]), 1], name="sort 0-dim dim out of range")
    # NaN sorts above everything; -0.0 ties with 0.0.
    for dt in FLOATS:
        for desc in (False, True):
            x = put(g.tensor([3, 7], dt, lay(dt)), [NAN], 4)
            yield Case("sort", [x, 1, desc], ref=stable_sort if tied(dt) else None,
                       name=f"sort one nan {dt} {desc}")
            x = put(g.tensor([3, 7], dt, "any"), [NAN, NAN, NAN, INF, -INF, NAN], 8)
            yield Case("sort.stable", [x], {"stable": True, "dim": 0, "descending": desc},
                       name=f"sort.stable nans {dt} {desc}")
            yield Case("sort", [x, 1, desc], ref=stable_sort, name=f"sort nans {dt} {desc}")
            yield Case("argsort", [x, 0, desc], ref=stable_argsort, name=f"argsort nans {dt} {desc}")
            z = torch.tensor([0.0, -0.0, 1.0, -0.0, 0.0, -1.0], dtype=dt)
            yield Case("sort", [z, 0, desc], ref=stable_sort, name=f"sort signed zeros {dt} {desc}")
    # Long lines and many lines.
    yield Case("sort", [g.tensor([3, 5000]), 1, True], name="sort long rows")
    yield Case("sort", [g.tensor([3000, 20], torch.float64, "transposed"), 0], name="sort columns")
    yield Case("argsort", [g.tensor([20000, 4]), 1], name="argsort many lines")
    yield Case("sort.stable", [g.tensor([4000], torch.int16, low=-20, high=20)],
               {"stable": True, "descending": True}, name="sort.stable long ties")


def topks(g):
    for dt in ALL:
        # bool and float16 have no cpu topk: call the op so its refusal is checked.
        ref = stable_topk if tied(dt) and dt not in (torch.bool, torch.float16) else None
        for shape in SHAPES:
            for d in range(-max(len(shape), 1), max(len(shape), 1)):
                n = shape[d] if shape else 1
                for k in sorted({0, 1, n // 2, n}):
                    for largest in (True, False):
                        x = g.tensor(shape, dt, lay(dt), low=-50, high=50)
                        yield Case("topk", [x, k, d, largest], ref=ref,
                                   name=f"topk {dt} {shape} d={d} k={k} {largest}")
        yield Case("topk", [g.tensor([5], dt), 6], name=f"topk {dt} k too large")
        yield Case("topk", [g.tensor([5], dt), -1], name=f"topk {dt} k negative")
    for k in (0, 1, 2):
        yield Case("topk", [g.tensor([]), k], name=f"topk 0-dim k={k}")
        yield Case("topk", [g.tensor([], torch.bool), k], name=f"topk 0-dim bool k={k}")
    yield Case("topk", [g.tensor([3, 4]), 2, 2], name="topk dim out of range")
    # sorted=False: kiln returns them sorted anyway (PyTorch leaves the order open).
    for dt in (torch.float32, torch.int32):
        yield Case("topk", [g.tensor([4, 300], dt, "any", low=-1000, high=1000), 7, 1, True,
                            False], ref=stable_topk, name=f"topk unsorted {dt}")
    for dt in (torch.float32, torch.float64, torch.bfloat16):
        for largest in (True, False):
            x = put(g.tensor([4, 9], dt, lay(dt)), [NAN], 3)
            yield Case("topk", [x, 3, 1, largest], ref=stable_topk if tied(dt) else None,
                       name=f"topk one nan {dt} {largest}")
            x = put(g.tensor([4, 9], dt, "any"), [NAN, NAN, NAN, INF, NAN], 7)
            yield Case("topk", [x, 4, 1, largest], ref=stable_topk, name=f"topk nans {dt} {largest}")
    yield Case("topk", [g.tensor([100003]), 10], name="topk long")
    yield Case("topk", [g.tensor([100003]), 10, 0, False], name="topk long smallest")
    yield Case("topk", [g.tensor([2000, 30], torch.float64, "transposed"), 25, 0],
               name="topk columns")


def cases(g):
    yield from sorts(g)
    yield from topks(g)
    yield from searchsorted_cases(g)
    yield from bucketize_cases(g)


def sorted_rows(g, shape, dt=torch.float32, layout="any", low=-3.0, high=3.0):
    """A tensor of `shape` in `layout` whose last dim is sorted, with ties."""
    v = g.tensor(shape, dt, "contiguous", low, high)
    if dt.is_floating_point:
        v = ((v.double() * 2).round() / 2).to(dt)  # ties
    v = torch.sort(v, dim=-1).values
    out = g.tensor(shape, dt, layout)
    if out.stride() and 0 in out.stride():  # an expanded view cannot hold distinct rows
        return v
    out.copy_(v)
    return out


def searchsorted_cases(g):
    ST, SS = "searchsorted.Tensor", "searchsorted.Scalar"
    for dt in FLOATS + INTS:
        for layout in g.LAYOUTS:
            seq = sorted_rows(g, [9], dt, layout)
            vals = g.tensor([3, 4], dt, "any", -4.0, 4.0)
            if dt.is_floating_point:
                vals = ((vals.double() * 2).round() / 2).to(dt)  # hits on the sequence's values
            for right in (False, True):
                yield Case(ST, [seq, vals], {"right": right},
                           name=f"searchsorted 1-D {dt} {layout} right={right}")
            batched = sorted_rows(g, [2, 3, 7], dt, layout)
            yield Case(ST, [batched, g.tensor([2, 3, 5], dt, "any", -4.0, 4.0)],
                       name=f"searchsorted batched {dt} {layout}")
            yield Case(ST, [batched, g.tensor([2, 3, 5], dt, "any", -4.0, 4.0)],
                       {"side": "right", "out_int32": True},
                       name=f"searchsorted batched {dt} {layout} side right int32")
    seq = sorted_rows(g, [6], torch.float32)
    yield Case(ST, [seq, torch.tensor([NAN, INF, -INF, 0.0])], name="searchsorted specials")
    yield Case(ST, [torch.tensor([1.0, 2.0, NAN]), torch.tensor([1.5, 2.0, NAN])],
               {"right": True}, name="searchsorted NaN last in the sequence")
    # Promotion: int sequence and float values, float32 against float64, ints of two widths.
    yield Case(ST, [sorted_rows(g, [8], torch.int64), g.tensor([5], torch.float32)],
               name="searchsorted int64 seq float values")
    yield Case(ST, [sorted_rows(g, [8], torch.float32), g.tensor([5], torch.float64)],
               name="searchsorted float32 seq float64 values")
    yield Case(ST, [sorted_rows(g, [8], torch.int16), g.tensor([5], torch.int64)],
               name="searchsorted int16 seq int64 values")
    yield Case(ST, [sorted_rows(g, [8]), torch.tensor(0.25)], name="searchsorted 0-dim value")
    yield Case(ST, [sorted_rows(g, [0]), g.tensor([4])], name="searchsorted empty sequence")
    yield Case(ST, [sorted_rows(g, [5]), g.tensor([0, 3])], name="searchsorted empty values")
    yield Case(ST, [sorted_rows(g, [2, 0]), g.tensor([2, 3])], name="searchsorted empty rows")
    for right in (False, True):
        yield Case(SS, [sorted_rows(g, [7]), 0.5], {"right": right},
                   name=f"searchsorted.Scalar right={right}")
    yield Case(SS, [sorted_rows(g, [7], torch.int64), 1], name="searchsorted.Scalar int")
    yield Case(SS, [sorted_rows(g, [7], torch.int64), 1.5], name="searchsorted.Scalar int seq float")
    yield Case(SS, [sorted_rows(g, [7]), 2.0], {"out_int32": True, "side": "left"},
               name="searchsorted.Scalar int32")
    # Errors.
    yield Case(ST, [torch.tensor(1.0), g.tensor([3])], name="searchsorted 0-dim sequence")
    yield Case(ST, [sorted_rows(g, [2, 3]), g.tensor([3, 5])], name="searchsorted rows mismatch")
    yield Case(ST, [sorted_rows(g, [2, 3]), g.tensor([5])], name="searchsorted rank mismatch")
    yield Case(ST, [sorted_rows(g, [2, 3]), torch.tensor(0.5)], name="searchsorted 0-dim on rows")
    yield Case(SS, [sorted_rows(g, [2, 3]), 0.5], name="searchsorted.Scalar on rows")
    yield Case(ST, [sorted_rows(g, [4]), g.tensor([2])], {"right": True, "side": "left"},
               name="searchsorted side contradicts right")
    yield Case(ST, [sorted_rows(g, [4]), g.tensor([2])], {"side": "middle"},
               name="searchsorted bad side")
    yield Case(ST, [torch.tensor([False, True]), torch.tensor([True])], name="searchsorted bool")


def bucketize_cases(g):
    BT, BS = "bucketize.Tensor", "bucketize.Scalar"
    for dt in FLOATS + INTS:
        bounds = sorted_rows(g, [6], dt)
        for layout in g.LAYOUTS:
            x = g.tensor([3, 5], dt, layout, -4.0, 4.0)
            for right in (False, True):
                yield Case(BT, [x, bounds], {"right": right},
                           name=f"bucketize {dt} {layout} right={right}")
    yield Case(BT, [g.tensor([4, 2]), sorted_rows(g, [5])], {"out_int32": True},
               name="bucketize int32")
    yield Case(BT, [torch.tensor(1.25), sorted_rows(g, [5])], name="bucketize 0-dim")
    yield Case(BT, [g.tensor([0, 2]), sorted_rows(g, [5])], name="bucketize empty")
    yield Case(BT, [g.tensor([3], torch.int32), sorted_rows(g, [5])], name="bucketize int values")
    for right in (False, True):
        yield Case(BS, [0.5, sorted_rows(g, [5])], {"right": right},
                   name=f"bucketize.Scalar right={right}")
    yield Case(BS, [2, sorted_rows(g, [5], torch.int32)], name="bucketize.Scalar int")
    yield Case(BT, [g.tensor([3]), sorted_rows(g, [2, 5])], name="bucketize 2-D boundaries")
    yield Case(BT, [g.tensor([3]), torch.tensor(1.0)], name="bucketize 0-dim boundaries")
