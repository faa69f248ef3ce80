"""Neural-network ops: softmax, log_softmax, layer_norm, rms_norm, embedding,
linear, scaled_dot_product_attention, over float32/float64/float16/bfloat16,
strided / transposed / expanded inputs, 0-dim and empty shapes, special
values, and must-fail calls.

PyTorch 1.13 has no float16 softmax, layer_norm or matmul on the CPU; float16
references compute in float32 and round once (PyTorch 2.x's CPU behaviour).
rms_norm and scaled_dot_product_attention are absent from 1.13: their
references below follow PyTorch 2.4's definitions with 1.13 ops.
"""

import math

import torch

from generate import ALL, INTS, Case

F16, BF16 = torch.float16, torch.bfloat16
FLOATS = [torch.float32, torch.float64, BF16, F16]
LOW = (F16, BF16)


def up(t):
    return t.float() if isinstance(t, torch.Tensor) and t.dtype in LOW else t


def f16_ref(fn, dtype=F16):
    """fn on 16-bit tensors computed in float32, rounded once to `dtype`."""
    def ref(*args, **kwargs):
        return fn(*[up(a) for a in args], **{k: up(v) for k, v in kwargs.items()}).to(dtype)
    return ref


# --- softmax / log_softmax -------------------------------------------------------------

SOFTMAX_SHAPES = [([3, 4], -1), ([3, 4], 0), ([2, 3, 4], 1), ([2, 3, 4], 0), ([2, 3, 4], 2),
                  ([], 0), ([], -1), ([0, 3], 1), ([0, 3], 0), ([5, 0], 1), ([4, 300], -1),
                  ([2, 513, 3], 1), ([2, 5, 300], 1), ([7], 0)]


def special_row(dt):
    """Rows with -inf entries, an all -inf row (NaN result), a NaN and a +inf."""
    t = torch.randn(5, 6, generator=torch.Generator().manual_seed(5)).to(dt)
    t[0, 1] = t[0, 4] = float("-inf")
    t[1, :] = float("-inf")
    t[2, 3] = float("nan")
    t[3, 0] = float("inf")
    t[4, :] = 1e4 if dt != F16 else 6e4  # large but finite: the max is subtracted first
    return t


def softmax_cases(g):
    for name in ("softmax", "log_softmax"):
        op = f"{name}.int"
        fn = getattr(torch, name)
        for dt in FLOATS:
            ref = f16_ref(lambda x, d, dtype=None, fn=fn: fn(x, d)) if dt == F16 else None
            for shape, dim in SOFTMAX_SHAPES:
                yield Case(op, [g.tensor(shape, dt, "any"), dim], ref=ref,
                           name=f"{name} {dt} {shape} dim {dim}")
            for dim in (0, 1):
                yield Case(op, [special_row(dt), dim], ref=ref,
                           name=f"{name} {dt} special values dim {dim}")
        # dtype=: the input is converted first.
        for src, dst in [(torch.float32, torch.float64), (torch.int64, torch.float32),
                         (BF16, torch.float32), (torch.float64, torch.float32),
                         (torch.int32, torch.float64)]:
            yield Case(op, [g.tensor([3, 5], src, "any"), 1, dst],
                       name=f"{name} {src} dtype={dst}")
        yield Case(op, [g.tensor([3, 5], torch.float32), 1, F16],
                   ref=lambda x, d, dtype, fn=fn: fn(x.to(F16).float(), d).to(F16),
                   name=f"{name} float32 dtype=float16")
        # Errors.
        yield Case(op, [g.tensor([3, 4], torch.int64), 1], name=f"{name} int64 input")
        yield Case(op, [g.tensor([3, 4], torch.bool), 0], name=f"{name} bool input")
        yield Case(op, [g.tensor([3, 4]), 2], name=f"{name} dim out of range")
        yield Case(op, [g.tensor([3, 4]), -3], name=f"{name} negative dim out of range")


# --- layer_norm / rms_norm ---------------------------------------------------------------

