"""cat, stack, repeat, roll, flip, constant_pad_nd, pad (every mode), tril and triu,
unbind, repeat_interleave (an integer count), unfold: every
form, all dtypes, every generator layout for inputs and in-place targets, 0-dim, empty,
errors."""

import torch

from generate import ALL, FLOATS, INTS, Case, aten_op

WRITABLE = ["contiguous", "transposed", "strided", "offset"]


def cases(g):
    yield from cat_cases(g)
    yield from stack_cases(g)
    yield from repeat_cases(g)
    yield from roll_cases(g)
    yield from flip_cases(g)
    yield from pad_cases(g)
    yield from pad_mode_cases(g)
    yield from tri_cases(g)
    yield from unbind_cases(g)
    yield from repeat_interleave_cases(g)
    yield from unfold_cases(g)


def cat_cases(g):
    for dt in ALL:
        for layout in g.LAYOUTS:
            yield Case("cat", [[g.tensor([2, 3], dt, layout), g.tensor([4, 3], dt, "any")], 0],
                       name=f"cat {dt} {layout} dim 0")
            yield Case("cat", [[g.tensor([3, 2], dt, layout), g.tensor([3, 5], dt, "any"),
                                g.tensor([3, 1], dt, layout)], -1],
                       name=f"cat {dt} {layout} dim -1")
        yield Case("cat", [[g.tensor([2, 3, 4], dt, "any"), g.tensor([2, 1, 4], dt, "any")], 1])
        yield Case("cat", [[g.tensor([5], dt, "any")], 0], name=f"cat single {dt}")
    # Type promotion across inputs.
    for da, db, dc in [(torch.int32, torch.float16, torch.int64), (torch.uint8, torch.int8, torch.bool),
                       (torch.float16, torch.bfloat16, torch.float16), (torch.bool, torch.bool, torch.int16),
                       (torch.int64, torch.float64, torch.float32), (torch.bool, torch.uint8, torch.uint8)]:
        yield Case("cat", [[g.tensor([2, 3], da, "any"), g.tensor([1, 3], db, "any"),
                            g.tensor([2, 3], dc, "any")], 0], name=f"cat promote {da} {db} {dc}")
    # Legacy rule: 1-D tensors of shape [0] are skipped (but join the promotion).
    yield Case("cat", [[torch.zeros(0, dtype=torch.float64), g.tensor([2, 3], torch.int32)], 1],
               name="cat skip [0] promotes")
    yield Case("cat", [[g.tensor([2, 3]), torch.zeros(0), g.tensor([2, 2])], -1],
               name="cat skip [0] middle")
    yield Case("cat", [[torch.zeros(0, dtype=torch.int32), torch.zeros(0)], 0], name="cat all skipped")
    yield Case("cat", [[torch.zeros(0), torch.zeros(0)], 5], name="cat all skipped dim 5")
    yield Case("cat", [[torch.zeros(0), g.tensor([2, 3])], 5], name="cat skip bad dim")
    yield Case("cat", [[g.tensor([2, 3]), torch.zeros(0, 3)], 0], name="cat [0, 3] joins")
    yield Case("cat", [[g.tensor([2, 3]), torch.zeros(0, 4)], 0], name="cat [0, 4] mismatch")
    yield Case("cat", [[g.tensor([0, 3]), g.tensor([0, 3])], 1], name="cat empty both")
    # Errors.
    yield Case("cat", [[torch.tensor(1.0), torch.tensor(2.0)], 0], name="cat 0-dim")
    yield Case("cat", [[g.tensor([2, 3]), g.tensor([2, 3, 1])], 0], name="cat rank mismatch")
    yield Case("cat", [[g.tensor([2, 3]), g.tensor([2, 4])], 0], name="cat size mismatch")
    yield Case("cat", [[g.tensor([2, 3]), g.tensor([2, 3])], 2], name="cat dim out of range")
    yield Case("cat", [[g.tensor([2, 3]), g.tensor([2, 3])], -3], name="cat dim -3")
    # out=.
    for out_dt in (torch.float32, torch.float64, torch.int64):
        for layout in WRITABLE:
            yield Case("cat.out", [[g.tensor([2, 3], torch.int32), g.tensor([3, 3], torch.int16)], 0],
                       {"out": g.tensor([5, 3], out_dt, layout)}, name=f"cat.out {out_dt} {layout}")
    yield Case("cat.out", [[g.tensor([2, 3]), g.tensor([3, 3], torch.float64)], 0],
               {"out": g.tensor([5, 3], torch.float32)}, name="cat.out downcast float")
    yield Case("cat.out", [[g.tensor([2, 3]), g.tensor([3, 3])], 0],
               {"out": g.tensor([5, 3], torch.int64)}, name="cat.out float into int")
    yield Case("cat.out", [[g.tensor([2, 3]), g.tensor([3, 3])], 0],
               {"out": g.tensor([0], torch.float32)}, name="cat.out resize")
    yield Case("cat.out", [[g.tensor([2, 3]), g.tensor([3, 3])], 0],
               {"out": g.tensor([4, 2], torch.float32)}, name="cat.out resize nonempty")
    yield Case("cat.out", [[g.tensor([1, 3]), g.tensor([1, 3])], 0],
               {"out": g.tensor([2, 3], torch.float32, "expanded")}, name="cat.out expanded out")


