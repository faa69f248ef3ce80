"""Matrix products: mm, bmm, mv, addmm, baddbmm, matmul, outer, in every form,
dtype (float, 16-bit float, integer), layout (transposed, strided, offset,
expanded operands), broadcast batches, empty dims (K = 0 gives zeros or
beta * self) and shape/dtype errors.

float16 products are not implemented on the CPU by PyTorch 1.13; their
references compute in float32 and round once, which is what PyTorch 2.x's CPU
kernels (and kiln) do.
"""

import torch

from generate import INTS, Case

F16 = torch.float16
REAL = [torch.float32, torch.float64, torch.bfloat16]
NUMERIC = REAL + [F16] + INTS

# bfloat16: for some layouts PyTorch 1.13 accumulates bf16 products in bf16,
# rounding after every term, while kiln (and PyTorch 2.x) accumulates in
# float32 and rounds once. Each rounding of a partial sum s_k moves it by at
# most half a bf16 ulp of s_k, so a bf16 case gets the sum of those half-ulps
# (largest over the output elements, computed from its own operands) as its
# absolute tolerance. Float16 cases, which run the same conversion code, are
# held to the default tolerance against float32 references.
PRODUCTS_WITH_SELF = ("addmm", "addmm_", "addmm.out", "baddbmm", "addmm_act")


def bf16_atol(op, args, kwargs):
    t = [a.double() for a in args if isinstance(a, torch.Tensor)]
    self_, (a, b) = (t[0], t[1:3]) if op in PRODUCTS_WITH_SELF else (None, t[:2])
    a = a.unsqueeze(0) if a.dim() == 1 else a
    b = b.unsqueeze(-1) if b.dim() == 1 else b
    s = (kwargs.get("alpha", 1) * a.unsqueeze(-1) * b.unsqueeze(-3)).cumsum(-2)
    if self_ is not None and kwargs.get("beta", 1) != 0:
        start = kwargs.get("beta", 1) * self_
        s = s + (start.unsqueeze(-2) if start.dim() else start)
    _, exp = torch.frexp(s)  # |s| = m * 2^exp with m in [0.5, 1): half an ulp is 2^(exp - 9)
    half_ulps = torch.where(s != 0, torch.ldexp(torch.ones_like(s), exp - 9), torch.zeros_like(s))
    bound = half_ulps.sum(-2)
    return max(bound.max().item(), 1e-5) if bound.numel() else 1e-5


def C(op, args, kwargs=None, **kw):
    """A Case, with the bf16 accumulation tolerance above for bf16 operands."""
    kwargs = kwargs or {}
    if any(isinstance(a, torch.Tensor) and a.dtype == torch.bfloat16 for a in args):
        kw.setdefault("atol", bf16_atol(op, args, kwargs))
    return Case(op, args, kwargs, **kw)


def f32_ref(fn):
    """fn computed in float32 on float16 tensors, the result rounded once."""
    def ref(*args, **kwargs):
        up = [a.float() if isinstance(a, torch.Tensor) and a.dtype == F16 else a for a in args]
        return fn(*up, **kwargs).to(F16)
    return ref


def ref_for(dt, fn):
    return f32_ref(fn) if dt == F16 else None


MM_SHAPES = [([3, 4], [4, 5]), ([1, 4], [4, 1]), ([17, 33], [33, 9]), ([0, 4], [4, 5]),
             ([3, 0], [0, 5]), ([5, 7], [7, 0]), ([6, 1], [1, 6])]