NORM_SHAPES = [([3, 4], [4]), ([2, 3, 4], [3, 4]), ([2, 3, 4], [4]), ([4], [4]),
               ([0, 4], [4]), ([3, 0], [0]), ([5, 128], [128]), ([2, 1, 6], [1, 6])]


def layer_norm_cases(g):
    for dt in FLOATS:
        # PyTorch 1.13's bfloat16 layer_norm accumulates its row moments at low
        # precision (results off the exact value by ~1%, several bf16 ulps); 2.x
        # and kiln compute in float32 and round once, the reference here. The
        # cases after this loop compare with 1.13's own bf16 kernel at a wider
        # tolerance.
        ref = f16_ref(torch.ops.aten.layer_norm.default, dt) if dt in LOW else None
        for shape, norm in NORM_SHAPES:
            for affine in ("none", "weight", "both", "bias"):
                w = g.tensor(norm, dt, "any") if affine in ("weight", "both") else None
                b = g.tensor(norm, dt, "any") if affine in ("bias", "both") else None
                x = g.tensor(shape, dt, "any")
                if x.dim() == 1 and x.stride(0) == 0:
                    # A broadcast 1-D row is constant: PyTorch's float mean is then
                    # a little off and its result not 0; constant rows are below.
                    x = g.tensor(shape, dt, "contiguous")
                yield Case("layer_norm", [x, norm, w, b], ref=ref,
                           name=f"layer_norm {dt} {shape} {norm} {affine}")
        yield Case("layer_norm", [g.tensor([3, 6], dt, "any"), [6], g.tensor([6], dt),
                                  g.tensor([6], dt), 0.1], ref=ref, name=f"layer_norm {dt} eps")
        # A constant row: zero variance, normalized by sqrt(eps).
        yield Case("layer_norm", [torch.full([2, 5], 3.0, dtype=dt), [5]], ref=ref,
                   name=f"layer_norm {dt} constant rows")
    for shape, norm in [([3, 4], [4]), ([5, 128], [128])]:
        # 0.05: the largest deviation of 1.13's bf16 kernel from the exact result
        # seen on these value ranges is 0.031 (two ulps at |y| in [2, 4)).
        yield Case("layer_norm", [g.tensor(shape, BF16, "any"), norm, g.tensor(norm, BF16),
                                  g.tensor(norm, BF16)], atol=0.05,
                   name=f"layer_norm bf16 {shape} against 1.13's bf16 kernel")
    yield Case("layer_norm", [g.tensor([3, 4]), [4], None, None, 1e-5, False],
               name="layer_norm cudnn_enable=False")
    # Errors.
    yield Case("layer_norm", [g.tensor([3, 4]), [3]], name="layer_norm bad normalized_shape")
    yield Case("layer_norm", [g.tensor([4]), [3, 4]], name="layer_norm too few dims")
    yield Case("layer_norm", [g.tensor([3, 4]), []], name="layer_norm empty normalized_shape")
    yield Case("layer_norm", [g.tensor([3, 4]), [4], g.tensor([3])], name="layer_norm bad weight")
    yield Case("layer_norm", [g.tensor([3, 4]), [4], None, g.tensor([4, 1])],
               name="layer_norm bad bias")
    yield Case("layer_norm", [g.tensor([3, 4], BF16), [4], g.tensor([4], torch.float32)],
               name="layer_norm weight dtype mix")
    yield Case("layer_norm", [g.tensor([3, 4], torch.int64), [4]], name="layer_norm int64 input")