def stack_cases(g):
    for dt in ALL:
        for dim in (0, 1, 2, -1):
            a, b = g.tensor([2, 3], dt, "any"), g.tensor([2, 3], dt, "any")
            yield Case("stack", [[a, b, g.tensor([2, 3], dt, "any")], dim],
                       name=f"stack {dt} dim {dim}")
    yield Case("stack", [[g.tensor([2, 3], torch.int32), g.tensor([2, 3], torch.float64)], 1],
               name="stack promote")
    yield Case("stack", [[torch.tensor(1), torch.tensor(2)], -1], name="stack 0-dim")
    yield Case("stack", [[g.tensor([0]), g.tensor([0])], 1], name="stack [0]")
    yield Case("stack", [[g.tensor([2, 0]), g.tensor([2, 0])], 1], name="stack [2, 0]")
    yield Case("stack", [[g.tensor([2, 3]), g.tensor([3, 2])], 0], name="stack size mismatch")
    yield Case("stack", [[g.tensor([2, 3]), g.tensor([3, 2])], 2], name="stack size mismatch last")
    yield Case("stack", [[g.tensor([2])], 3], name="stack dim out of range")
    for layout in WRITABLE:
        yield Case("stack.out", [[g.tensor([2, 3]), g.tensor([2, 3])], 1],
                   {"out": g.tensor([2, 2, 3], torch.float64, layout)}, name=f"stack.out {layout}")
    yield Case("stack.out", [[g.tensor([2]), g.tensor([2])], 1],
               {"out": g.tensor([3], torch.float32)}, name="stack.out resize")


def repeat_cases(g):
    for dt in ALL:
        for layout in g.LAYOUTS:
            yield Case("repeat", [g.tensor([2, 3], dt, layout), [2, 1, 3]],
                       name=f"repeat {dt} {layout}")
    yield Case("repeat", [g.tensor([3]), [2, 2]])
    yield Case("repeat", [g.tensor([2, 1, 3], torch.float32, "transposed"), [1, 4, 2]])
    yield Case("repeat", [g.tensor([]), []], name="repeat 0-dim none")
    yield Case("repeat", [g.tensor([]), [3, 2]], name="repeat 0-dim")
    yield Case("repeat", [g.tensor([2, 3]), [0, 1]], name="repeat zero")
    yield Case("repeat", [g.tensor([0, 3]), [2, 2]], name="repeat empty")
    yield Case("repeat", [g.tensor([2, 3]), [2]], name="repeat too few")
    yield Case("repeat", [g.tensor([2, 3]), [2, -1]], name="repeat negative")