def mm_cases(g):
    for dt in NUMERIC:
        for sa, sb in MM_SHAPES:
            for _ in range(2):
                a, b = g.tensor(sa, dt, "any"), g.tensor(sb, dt, "any")
                yield C("mm", [a, b], ref=ref_for(dt, torch.mm), name=f"mm {dt} {sa} {sb}")
    # Every pairing of transposed / contiguous operands.
    for dt in (torch.float32, torch.float64, torch.bfloat16, F16, torch.int32):
        for la in ("contiguous", "transposed", "strided", "expanded"):
            for lb in ("contiguous", "transposed", "offset", "expanded"):
                a, b = g.tensor([6, 5], dt, la), g.tensor([5, 7], dt, lb)
                yield C("mm", [a, b], ref=ref_for(dt, torch.mm), name=f"mm {dt} {la} {lb}")
    # out=: contiguous, transposed (computed as C^T = B^T A^T), strided, resized, wrong dtype.
    for dt in (torch.float32, torch.float64, torch.int64, torch.bfloat16):
        for layout in ("contiguous", "transposed", "strided", "offset"):
            yield C("mm.out", [g.tensor([4, 3], dt, "any"), g.tensor([3, 5], dt, "any")],
                       {"out": g.tensor([4, 5], dt, layout)}, name=f"mm.out {dt} {layout}")
    yield C("mm.out", [g.tensor([4, 3]), g.tensor([3, 5])], {"out": g.tensor([0])},
               name="mm.out resize")
    yield C("mm.out", [g.tensor([4, 3]), g.tensor([3, 5])],
               {"out": g.tensor([4, 5], torch.float64)}, name="mm.out wrong dtype")
    # Errors.
    yield C("mm", [g.tensor([3, 4]), g.tensor([3, 4])], name="mm shape mismatch")
    yield C("mm", [g.tensor([3, 4]), g.tensor([4])], name="mm 1-D mat2")
    yield C("mm", [g.tensor([2, 3, 4]), g.tensor([4, 2])], name="mm 3-D self")
    yield C("mm", [g.tensor([3, 4]), g.tensor([4, 2], torch.float64)], name="mm dtype mix")
    yield C("mm", [g.tensor([3, 4], torch.int32), g.tensor([4, 2], torch.int64)],
               name="mm int dtype mix")
    yield C("mm", [g.tensor([3, 4], torch.bool), g.tensor([4, 2], torch.bool)],
               name="mm bool")


def bmm_cases(g):
    shapes = [([2, 3, 4], [2, 4, 5]), ([1, 5, 2], [1, 2, 3]), ([4, 1, 6], [4, 6, 1]),
              ([0, 3, 4], [0, 4, 5]), ([3, 2, 0], [3, 0, 4]), ([5, 8, 16], [5, 16, 8])]
    for dt in NUMERIC:
        for sa, sb in shapes:
            a, b = g.tensor(sa, dt, "any"), g.tensor(sb, dt, "any")
            yield C("bmm", [a, b], ref=ref_for(dt, torch.bmm), name=f"bmm {dt} {sa} {sb}")
    # A batch of transposed matrices (permuted views), and a broadcast batch.
    for dt in (torch.float32, torch.float64, torch.bfloat16):
        a = g.tensor([4, 3, 2], dt).transpose(1, 2)
        b = g.tensor([4, 5, 3], dt).transpose(1, 2)
        yield C("bmm", [a, b], name=f"bmm transposed {dt}")
        a = g.tensor([1, 3, 4], dt, "contiguous").expand(6, 3, 4)
        yield C("bmm", [a, g.tensor([6, 4, 2], dt)], name=f"bmm expanded batch {dt}")
    for dt in (torch.float32, torch.int64):
        yield C("bmm.out", [g.tensor([2, 3, 4], dt), g.tensor([2, 4, 5], dt)],
                   {"out": g.tensor([2, 3, 5], dt, "transposed")}, name=f"bmm.out {dt}")
    yield C("bmm.out", [g.tensor([2, 3, 4]), g.tensor([2, 4, 5])], {"out": g.tensor([0])},
               name="bmm.out resize")
    yield C("bmm.out", [g.tensor([2, 3, 4]), g.tensor([2, 4, 5])],
               {"out": g.tensor([2, 3, 5], torch.float64)}, name="bmm.out wrong dtype")
    yield C("bmm", [g.tensor([2, 3, 4]), g.tensor([3, 4, 5])], name="bmm batch mismatch")
    yield C("bmm", [g.tensor([2, 3, 4]), g.tensor([2, 5, 5])], name="bmm inner mismatch")
    yield C("bmm", [g.tensor([3, 4]), g.tensor([4, 5])], name="bmm 2-D")
    yield C("bmm", [g.tensor([2, 3, 4]), g.tensor([2, 4, 5], torch.float64)],
               name="bmm dtype mix")
    yield C("bmm", [g.tensor([2, 3, 4], torch.bool), g.tensor([2, 4, 5], torch.bool)],
               name="bmm bool")