def rms_norm_ref(input, normalized_shape, weight=None, eps=None):
    """PyTorch 2.4's rms_norm with 1.13 ops: x * rsqrt(mean(x^2) + eps) computed
    in float32 for 16-bit inputs, rounded to x's dtype, then times weight.
    eps defaults to torch.finfo(x.dtype).eps."""
    shape = list(normalized_shape)
    n = len(shape)
    if n == 0:
        raise RuntimeError("rms_norm: normalized_shape must not be empty")
    if input.dim() < n or list(input.shape[input.dim() - n:]) != shape:
        raise RuntimeError("rms_norm: input shape does not end with normalized_shape")
    if weight is not None and list(weight.shape) != shape:
        raise RuntimeError("rms_norm: weight shape differs from normalized_shape")
    if not input.dtype.is_floating_point:
        raise RuntimeError("rms_norm: floating input expected")
    if eps is None:
        eps = torch.finfo(input.dtype).eps
    x = up(input)
    dims = tuple(range(-n, 0))
    y = (x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps)).to(input.dtype)
    return y * weight if weight is not None else y


def rms_norm_cases(g):
    for dt in FLOATS:
        for shape, norm in NORM_SHAPES:
            for with_weight in (False, True):
                w = g.tensor(norm, dt, "any") if with_weight else None
                yield Case("rms_norm", [g.tensor(shape, dt, "any"), norm, w], ref=rms_norm_ref,
                           name=f"rms_norm {dt} {shape} {norm} weight={with_weight}")
        yield Case("rms_norm", [g.tensor([3, 6], dt, "any"), [6], g.tensor([6], dt), 0.25],
                   ref=rms_norm_ref, name=f"rms_norm {dt} eps")
        # Tiny values: eps matters.
        yield Case("rms_norm", [g.tensor([2, 8], dt, "any", low=-1e-3, high=1e-3), [8]],
                   ref=rms_norm_ref, name=f"rms_norm {dt} tiny values")
    # A weight of another dtype promotes the result (bf16 input, float32 weight -> float32).
    for dx, dw in [(BF16, torch.float32), (torch.float32, torch.float64), (F16, BF16),
                   (torch.float32, torch.int64)]:
        yield Case("rms_norm", [g.tensor([3, 4], dx), [4], g.tensor([4], dw)], ref=rms_norm_ref,
                   name=f"rms_norm {dx} weight {dw}")
    yield Case("rms_norm", [g.tensor([3, 4]), [3]], ref=rms_norm_ref,
               name="rms_norm bad normalized_shape")
    yield Case("rms_norm", [g.tensor([3, 4]), []], ref=rms_norm_ref, name="rms_norm empty shape")
    yield Case("rms_norm", [g.tensor([3, 4]), [4], g.tensor([3])], ref=rms_norm_ref,
               name="rms_norm bad weight")
    yield Case("rms_norm", [g.tensor([3, 4], torch.int32), [4]], ref=rms_norm_ref,
               name="rms_norm int input")


# --- embedding -------------------------------------------------------------------------------

def embedding_cases(g):
    for dt in ALL:
        for ishape in ([2], [2, 3], [], [0], [4, 0]):
            for idt in (torch.int64, torch.int32):
                w = g.tensor([6, 5], dt, "any")
                yield Case("embedding", [w, g.index(ishape, 6, idt)],
                           name=f"embedding {dt} {ishape} {idt}")
    yield Case("embedding", [g.tensor([6, 5]), g.index([3, 2], 6), 1], name="embedding padding_idx")
    yield Case("embedding", [g.tensor([6, 0]), g.index([3], 6)], name="embedding dim 0")
    yield Case("embedding", [g.tensor([40, 300], torch.float32, "transposed"), g.index([50], 40)],
               name="embedding transposed weight")
    # Errors.
    yield Case("embedding", [g.tensor([6, 5]), torch.tensor([1, 6])], name="embedding index = rows")
    yield Case("embedding", [g.tensor([6, 5]), torch.tensor([[0], [-1]])],
               name="embedding negative index")
    yield Case("embedding", [g.tensor([6, 0]), torch.tensor([7])],
               name="embedding index out of range, dim 0")
    yield Case("embedding", [g.tensor([6, 5]), torch.tensor([1.0])], name="embedding float indices")
    yield Case("embedding", [g.tensor([6, 5]), torch.tensor([1], dtype=torch.int16)],
               name="embedding int16 indices")
    yield Case("embedding", [g.tensor([6]), g.index([2], 6)], name="embedding 1-D weight")
    yield Case("embedding", [g.tensor([2, 6, 5]), g.index([2], 2)], name="embedding 3-D weight")