def roll_cases(g):
    for dt in ALL:
        for layout in g.LAYOUTS:
            x = g.tensor([3, 5], dt, layout)
            yield Case("roll", [x, [2], [1]], name=f"roll {dt} {layout}")
            yield Case("roll", [x, [-7], []], name=f"roll flat {dt} {layout}")
            yield Case("roll", [x, [1, -2], [0, 1]], name=f"roll 2 dims {dt} {layout}")
    x = g.tensor([2, 3, 4], torch.float32, "any")
    yield Case("roll", [x, [1, 1], [1, 1]], name="roll repeated dim")
    yield Case("roll", [x, [5, -3, 2], [-1, 0, 1]], name="roll 3 dims")
    yield Case("roll", [x, [12], [2]], name="roll full turn")
    yield Case("roll", [x, [0], [0]], name="roll zero")
    yield Case("roll", [g.tensor([]), [1], []], name="roll 0-dim")
    yield Case("roll", [g.tensor([]), [1], [0]], name="roll 0-dim with dim")
    yield Case("roll", [g.tensor([0, 3]), [1], [5]], name="roll empty skips dim check")
    yield Case("roll", [g.tensor([0, 3]), [1, 2], [0, 7]], name="roll empty 2 dims")
    yield Case("roll", [x, [1, 1], [1]], name="roll count mismatch")
    yield Case("roll", [x, [1], [0, 1]], name="roll count mismatch 2")
    yield Case("roll", [x, [], []], name="roll no shifts")
    yield Case("roll", [x, [1], [3]], name="roll dim out of range")
    yield Case("roll", [x, [1, 2], []], name="roll 2 shifts no dims")


def flip_cases(g):
    for dt in ALL:
        for layout in g.LAYOUTS:
            x = g.tensor([3, 4, 2], dt, layout)
            yield Case("flip", [x, [0, -1]], name=f"flip {dt} {layout}")
            yield Case("flip", [x, [1]], name=f"flip mid {dt} {layout}")
    x = g.tensor([2, 3])
    yield Case("flip", [x, []], name="flip none")
    yield Case("flip", [x, [0, 1]], name="flip all")
    yield Case("flip", [g.tensor([]), [0]], name="flip 0-dim")
    yield Case("flip", [g.tensor([0, 3]), [1]], name="flip empty")
    yield Case("flip", [x, [0, -2]], name="flip repeated dim")
    yield Case("flip", [x, [2]], name="flip dim out of range")
    yield Case("flip", [g.tensor([]), [1]], name="flip 0-dim bad dim")


def pad_cases(g):
    for dt in ALL:
        for layout in g.LAYOUTS:
            x = g.tensor([2, 3, 4], dt, layout)
            yield Case("constant_pad_nd", [x, [1, 2], 7], name=f"pad {dt} {layout}")
            yield Case("constant_pad_nd", [x, [2, -1, -1, 3]], name=f"pad crop {dt} {layout}")
    x = g.tensor([2, 3])
    yield Case("constant_pad_nd", [x, [1, 1, 2, 0], 2.5], name="pad 2 dims")
    yield Case("constant_pad_nd", [g.tensor([2, 3], torch.int64), [1, 1], 2.5], name="pad int float value")
    yield Case("constant_pad_nd", [g.tensor([2, 3], torch.bool), [1, 1], 2], name="pad bool")
    yield Case("constant_pad_nd", [g.tensor([2, 3], torch.float16), [0, 1], -1e4], name="pad half")
    yield Case("constant_pad_nd", [x, [-1, -2]], name="pad crop to empty")
    yield Case("constant_pad_nd", [x, [-1, -2, 0, 0]], name="pad crop only")
    yield Case("constant_pad_nd", [x, [-1, -2, 1, 0]], name="pad crop to empty then pad")
    yield Case("constant_pad_nd", [x, [-2, -2]], name="pad crop too much")
    yield Case("constant_pad_nd", [x, [-4, 0]], name="pad crop past size")
    yield Case("constant_pad_nd", [x, [1]], name="pad odd")
    yield Case("constant_pad_nd", [x, [1, 1, 1, 1, 1, 1]], name="pad too long")
    yield Case("constant_pad_nd", [g.tensor([0, 3]), [1, 1]], name="pad empty input")
    yield Case("constant_pad_nd", [g.tensor([0, 3]), [1, 1, 0, 0]], name="pad empty dim stays 0")
    yield Case("constant_pad_nd", [g.tensor([]), []], name="pad 0-dim")
    yield Case("constant_pad_nd", [x, [0, 0]], name="pad zeros")
    yield Case("constant_pad_nd", [g.tensor([2, 3], torch.int8), [1, 1], 300], name="pad overflow")
    yield Case("constant_pad_nd", [g.tensor([2, 3], torch.int8), [-1, 0], 300],
               name="pad crop ignores value")
    yield Case("constant_pad_nd", [g.tensor([2, 3], torch.float16), [1, 1], 1e6],
               name="pad half overflow")
    for dt in (torch.float32, torch.int32, torch.bfloat16):
        y = g.tensor([2, 3], dt, "any")
        yield Case("pad", [y, [1, 2]], name=f"pad.default {dt}")
        yield Case("pad", [y, [1, 2, -1, 1], "constant", 3.5], name=f"pad.default value {dt}")
    yield Case("pad", [x, [1, 1], "constant", None], name="pad.default None")
    yield Case("pad", [x, [1]], name="pad.default odd")
    yield Case("pad", [x, [1, 1, 1, 1, 1, 1]], name="pad.default too long")