def mv_cases(g):
    for dt in NUMERIC:
        for sa, sv in [([3, 4], [4]), ([1, 7], [7]), ([0, 4], [4]), ([3, 0], [0]),
                       ([20, 30], [30])]:
            yield C("mv", [g.tensor(sa, dt, "any"), g.tensor(sv, dt, "any")],
                       ref=ref_for(dt, torch.mv), name=f"mv {dt} {sa}")
    yield C("mv", [g.tensor([3, 4]), g.tensor([5])], name="mv size mismatch")
    yield C("mv", [g.tensor([3, 4]), g.tensor([4, 1])], name="mv 2-D vec")
    yield C("mv", [g.tensor([4]), g.tensor([4])], name="mv 1-D self")
    yield C("mv", [g.tensor([3, 4]), g.tensor([4], torch.float64)], name="mv dtype mix")


def with_nan(t):
    t = t.clone()
    t.view(-1)[0] = float("nan")
    return t


def addmm_cases(g):
    for dt in NUMERIC:
        for self_shape in ([3, 5], [5], [1, 5], [3, 1], []):
            yield C("addmm", [g.tensor(self_shape, dt, "any"), g.tensor([3, 4], dt, "any"),
                                 g.tensor([4, 5], dt, "any")],
                       ref=ref_for(dt, torch.addmm), name=f"addmm {dt} self {self_shape}")
        beta, alpha = (2, 3) if not dt.is_floating_point else (0.5, -1.5)
        yield C("addmm", [g.tensor([5], dt), g.tensor([3, 4], dt), g.tensor([4, 5], dt)],
                   {"beta": beta, "alpha": alpha}, ref=ref_for(dt, torch.addmm),
                   name=f"addmm {dt} beta alpha")
        # K = 0: beta * self.
        yield C("addmm", [g.tensor([3, 5], dt), g.tensor([3, 0], dt), g.tensor([0, 5], dt)],
                   {"beta": 2}, ref=ref_for(dt, torch.addmm), name=f"addmm {dt} K=0")
    # beta = 0 ignores self, NaN included; int operands truncate a float beta/alpha.
    for dt in (torch.float32, torch.float64, torch.bfloat16, F16):
        s = with_nan(g.tensor([3, 5], dt, "contiguous"))
        yield C("addmm", [s, g.tensor([3, 4], dt), g.tensor([4, 5], dt)], {"beta": 0},
                   ref=ref_for(dt, torch.addmm), name=f"addmm {dt} beta=0 nan")
        s = with_nan(g.tensor([3, 5], dt, "contiguous"))
        yield C("addmm", [s, g.tensor([3, 0], dt), g.tensor([0, 5], dt)], {"beta": 0},
                   ref=ref_for(dt, torch.addmm), name=f"addmm {dt} beta=0 K=0 nan")
    yield C("addmm", [g.tensor([3, 5], torch.int32), g.tensor([3, 4], torch.int32),
                         g.tensor([4, 5], torch.int32)], {"beta": 0.5, "alpha": 2.5},
               name="addmm int float beta/alpha")
    # In place and out=.
    for dt in (torch.float32, torch.float64, torch.int64, torch.bfloat16):
        for layout in ("contiguous", "transposed", "strided"):
            yield C("addmm_", [g.tensor([3, 5], dt, layout), g.tensor([3, 4], dt, "any"),
                                  g.tensor([4, 5], dt, "any")], {"beta": 2, "alpha": 1},
                       name=f"addmm_ {dt} {layout}")
        yield C("addmm.out", [g.tensor([5], dt), g.tensor([3, 4], dt, "any"),
                                 g.tensor([4, 5], dt, "any")],
                   {"out": g.tensor([3, 5], dt, "transposed")}, name=f"addmm.out {dt}")
    s = with_nan(g.tensor([3, 5], torch.float32, "contiguous"))
    yield C("addmm_", [s, g.tensor([3, 4]), g.tensor([4, 5])], {"beta": 0},
               name="addmm_ beta=0 nan")
    yield C("addmm.out", [g.tensor([5]), g.tensor([3, 4]), g.tensor([4, 5])],
               {"out": g.tensor([0])}, name="addmm.out resize")
    yield C("addmm.out", [g.tensor([5]), g.tensor([3, 4]), g.tensor([4, 5])],
               {"out": g.tensor([3, 5], torch.float64)}, name="addmm.out wrong dtype")
    # Errors.
    yield C("addmm", [g.tensor([4]), g.tensor([3, 4]), g.tensor([4, 5])],
               name="addmm self does not broadcast")
    yield C("addmm", [g.tensor([5], torch.float64), g.tensor([3, 4]), g.tensor([4, 5])],
               name="addmm self dtype")
    yield C("addmm", [g.tensor([5]), g.tensor([3, 4]), g.tensor([3, 5])],
               name="addmm shape mismatch")
    yield C("addmm", [g.tensor([5]), g.tensor([4]), g.tensor([4, 5])], name="addmm 1-D mat1")
    yield C("addmm_", [g.tensor([5]), g.tensor([3, 4]), g.tensor([4, 5])],
               name="addmm_ broadcast self")
    yield C("addmm", [g.tensor([5], torch.bool), g.tensor([3, 4], torch.bool),
                         g.tensor([4, 5], torch.bool)], name="addmm bool")