def embedding_max_norm_ref(w, i, **kwargs):
    """torch.nn.functional.embedding, which renormalizes `w` in place first; 16-bit weights
    in float64, rounded once (torch 1.13 rounds the norm to the 16-bit type first: Note
    [16-bit floats in pointwise kernels])."""
    if w.dtype not in (torch.float16, torch.bfloat16):
        return torch.nn.functional.embedding(i, w, **kwargs)
    w64 = w.double()
    out = torch.nn.functional.embedding(i, w64, **kwargs)
    w.copy_(w64)
    return out.to(w.dtype)


def renorm_ref(w, i, max_norm, p):
    """embedding_renorm_, 16-bit weights in float64 and rounded once (as above)."""
    w64 = w.double()
    torch.ops.aten.embedding_renorm_(w64, i, max_norm, p)
    return w.copy_(w64)


def embedding_option_cases(g):
    """embedding's max_norm (Note [Embedding max_norm]) through embedding_renorm_ and kiln's
    C++ embedding (Note [Oracle API cases]); scale_grad_by_freq accepted (no effect forward)."""
    for dt in FLOATS:
        for layout in ("contiguous", "transposed", "strided", "offset"):
            for max_norm, p in ((2.0, 2.0), (1.5, 1.0), (3.0, 3.0), (1.0, float("inf")),
                                (0.5, float("-inf")), (2.0, 0.0)):
                w = g.tensor([7, 5], dt, layout)
                yield Case("embedding_renorm_", [w, g.index([4, 3], 7), max_norm, p],
                           ref=renorm_ref if dt in (torch.float16, torch.bfloat16) else None,
                           name=f"embedding_renorm_ {dt} {layout} {max_norm} {p}")
            yield Case("api.embedding", [g.tensor([7, 5], dt, layout), g.index([2, 4], 7)],
                       {"max_norm": 2.0}, ref=embedding_max_norm_ref, mutates=True,
                       name=f"api.embedding max_norm {dt} {layout}")
        yield Case("embedding", [g.tensor([6, 5], dt, "any"), g.index([3, 2], 6), -1, True],
                   name=f"embedding scale_grad_by_freq {dt}")
    yield Case("api.embedding", [g.tensor([7, 5]), g.index([3], 7, torch.int32)],
               {"max_norm": 1.0, "norm_type": 1.0, "scale_grad_by_freq": True},
               ref=embedding_max_norm_ref, mutates=True, name="api.embedding all options")
    yield Case("api.embedding", [g.tensor([7, 5]), g.index([3], 7)], {"padding_idx": 2},
               ref=embedding_max_norm_ref, mutates=True, name="api.embedding no max_norm")
    yield Case("embedding_renorm_", [g.tensor([7, 5]), torch.tensor([[1, 1], [3, 1]]), 1.0, 2.0],
               name="embedding_renorm_ repeated rows")
    yield Case("embedding_renorm_", [g.tensor([7, 5]), g.index([2], 7, torch.int32), 1.0, 2.0],
               name="embedding_renorm_ int32 indices")
    yield Case("embedding_renorm_", [g.tensor([7, 5]), torch.zeros(0, dtype=torch.int64), 1.0, 2.0],
               name="embedding_renorm_ no indices")
    yield Case("embedding_renorm_", [g.tensor([7, 5]), g.index([3], 7), -1.0, 2.0],
               name="embedding_renorm_ negative max_norm")
    yield Case("embedding_renorm_", [g.tensor([7, 0]), g.index([3], 7), 1.0, 2.0],
               name="embedding_renorm_ empty rows")
    # Errors.
    yield Case("embedding_renorm_", [g.tensor([7, 5]), torch.tensor([1, 7]), 1.0, 2.0],
               name="embedding_renorm_ out of range")
    yield Case("embedding_renorm_", [g.tensor([7]), torch.tensor([1]), 1.0, 2.0],
               name="embedding_renorm_ 1-D weight")
    yield Case("embedding_renorm_", [g.tensor([7, 5]), torch.tensor([1.0]), 1.0, 2.0],
               name="embedding_renorm_ float indices")
    yield Case("embedding_renorm_", [g.tensor([7, 5], torch.int64), torch.tensor([1]), 1.0, 2.0],
               name="embedding_renorm_ int weight")