MODE_OPS = {"reflect": "reflection_pad", "replicate": "replication_pad"}


def pad_index_ref(fn):
    """`fn` (a pad of torch 1.13's) applied to the flat indices of the input, in float64,
    then the input gathered through them: the same map for every dtype, where torch 1.13
    pads reflect and replicate in float32 and float64 only. Circular pads of an unbatched
    input (torch 1.13 asks for a batch dim, torch 2 does not) pad it as a batch of one."""
    def ref(x, pad, *args):
        idx = torch.arange(x.numel(), dtype=torch.float64).reshape(x.shape)
        mode = args[0] if args else ""
        lift = (mode == "circular" or fn is A._pad_circular.default) and x.dim() == len(pad) // 2 + 1
        if lift:
            idx = idx.unsqueeze(0)
        p = fn(idx, pad, *args)
        if lift:
            p = p.squeeze(0)
        return x.contiguous().reshape(-1)[p.long().reshape(-1)].reshape(p.shape)
    return ref


A = torch.ops.aten


def pad_mode_cases(g):
    """pad's reflect, replicate and circular modes (Note [Pad modes]) and the kernels they
    call, on 1, 2 and 3 padded dims, batched and unbatched."""
    shapes = {1: ([2, 3, 5], [2, 1]), 2: ([2, 3, 4, 5], [1, 2, 2, 1]),
              3: ([2, 2, 3, 4, 5], [1, 1, 2, 0, 1, 2])}
    for mode in ("reflect", "replicate", "circular"):
        for dt in ALL:
            for n, (shape, pad) in shapes.items():
                for batched in (True, False):
                    x = g.tensor(shape if batched else shape[1:], dt, "any")
                    yield Case("pad", [x, pad, mode], ref=pad_index_ref(A.pad.default),
                               name=f"pad {mode} {dt} {n}-d {'batched' if batched else 'unbatched'}")
        for layout in g.LAYOUTS:
            x = g.tensor([3, 4, 6], torch.float32, layout)
            yield Case("pad", [x, [3, 2, 1, 3] if mode != "circular" else [3, 2, 1, 2], mode],
                       ref=pad_index_ref(A.pad.default), name=f"pad {mode} {layout} 2-d")
        # Native torch kernels where torch 1.13 has them (float32 / float64, batched).
        for dt in (torch.float32, torch.float64):
            x = g.tensor([2, 3, 7], dt, "any")
            yield Case("pad", [x, [3, 2], mode], name=f"pad {mode} {dt} torch")
        # Crops: negative pads.
        crops = [[-1, -1], [0, -2], [-2, 0]] if mode == "circular" else \
            [[-1, 2], [2, -1], [-2, -1], [-4, 1], [1, -4], [-7, 3]]
        for pad in crops:
            yield Case("pad", [g.tensor([2, 3, 5], torch.float32, "any"), pad, mode],
                       ref=pad_index_ref(A.pad.default), name=f"pad {mode} crop {pad}")
        yield Case("pad", [g.tensor([0, 3, 5]), [1, 2], mode], ref=pad_index_ref(A.pad.default),
                   name=f"pad {mode} empty batch")
        yield Case("pad", [g.tensor([2, 3, 5]), [1, 1], mode, 0.0], ref=pad_index_ref(A.pad.default),
                   name=f"pad {mode} value 0")
        # Errors.
        yield Case("pad", [g.tensor([2, 3, 5]), [1, 1], mode, 1.0], name=f"pad {mode} value")
        yield Case("pad", [g.tensor([5]), [1, 1], mode], name=f"pad {mode} 1-D")
        yield Case("pad", [g.tensor([1, 2, 3, 5]), [1, 1], mode], name=f"pad {mode} too many dims")
        yield Case("pad", [g.tensor([2, 3, 4, 5]), [1, 1, 1, 1, 1, 1, 1, 1], mode],
                   name=f"pad {mode} 4 dims")
        yield Case("pad", [g.tensor([2, 3, 5]), [], mode], name=f"pad {mode} no pads")
        yield Case("pad", [g.tensor([2, 3, 5]), [6, 6], mode],
                   ref=pad_index_ref(A.pad.default) if mode == "replicate" else None,
                   name=f"pad {mode} past the size")
        yield Case("pad", [g.tensor([2, 3, 5]), [5, 0], mode],
                   ref=pad_index_ref(A.pad.default), name=f"pad {mode} size")
        yield Case("pad", [g.tensor([2, 3, 5]), [0, -5], mode],
                   ref=pad_index_ref(A.pad.default), name=f"pad {mode} crop all")
        yield Case("pad", [g.tensor([2, 3, 0]), [1, 1], mode],
                   ref=pad_index_ref(A.pad.default), name=f"pad {mode} empty padded dim")
        if mode != "circular":
            yield Case("pad", [g.tensor([2, 0, 5]), [1, 1], mode], name=f"pad {mode} empty channels")
    yield Case("pad", [g.tensor([2, 3, 5]), [1, 1], "symmetric"], name="pad unknown mode")
    # The kernels by name.
    for mode, op in MODE_OPS.items():
        for n, (shape, pad) in shapes.items():
            for dt in (torch.float32, torch.float64, torch.int64, torch.float16, torch.bool):
                native = dt in (torch.float32, torch.float64)
                ref = None if native else pad_index_ref(aten_op(f"{op}{n}d"))
                yield Case(f"{op}{n}d", [g.tensor(shape[1:], dt, "any"), pad], ref=ref,
                           name=f"{op}{n}d {dt}")
            if mode == "replicate":  # torch 1.13's reflection_pad1d/2d take extra pads
                yield Case(f"{op}{n}d", [g.tensor(shape, torch.float32, "any"), pad + [0, 0]],
                           name=f"{op}{n}d wrong pad count")
    for shape, pad in ([2, 3, 5], [2, 1]), ([1, 2, 3, 4], [1, 0, 2, 3]), ([2, 2, 3, 4], [1, 1]):
        yield Case("_pad_circular", [g.tensor(shape, torch.float32, "any"), pad],
                   ref=pad_index_ref(A._pad_circular.default), name=f"_pad_circular {shape} {pad}")
    for dt in ALL:
        yield Case("_pad_circular", [g.tensor([2, 3, 5], dt, "any"), [1, 2]],
                   name=f"_pad_circular {dt}")