def baddbmm_cases(g):
    for dt in NUMERIC:
        for self_shape in ([2, 3, 5], [5], [1, 3, 1], [2, 1, 5]):
            yield C("baddbmm", [g.tensor(self_shape, dt, "any"),
                                   g.tensor([2, 3, 4], dt, "any"), g.tensor([2, 4, 5], dt, "any")],
                       ref=ref_for(dt, torch.baddbmm), name=f"baddbmm {dt} self {self_shape}")
        beta, alpha = (3, -2) if not dt.is_floating_point else (0.25, 2.0)
        yield C("baddbmm", [g.tensor([2, 3, 5], dt), g.tensor([2, 3, 4], dt),
                               g.tensor([2, 4, 5], dt)], {"beta": beta, "alpha": alpha},
                   ref=ref_for(dt, torch.baddbmm), name=f"baddbmm {dt} beta alpha")
    # PyTorch 1.13's small-size baddbmm computes 0 * r for beta = 0 on an
    # uninitialized result, so its output may hold NaN at random; the reference
    # is the documented behaviour (self ignored), which later versions implement.
    s = with_nan(g.tensor([2, 3, 5], torch.float32, "contiguous"))
    yield C("baddbmm", [s, g.tensor([2, 3, 4]), g.tensor([2, 4, 5])], {"beta": 0},
            ref=lambda s, b1, b2, beta, alpha=1: alpha * torch.bmm(b1, b2),
            name="baddbmm beta=0 nan")
    yield C("baddbmm", [g.tensor([2, 3, 5]), g.tensor([2, 3, 0]), g.tensor([2, 0, 5])],
               {"beta": 2}, name="baddbmm K=0")
    yield C("baddbmm", [g.tensor([0, 3, 5]), g.tensor([0, 3, 4]), g.tensor([0, 4, 5])],
               name="baddbmm empty batch")
    yield C("baddbmm", [g.tensor([3, 5]), g.tensor([2, 3, 4]), g.tensor([3, 4, 5])],
               name="baddbmm batch mismatch")
    yield C("baddbmm", [g.tensor([4]), g.tensor([2, 3, 4]), g.tensor([2, 4, 5])],
               name="baddbmm self does not broadcast")
    yield C("baddbmm", [g.tensor([5], torch.float64), g.tensor([2, 3, 4]),
                           g.tensor([2, 4, 5])], name="baddbmm self dtype")


MATMUL_SHAPES = [
    ([4], [4]), ([3, 4], [4]), ([4], [4, 5]), ([3, 4], [4, 5]),
    ([2, 3, 4], [4]), ([4], [2, 4, 5]), ([2, 3, 4], [4, 5]), ([3, 4], [2, 4, 5]),
    ([2, 3, 4], [2, 4, 5]), ([2, 1, 3, 4], [5, 4, 2]), ([1, 3, 4], [6, 4, 2]),
    ([3, 1, 2, 3, 4], [2, 1, 4, 1]), ([7, 3, 4], [1, 4, 5]), ([0], [0]), ([0, 4], [4]),
    ([2, 0, 4], [4, 3]), ([2, 3, 0], [0, 5]), ([0, 3, 4], [2, 1, 4, 5]), ([5, 1, 6], [6]),
]