# --- linear ------------------------------------------------------------------------------------

def linear_bf16_atol(input, weight, bias=None):
    """As in matmul.py: PyTorch 1.13 may round each partial sum of a bf16
    product to bf16; the tolerance is the sum of those half-ulps."""
    a, w = input.double(), weight.double()
    a = a.unsqueeze(0) if a.dim() == 1 else a
    b = w.t() if w.dim() == 2 else w.unsqueeze(-1)
    s = (a.unsqueeze(-1) * b.unsqueeze(-3)).cumsum(-2)
    if bias is not None:
        s = s + (bias.double().unsqueeze(-2) if bias.dim() else bias.double())
    _, exp = torch.frexp(s)
    half_ulps = torch.where(s != 0, torch.ldexp(torch.ones_like(s), exp - 9), torch.zeros_like(s))
    bound = half_ulps.sum(-2)
    return max(bound.max().item(), 1e-5) if bound.numel() else 1e-5


def linear_cases(g):
    shapes = [([3, 4], [5, 4], [5]), ([4], [5, 4], [5]), ([2, 3, 4], [5, 4], [5]),
              ([2, 1, 3, 4], [5, 4], []), ([0, 4], [5, 4], [5]), ([3, 0], [5, 0], [5]),
              ([3, 4], [0, 4], [0]), ([3, 4], [5, 4], [3, 5]), ([2, 1, 3, 4], [5, 4], [3, 5]),
              ([6, 32], [16, 32], [16])]
    for dt in FLOATS + [torch.int64, torch.int32]:
        ref = f16_ref(torch.nn.functional.linear) if dt == F16 else None
        for si, sw, sb in shapes:
            for with_bias in (True, False):
                x, w = g.tensor(si, dt, "any"), g.tensor(sw, dt, "any")
                b = g.tensor(sb, dt, "any") if with_bias else None
                kw = {"atol": linear_bf16_atol(x, w, b)} if dt == BF16 else {}
                yield Case("linear", [x, w, b], ref=ref, name=f"linear {dt} {si} {sw} {sb if with_bias else None}", **kw)
        x, w = g.tensor([3, 4], dt, "any"), g.tensor([4], dt, "any")
        kw = {"atol": linear_bf16_atol(x, w)} if dt == BF16 else {}
        yield Case("linear", [x, w], ref=ref, name=f"linear {dt} 1-D weight", **kw)
    # Errors.
    yield Case("linear", [g.tensor([3, 4]), g.tensor([5, 3])], name="linear shape mismatch")
    yield Case("linear", [g.tensor([3, 4]), g.tensor([5, 4], torch.float64)],
               name="linear dtype mix")
    yield Case("linear", [g.tensor([3, 4]), g.tensor([5, 4]), g.tensor([5], torch.float64)],
               name="linear bias dtype mix")
    yield Case("linear", [g.tensor([3, 4]), g.tensor([5, 4]), g.tensor([4])],
               name="linear bias shape")
    yield Case("linear", [g.tensor([3, 4]), g.tensor([4]), g.tensor([])],
               name="linear 1-D weight with bias")
    yield Case("linear", [g.tensor([]), g.tensor([5, 4])], name="linear 0-dim input")
    yield Case("linear", [g.tensor([3, 4]), g.tensor([1, 5, 4])], name="linear 3-D weight")
    yield Case("linear", [g.tensor([3, 4], torch.bool), g.tensor([5, 4], torch.bool)],
               name="linear bool")


# --- scaled_dot_product_attention -------------------------------------------------------------