def tri_cases(g):
    for op in ("tril", "triu"):
        for dt in ALL:
            for k in (0, 1, -2):
                yield Case(op, [g.tensor([4, 5], dt, "any"), k], name=f"{op} {dt} {k}")
        for layout in g.LAYOUTS:
            yield Case(op, [g.tensor([2, 3, 4], torch.float32, layout), 1], name=f"{op} batched {layout}")
            if layout != "expanded":
                for dt in (torch.float32, torch.int64, torch.bool, torch.float16):
                    yield Case(f"{op}_", [g.tensor([2, 4, 3], dt, layout), -1],
                               name=f"{op}_ {dt} {layout}")
        yield Case(op, [g.tensor([3, 3]), 10], name=f"{op} big k")
        yield Case(op, [g.tensor([3, 3]), -10], name=f"{op} small k")
        yield Case(op, [g.tensor([0, 3]), 0], name=f"{op} empty")
        yield Case(op, [g.tensor([3]), 0], name=f"{op} 1-D")
        yield Case(op, [g.tensor([]), 0], name=f"{op} 0-dim")
        yield Case(f"{op}_", [g.tensor([3]), 0], name=f"{op}_ 1-D")


def unbind_cases(g):
    for dt in ALL:
        for layout in g.LAYOUTS:
            yield Case("unbind.int", [g.tensor([3, 4], dt, layout), 1], check_strides=True,
                       name=f"unbind {dt} {layout}")
    x = g.tensor([2, 3, 4], torch.float32, "any")
    for dim in (0, 1, 2, -1, -3):
        yield Case("unbind.int", [x, dim], check_strides=True, name=f"unbind 3-D dim {dim}")
    yield Case("unbind.int", [g.tensor([5])], check_strides=True, name="unbind 1-D")
    yield Case("unbind.int", [g.tensor([0, 3]), 1], name="unbind empty pieces")
    yield Case("unbind.int", [g.tensor([3]), 1], name="unbind dim out of range")
    yield Case("unbind.int", [g.tensor([]), 0], name="unbind 0-dim")