def matmul_cases(g):
    for dt in NUMERIC:
        for sa, sb in MATMUL_SHAPES:
            a, b = g.tensor(sa, dt, "any"), g.tensor(sb, dt, "any")
            yield C("matmul", [a, b], ref=ref_for(dt, torch.matmul),
                       name=f"matmul {dt} {sa} {sb}")
    # Folding a batch into rows with transposed / permuted operands.
    for dt in (torch.float32, torch.float64, torch.bfloat16):
        a = g.tensor([3, 2, 5], dt).permute(1, 0, 2)
        yield C("matmul", [a, g.tensor([5, 4], dt, "transposed")],
                   name=f"matmul permuted batch {dt}")
        a = g.tensor([4, 6], dt, "contiguous").unsqueeze(0).expand(3, 4, 6)
        yield C("matmul", [a, g.tensor([3, 6, 2], dt, "transposed")],
                   name=f"matmul expanded self {dt}")
    for dt in (torch.float32, torch.int64):
        yield C("matmul.out", [g.tensor([2, 3, 4], dt), g.tensor([4, 5], dt)],
                   {"out": g.tensor([2, 3, 5], dt, "contiguous")}, name=f"matmul.out {dt}")
        yield C("matmul.out", [g.tensor([3, 4], dt), g.tensor([4], dt)],
                   {"out": g.tensor([0], dt)}, name=f"matmul.out resize {dt}")
    yield C("matmul.out", [g.tensor([4]), g.tensor([4])], {"out": g.tensor([], torch.float32)},
               name="matmul.out dot")
    yield C("matmul.out", [g.tensor([3, 4]), g.tensor([4, 5])],
               {"out": g.tensor([3, 5], torch.float64)}, name="matmul.out wrong dtype")
    # Errors.
    yield C("matmul", [g.tensor([4]), g.tensor([5])], name="matmul dot size mismatch")
    yield C("matmul", [g.tensor([3, 4]), g.tensor([3, 4])], name="matmul 2-D mismatch")
    yield C("matmul", [g.tensor([2, 3, 4]), g.tensor([3, 4, 5])], name="matmul batch mismatch")
    yield C("matmul", [g.tensor([2, 3, 4]), g.tensor([5])], name="matmul 3-D by bad vector")
    yield C("matmul", [g.tensor([]), g.tensor([3, 4])], name="matmul 0-dim")
    yield C("matmul", [g.tensor([3, 4]), g.tensor([4, 2], torch.float64)],
               name="matmul dtype mix")
    yield C("matmul", [g.tensor([3, 4], torch.bool), g.tensor([4, 2], torch.bool)],
               name="matmul bool")


def outer_cases(g):
    for da, db in [(torch.float32, torch.float32), (torch.float64, torch.float64),
                   (torch.bfloat16, torch.bfloat16), (F16, F16), (torch.int64, torch.int64),
                   (torch.int32, torch.float32), (torch.bool, torch.bool),
                   (torch.uint8, torch.int8)]:
        for na, nb in [(3, 4), (1, 5), (0, 3)]:
            yield Case("outer", [g.tensor([na], da, "any"), g.tensor([nb], db, "any")],
                       name=f"outer {da} {db} {na}x{nb}")
    yield Case("outer", [g.tensor([3, 1]), g.tensor([4])], name="outer 2-D self")
    yield Case("outer", [g.tensor([3]), g.tensor([])], name="outer 0-D vec2")