def sdpa_ref(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
             enable_gqa=False):
    """PyTorch 2.x's math path with 1.13 ops; 16-bit inputs compute in float32.
    enable_gqa repeats key/value heads (dim -3) as PyTorch 2.5 does."""
    if enable_gqa and min(query.dim(), key.dim(), value.dim()) >= 3 and \
            query.size(-3) > key.size(-3):
        if query.size(-3) % key.size(-3) != 0 or value.size(-3) != key.size(-3):
            raise RuntimeError("GQA: query heads must be a multiple of key/value heads")
        g = query.size(-3) // key.size(-3)
        key, value = key.repeat_interleave(g, -3), value.repeat_interleave(g, -3)
    if dropout_p != 0.0:
        raise RuntimeError("kiln's attention is for inference: dropout_p must be 0")
    if is_causal and attn_mask is not None:
        raise RuntimeError("Explicit attn_mask should not be set when is_causal=True")
    if min(query.dim(), key.dim(), value.dim()) < 2:
        raise RuntimeError("query, key and value need at least 2 dims")
    if not (query.dtype == key.dtype == value.dtype):
        raise RuntimeError("Expected query, key, and value to have the same dtype")
    if not query.dtype.is_floating_point:
        raise RuntimeError("floating query expected")
    if attn_mask is not None and not (attn_mask.dtype == torch.bool or
                                      attn_mask.dtype.is_floating_point):
        raise RuntimeError("bool or float attn_mask expected")
    L, S = query.size(-2), key.size(-2)
    sc = 1 / math.sqrt(query.size(-1)) if scale is None else scale
    ct = torch.float64 if query.dtype == torch.float64 else torch.float32
    q, k, v = query.to(ct), key.to(ct), value.to(ct)
    attn = torch.matmul(q, k.transpose(-2, -1)) * sc
    # Broadcast over v's batch dims too, so an in-place mask sees the final shape.
    batch = torch.broadcast_shapes(attn.shape[:-2], v.shape[:-2])
    attn = attn.expand(*batch, L, S).clone()
    if is_causal:
        attn.masked_fill_(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            attn.masked_fill_(~attn_mask, float("-inf"))
        else:
            attn += attn_mask.to(ct)
    return torch.matmul(torch.softmax(attn, -1), v).to(query.dtype)


def sdpa_cases(g):
    op = "scaled_dot_product_attention"
    shapes = [([2, 3, 4, 8], [2, 3, 5, 8], [2, 3, 5, 6]), ([4, 8], [5, 8], [5, 8]),
              ([2, 1, 4, 8], [3, 5, 8], [1, 5, 6]), ([1, 6, 16], [1, 6, 16], [1, 6, 16]),
              ([2, 0, 8], [2, 5, 8], [2, 5, 3]), ([2, 4, 8], [2, 0, 8], [2, 0, 3])]
    for dt in FLOATS:
        for sq, sk, sv in shapes:
            q, k, v = g.tensor(sq, dt, "any"), g.tensor(sk, dt, "any"), g.tensor(sv, dt, "any")
            yield Case(op, [q, k, v], ref=sdpa_ref, name=f"sdpa {dt} {sq} {sk} {sv}")
        q, k, v = g.tensor([2, 4, 8], dt), g.tensor([2, 5, 8], dt), g.tensor([2, 5, 3], dt)
        yield Case(op, [q, k, v], {"is_causal": True}, ref=sdpa_ref, name=f"sdpa {dt} causal L<S")
        q, k, v = g.tensor([2, 5, 8], dt), g.tensor([2, 3, 8], dt), g.tensor([2, 3, 3], dt)
        yield Case(op, [q, k, v], {"is_causal": True}, ref=sdpa_ref, name=f"sdpa {dt} causal L>S")
        yield Case(op, [q, k, v], {"scale": 0.3}, ref=sdpa_ref, name=f"sdpa {dt} scale")
        # Masks: bool (True keeps), additive float, broadcast; a row with no key kept is NaN.
        q, k, v = g.tensor([2, 2, 4, 8], dt), g.tensor([2, 2, 5, 8], dt), g.tensor([2, 2, 5, 6], dt)
        for mshape in ([4, 5], [2, 1, 4, 5], [1, 5], [2, 2, 4, 5]):
            yield Case(op, [q, k, v, g.tensor(mshape, torch.bool, "any")], ref=sdpa_ref,
                       name=f"sdpa {dt} bool mask {mshape}")
            yield Case(op, [q, k, v, g.tensor(mshape, dt, "any")], ref=sdpa_ref,
                       name=f"sdpa {dt} float mask {mshape}")
        m = torch.ones(4, 5, dtype=torch.bool)
        m[1, :] = False
        yield Case(op, [q, k, v, m], ref=sdpa_ref, name=f"sdpa {dt} fully masked row")
        fm = torch.zeros(4, 5, dtype=dt)
        fm[:, 2] = float("-inf")
        fm[3, :] = float("-inf")
        yield Case(op, [q, k, v, fm], ref=sdpa_ref, name=f"sdpa {dt} -inf float mask")
    q, k, v = g.tensor([2, 4, 8]), g.tensor([2, 5, 8]), g.tensor([2, 5, 6])
    yield Case(op, [q, k, v, g.tensor([4, 5], torch.float64)], ref=sdpa_ref,
               name="sdpa float64 mask on float32")
    # Errors.
    yield Case(op, [q, k, v], {"dropout_p": 0.1}, ref=sdpa_ref, name="sdpa dropout")
    yield Case(op, [q, k, v, g.tensor([4, 5], torch.bool)], {"is_causal": True}, ref=sdpa_ref,
               name="sdpa causal and mask")
    yield Case(op, [q, k, g.tensor([2, 5, 6], torch.float64)], ref=sdpa_ref,
               name="sdpa dtype mix")
    yield Case(op, [q.to(torch.int64), k.to(torch.int64), v.to(torch.int64)], ref=sdpa_ref,
               name="sdpa int64")
    yield Case(op, [q, k, v, g.tensor([4, 5], torch.int64)], ref=sdpa_ref, name="sdpa int mask")
    yield Case(op, [q, k, v, g.tensor([3, 5], torch.bool)], ref=sdpa_ref, name="sdpa bad mask")
    yield Case(op, [q, g.tensor([2, 5, 7]), v], ref=sdpa_ref, name="sdpa key E mismatch")
    yield Case(op, [g.tensor([8]), k, v], ref=sdpa_ref, name="sdpa 1-D query")


def gqa_cases(g):
    op = "scaled_dot_product_attention"
    for dt in FLOATS:
        for hkv in (1, 2):
            q, k = g.tensor([2, 4, 3, 8], dt, "any"), g.tensor([2, hkv, 5, 8], dt, "any")
            v = g.tensor([2, hkv, 5, 6], dt, "any")
            yield Case(op, [q, k, v], {"enable_gqa": True}, ref=sdpa_ref,
                       name=f"sdpa gqa {dt} hkv {hkv}")
            yield Case(op, [q, k, v], {"enable_gqa": True, "is_causal": True}, ref=sdpa_ref,
                       name=f"sdpa gqa {dt} hkv {hkv} causal")
            m = g.tensor([4, 3, 5], torch.bool, "any")
            yield Case(op, [q, k, v, m], {"enable_gqa": True}, ref=sdpa_ref,
                       name=f"sdpa gqa {dt} hkv {hkv} bool mask")
    q, k, v = g.tensor([2, 6, 3, 8]), g.tensor([2, 4, 5, 8]), g.tensor([2, 4, 5, 8])
    yield Case(op, [q, k, v], {"enable_gqa": True}, ref=sdpa_ref, name="sdpa gqa bad heads")


def kv_cache_ref(query, key_cache, value_cache, cache_position, scale=None):
    """kiln's kv_cache_attention: query row i at position p + i sees cache slots
    0..p + i (p per batch row or one for all, in [0, S - L]); key/value heads
    are shared by query heads in groups."""
    if query.dim() != 4 or key_cache.dim() != 4 or value_cache.dim() != 4:
        raise RuntimeError("expected 4-D query and caches")
    if cache_position.dtype != torch.int64:
        raise RuntimeError("expected an int64 cache_position")
    if query.size(1) % key_cache.size(1) != 0:
        raise RuntimeError("query heads must be a multiple of the cache's heads")
    b, l, s = query.size(0), query.size(2), key_cache.size(2)
    p = cache_position.reshape(-1, 1, 1, 1)
    if p.size(0) not in (1, b):
        raise RuntimeError("expected cache_position of one element or [B]")
    # Every query row's slot p + i in the cache (Note [Cache positions in range]).
    if l > s or bool((p < 0).any()) or bool((p > s - l).any()):
        raise RuntimeError("expected cache_position in [0, S - L]")
    keep = torch.arange(s).view(1, 1, 1, s) - torch.arange(l).view(1, 1, l, 1) <= p
    return sdpa_ref(query, key_cache, value_cache, keep, scale=scale, enable_gqa=True)


def kv_cache_cases(g):
    op = "kv_cache_attention"
    for dt in FLOATS:
        for l in (1, 3):
            q = g.tensor([2, 4, l, 8], dt, "any")
            k, v = g.tensor([2, 2, 7, 8], dt, "any"), g.tensor([2, 2, 7, 6], dt, "any")
            # The last position that fits the rows, then some that do not (errors).
            for pos in ([0], [3], [7 - l], [9], [-1], [5, 1]):
                yield Case(op, [q, k, v, torch.tensor(pos)], ref=kv_cache_ref,
                           name=f"kv_cache_attention {dt} L {l} pos {pos}")
        q, k, v = g.tensor([1, 2, 1, 8], dt), g.tensor([1, 2, 4, 8], dt), g.tensor([1, 2, 4, 8], dt)
        yield Case(op, [q, k, v, torch.tensor(2)], {"scale": 0.5}, ref=kv_cache_ref,
                   name=f"kv_cache_attention {dt} 0-dim pos, scale")
    q, k, v = g.tensor([2, 3, 1, 8]), g.tensor([2, 2, 7, 8]), g.tensor([2, 2, 7, 8])
    yield Case(op, [q, k, v, torch.tensor([1])], ref=kv_cache_ref, name="kv_cache_attention heads")
    q = g.tensor([2, 4, 1, 8])
    yield Case(op, [q, k, v, torch.tensor([1.0])], ref=kv_cache_ref,
               name="kv_cache_attention float position")
    yield Case(op, [q, k, v, torch.tensor([1, 2, 3])], ref=kv_cache_ref,
               name="kv_cache_attention position shape")


def autocast_linear_ref(input, weight, bias=None):
    """linear under PyTorch 1.13's CPU autocast (bfloat16) on the float32 values
    of bfloat16 arguments: the result must be bf16 and equal linear on the bf16
    inputs, which kiln's Autocast kernel passes on (see matmul.py)."""
    with torch.autocast("cpu", dtype=BF16):
        out = torch.nn.functional.linear(up(input), up(weight), up(bias))
    assert out.dtype == BF16, f"autocast gave {out.dtype}"
    return out


def autocast_cases(g):
    for si, sb in [([3, 4], [5]), ([2, 3, 4], [5]), ([4], None)]:
        x, w = g.tensor(si, BF16, "any"), g.tensor([5, 4], BF16, "any")
        b = g.tensor(sb, BF16) if sb else None
        yield Case("linear", [x, w, b], ref=autocast_linear_ref, atol=linear_bf16_atol(x, w, b),
                   name=f"autocast linear {si} bias {sb}")


def cases(g):
    yield from softmax_cases(g)
    yield from layer_norm_cases(g)
    yield from rms_norm_cases(g)
    yield from embedding_cases(g)
    yield from embedding_option_cases(g)
    yield from linear_cases(g)
    yield from sdpa_cases(g)
    yield from gqa_cases(g)
    yield from kv_cache_cases(g)
    yield from autocast_cases(g)