def repeat_interleave_cases(g):
    op = "repeat_interleave.self_int"
    for dt in ALL:
        for layout in g.LAYOUTS:
            yield Case(op, [g.tensor([2, 3], dt, layout), 3, 1], name=f"{op} {dt} {layout}")
    x = g.tensor([2, 3, 4], torch.float32, "any")
    for dim in (0, 1, 2, -1):
        yield Case(op, [x, 2, dim], name=f"{op} 3-D dim {dim}")
    yield Case(op, [x, 2], name=f"{op} flattened")
    yield Case(op, [g.tensor([3, 2], torch.int64, "transposed"), 1, 0], name=f"{op} once")
    yield Case(op, [g.tensor([3, 2]), 0, 1], name=f"{op} zero")
    yield Case(op, [g.tensor([]), 4], name=f"{op} 0-dim")
    yield Case(op, [g.tensor([]), 4, 0], name=f"{op} 0-dim with dim")
    yield Case(op, [g.tensor([0, 3]), 2, 0], name=f"{op} empty")
    yield Case(op, [g.tensor([3]), -1, 0], name=f"{op} negative")
    yield Case(op, [g.tensor([3, 2]), 2, 2], name=f"{op} dim out of range")
    yield Case(op, [g.tensor([3, 2]), 2, 1], {"output_size": 4}, name=f"{op} output_size")
    yield Case(op, [g.tensor([3, 2]), 2, 1], {"output_size": 5}, name=f"{op} wrong output_size")


def unfold_cases(g):
    for dt in ALL:
        for layout in g.LAYOUTS:
            yield Case("unfold", [g.tensor([4, 7], dt, layout), 1, 3, 2], check_strides=True,
                       name=f"unfold {dt} {layout}")
    x = g.tensor([3, 5, 6], torch.float32, "any")
    for dim, size, step in [(0, 2, 1), (1, 5, 1), (1, 1, 3), (2, 4, 2), (-1, 3, 3), (2, 6, 7),
                            (1, 0, 1), (-3, 3, 5), (2, 2, 100)]:
        yield Case("unfold", [x, dim, size, step], check_strides=True,
                   name=f"unfold 3-D {dim} {size} {step}")
    yield Case("unfold", [g.tensor([]), 0, 1, 1], check_strides=True, name="unfold 0-dim")
    yield Case("unfold", [g.tensor([]), -1, 0, 2], check_strides=True, name="unfold 0-dim size 0")
    yield Case("unfold", [g.tensor([0, 3]), 0, 0, 1], check_strides=True, name="unfold empty")
    yield Case("unfold", [g.tensor([2, 0]), 1, 0, 2], check_strides=True, name="unfold empty dim")
    # Errors.
    yield Case("unfold", [x, 1, 6, 1], name="unfold size past the dim")
    yield Case("unfold", [x, 1, 2, 0], name="unfold step 0")
    yield Case("unfold", [x, 1, 2, -1], name="unfold negative step")
    yield Case("unfold", [x, 1, -1, 1], name="unfold negative size")
    yield Case("unfold", [x, 3, 2, 1], name="unfold dim out of range")
    yield Case("unfold", [g.tensor([]), 1, 1, 1], name="unfold 0-dim dim 1")
    yield Case("unfold", [g.tensor([]), 0, 2, 1], name="unfold 0-dim size 2")