def autocast_ref(fn):
    """fn under PyTorch 1.13's CPU autocast (bfloat16), run on the float32
    values of the case's bfloat16 arguments: autocast casts them back to
    bfloat16 (exactly) and must return bfloat16 equal to the op on those
    bf16 inputs, which is what kiln's Autocast kernel passes on to the op
    (tests/runtime/ops/autocast_test.cpp checks kiln's side)."""
    def ref(*args, **kwargs):
        f32 = [a.float() if isinstance(a, torch.Tensor) and a.dtype == torch.bfloat16 else a
               for a in args]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = fn(*f32, **kwargs)
        assert out.dtype == torch.bfloat16, f"autocast gave {out.dtype}"
        return out
    return ref


def autocast_cases(g):
    bf = torch.bfloat16
    for sa, sb in [([3, 4], [4, 5]), ([2, 3, 4], [4, 5]), ([2, 1, 3, 4], [5, 4, 2]),
                   ([4], [4, 5])]:
        yield C("matmul", [g.tensor(sa, bf, "any"), g.tensor(sb, bf, "any")],
                ref=autocast_ref(torch.matmul), name=f"autocast matmul {sa} {sb}")
    yield C("mm", [g.tensor([6, 5], bf, "any"), g.tensor([5, 7], bf, "any")],
            ref=autocast_ref(torch.mm), name="autocast mm")
    yield C("bmm", [g.tensor([2, 3, 4], bf, "any"), g.tensor([2, 4, 5], bf, "any")],
            ref=autocast_ref(torch.bmm), name="autocast bmm")
    yield C("addmm", [g.tensor([5], bf), g.tensor([3, 4], bf, "any"), g.tensor([4, 5], bf)],
            {"beta": 0.5, "alpha": 2.0}, ref=autocast_ref(torch.addmm), name="autocast addmm")
    yield C("baddbmm", [g.tensor([2, 3, 5], bf), g.tensor([2, 3, 4], bf, "any"),
                        g.tensor([2, 4, 5], bf)], ref=autocast_ref(torch.baddbmm),
            name="autocast baddbmm")


def _act(r, act):
    if act == "relu":
        return torch.relu(r)
    if act == "gelu_tanh":
        return torch.nn.functional.gelu(r, approximate="tanh")
    if act != "none":
        raise ValueError(f"unknown act {act}")
    return r


def addmm_act_ref(bias, a, b, act="none"):
    """kiln's addmm_act: act(bias + a @ b); torch has no such op."""
    return _act(torch.addmm(bias, a, b), act)


def addmm_act_ref_16(bias, a, b, act="none"):
    """As eager kiln: the product rounded to the 16-bit dtype, then the activation in float64
    rounded once (torch 1.13 rounds every step of gelu's tanh form: Note [16-bit floats in
    pointwise kernels])."""
    r = torch.addmm(bias.float(), a.float(), b.float()).to(a.dtype)
    return _act(r.double(), act).to(a.dtype)


def addmm_act_cases(g):
    for dt in REAL + [F16]:
        ref = addmm_act_ref_16 if dt in (F16, torch.bfloat16) else addmm_act_ref
        for act in ("none", "relu", "gelu_tanh"):
            for bias_shape in ([5], [1, 5], [3, 1], [3, 5], []):
                yield C("addmm_act", [g.tensor(bias_shape, dt), g.tensor([3, 4], dt, "any"),
                                      g.tensor([4, 5], dt, "any")], {"act": act}, ref=ref,
                        name=f"addmm_act {dt} {act} bias {bias_shape}")
        yield C("addmm_act", [g.tensor([5], dt), g.tensor([3, 0], dt), g.tensor([0, 5], dt)],
                {"act": "relu"}, ref=ref, name=f"addmm_act {dt} K=0")
    yield C("addmm_act", [g.tensor([5]), g.tensor([3, 4]), g.tensor([4, 5])], {"act": "gelu"},
            ref=addmm_act_ref, name="addmm_act unknown act")
    yield C("addmm_act", [g.tensor([4]), g.tensor([3, 4]), g.tensor([4, 5])], {"act": "relu"},
            ref=addmm_act_ref, name="addmm_act bias shape")


def cases(g):
    yield from mm_cases(g)
    yield from bmm_cases(g)
    yield from mv_cases(g)
    yield from addmm_cases(g)
    yield from baddbmm_cases(g)
    yield from matmul_cases(g)
    yield from outer_cases(g)
    yield from autocast_cases(g)
    yield from addmm_act_cases(g)
