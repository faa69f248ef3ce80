"""einsum: the equation forms models use (explicit and implicit output, batch
dims, diagonals, sums, outer products, "..." with broadcasting, three and four
operands, spaces, upper-case subscripts), every float dtype and the integer
forms PyTorch keeps consistent, operands in every generator layout, empty
dims, size-1 subscripts that broadcast, and the parse and size errors.

PyTorch 1.13 has no float16 products on the CPU, and rounds some bfloat16
partial sums in bfloat16: 16-bit references are computed in float64 and
rounded once. Three or more operands round each pairwise result to the
dtype, in kiln as in PyTorch: those cases allow a few roundings of the
magnitudes involved (the same contraction over absolute values).
"""

import torch

from generate import Case

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]

# (equation, operand shapes)
FORMS = [
    ("ij,jk->ik", [[3, 4], [4, 5]]),
    ("ij,jk", [[3, 4], [4, 5]]),
    ("ij,kj->ik", [[3, 4], [5, 4]]),
    ("bij,bjk->bik", [[2, 3, 4], [2, 4, 5]]),
    ("bhqd,bhkd->bhqk", [[2, 3, 4, 5], [2, 3, 6, 5]]),
    ("bhqk,bhkd->bhqd", [[2, 3, 4, 6], [2, 3, 6, 5]]),
    ("ii->i", [[4, 4]]),
    ("ii", [[4, 4]]),
    ("iij->ji", [[3, 3, 5]]),
    ("ij->i", [[3, 4]]),
    ("ij->j", [[3, 4]]),
    ("ij->", [[3, 4]]),
    ("ij->ji", [[3, 4]]),
    ("ji", [[3, 4]]),
    ("i,i->", [[7], [7]]),
    ("i,i", [[7], [7]]),
    ("i,j->ij", [[3], [4]]),
    ("i,j", [[3], [4]]),
    ("ij,ij->ij", [[3, 4], [3, 4]]),
    ("ij,ij->i", [[3, 4], [3, 4]]),
    ("bn,anm,bm->ba", [[2, 3], [4, 3, 5], [2, 5]]),
    ("ij,jk,kl->il", [[2, 3], [3, 4], [4, 5]]),
    ("ab,bc,cd,de->ae", [[2, 3], [3, 2], [2, 4], [4, 3]]),
    ("ij,jk,k->i", [[2, 3], [3, 4], [4]]),
    ("...ij,...jk->...ik", [[2, 1, 3, 4], [5, 4, 2]]),
    ("...d,d->...", [[2, 3, 4], [4]]),
    ("...,...->...", [[2, 3], [3]]),
    ("b...d,bd->b...", [[2, 3, 4, 5], [2, 5]]),
    ("...ij->...ji", [[2, 3, 4]]),
    ("...ii->...i", [[2, 3, 3]]),
    ("ij...->j", [[3, 4, 2, 2]]),
    ("i...,i...", [[3, 2], [3, 2]]),
    ("b i d, b j d -> b i j", [[2, 3, 4], [2, 5, 4]]),
    ("Ab,bC->AC", [[3, 4], [4, 2]]),
    ("aA,Aa->", [[3, 4], [4, 3]]),
    ("ij,ij->ij", [[3, 1], [1, 4]]),
    ("bij,bjk->bik", [[1, 3, 4], [3, 4, 5]]),
    ("ij,jk->ik", [[3, 1], [4, 5]]),
    ("ij,jk->ik", [[3, 0], [0, 5]]),
    ("ij,jk->ik", [[0, 4], [4, 5]]),
    ("ij->i", [[3, 0]]),
    ("i,i->i", [[5], [5]]),
    ("ijk,ikl,ilm->ijm", [[2, 3, 4], [2, 4, 3], [2, 3, 2]]),
    ("bhnd,bhmd,bhme->bhne", [[1, 2, 3, 4], [1, 2, 5, 4], [1, 2, 5, 3]]),
]

ERRORS = [
    ("ij,jk->ik", [[3, 4], [5, 2]], "size mismatch"),
    ("ii->i", [[3, 4]], "diagonal sizes"),
    ("ij->k", [[3, 4]], "unknown output subscript"),
    ("ij->ii", [[3, 4]], "repeated output subscript"),
    ("ij,jk", [[3, 4]], "too few operands"),
    ("ij", [[3, 4], [4, 4]], "too many operands"),
    ("ij1->i", [[3, 4]], "bad character"),
    ("ijk->i", [[3, 4]], "too many subscripts"),
    ("i->", [[3, 4]], "too few subscripts"),
    ("...ijk->...", [[3, 4]], "subscripts beyond the dims"),
    ("i.j->i", [[3, 4]], "lone dot"),
    ("i..,i", [[3], [3]], "two dots"),
    ("......", [[3]], "two ellipses"),
    ("ij->i->j", [[3, 4]], "two arrows"),
    ("...i,...i->...", [[2, 3], [4, 3, 3]], "ellipsis does not broadcast"),
    ("", [[3]], "empty equation"),
]


def f64_ref(dt):
    def ref(equation, tensors):
        return torch.einsum(equation, [t.double() for t in tensors]).to(dt)
    return ref


def rounding_atol(eq, ops, dt):
    """Three roundings of the largest magnitude the chain passes through."""
    mag = torch.einsum(eq, [t.double().abs() for t in ops])
    top = mag.max().item() if mag.numel() else 0.0
    return max(3 * torch.finfo(dt).eps * top, 1e-5)


def cases(g):
    for eq, shapes in FORMS:
        for dt in FLOATS:
            ops = [g.tensor(s, dt, "any") for s in shapes]
            half = dt in (torch.float16, torch.bfloat16)
            ref = f64_ref(dt) if half else None
            atol = rounding_atol(eq, ops, dt) if half and len(ops) > 2 else None
            yield Case("einsum", [eq, ops], ref=ref, atol=atol, name=f"einsum '{eq}' {dt}")
    # Every layout of each operand of a product, a diagonal and a sum.
    for layout in g.LAYOUTS:
        yield Case("einsum", ["bij,bjk->bik", [g.tensor([2, 3, 4], torch.float32, layout),
                                               g.tensor([2, 4, 5], torch.float32, layout)]],
                   name=f"einsum bmm {layout}")
        yield Case("einsum", ["ii->i", [g.tensor([5, 5], torch.float64, layout)]],
                   name=f"einsum diagonal {layout}")
        yield Case("einsum", ["ijk->ki", [g.tensor([3, 4, 2], torch.float32, layout)]],
                   name=f"einsum sum and permute {layout}")
    # Integers: products of one dtype, and a lone operand's sum (int64, as sum's).
    for dt in (torch.int64, torch.int32, torch.int16):
        for eq, shapes in [("ij,jk->ik", [[3, 4], [4, 5]]), ("bij,bjk", [[2, 3, 4], [2, 4, 2]]),
                           ("i,j->ij", [[3], [4]]), ("ij->i", [[3, 4]]), ("ii->i", [[3, 3]]),
                           ("ij->ji", [[3, 4]]), ("i,i->i", [[4], [4]])]:
            yield Case("einsum", [eq, [g.tensor(s, dt, "any") for s in shapes]],
                       name=f"einsum '{eq}' {dt}")
    for eq, shapes, what in ERRORS:
        yield Case("einsum", [eq, [g.tensor(s) for s in shapes]], name=f"einsum error: {what}")
    yield Case("einsum", ["i,i->", [g.tensor([3]), g.tensor([3], torch.float64)]],
               name="einsum error: dtype mix")
