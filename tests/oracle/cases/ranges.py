"""arange, linspace and eye: dtype inference, element counts, PyTorch's values bit for bit
(rtol = atol = 0), every dtype, and the errors."""

import torch

from generate import ALL, FLOATS, INTS, Case

EXACT = {"rtol": 0.0, "atol": 0.0}
NUMERIC = FLOATS + INTS


def cases(g):
    yield from arange_cases(g)
    yield from linspace_cases(g)
    yield from eye_cases(g)


def arange_cases(g):
    # dtype inference: int64 when every number is an integer (bools count), else float32.
    for end in (5, 5.0, 0, 1, True, 1000):
        yield Case("arange", [end], name=f"arange {end!r}")
    for args in [(1, 10, 3), (10, 1, -3), (1, 2.5, 0.5), (0, 1, 0.1), (-3.3, 2.9, 0.07),
                 (0.1, 1.7, 0.01), (0.3, 100.7, 1.3), (5, -7.25, -0.3), (1000.0, 1007.0, 0.0123),
                 (3, 3, 1), (3, 3, -1), (0, 10, 3), (-5, 5, 1), (0, 1e-3, 1e-5),
                 (2 ** 40, 2 ** 40 + 100, 7), (1e8, 1e8 + 64, 0.5)]:
        yield Case("arange.start_step", list(args), **EXACT, name=f"arange {args}")
        for dt in NUMERIC:
            yield Case("arange.start_step", list(args), {"dtype": dt}, **EXACT,
                       name=f"arange {args} {dt}")
    # Integer dtypes truncate the numbers first.
    for args in [(0.5, 5.5, 1), (0, 5, 1.5), (0, 5, 0.5), (-2.5, 3, 1), (250, 260, 1), (0, 300, 100)]:
        for dt in (torch.int64, torch.int32, torch.uint8, torch.int8):
            yield Case("arange.start_step", list(args), {"dtype": dt}, name=f"arange {args} {dt}")
    # Errors.
    yield Case("arange.start_step", [1, 10, 0], name="arange zero step")
    yield Case("arange.start_step", [1, 10, -1], name="arange wrong sign")
    yield Case("arange.start_step", [10, 1, 1], name="arange wrong sign 2")
    yield Case("arange.start_step", [1, float("inf"), 1], name="arange inf end")
    yield Case("arange.start_step", [float("nan"), 1, 1], name="arange nan start")
    yield Case("arange.start_step", [1, 2, float("nan")], name="arange nan step")
    yield Case("arange", [5], {"dtype": torch.bool}, name="arange bool")
    yield Case("arange.start_step", [0, 1e40, 1e30], {"dtype": torch.float16}, name="arange half overflow")


def linspace_cases(g):
    for args in [(0, 1, 5), (0.1, 1.7, 7), (-3.3, 2.9, 11), (0.3, 100.7, 15), (-1, 1, 16),
                 (5, -7.25, 17), (0.1, 1.7, 33), (-3.3, 2.9, 40), (0, 10, 100), (-1, 1, 1001),
                 (3, 10, 1), (3, 10, 0), (2, 2, 9), (0, 90, 31), (1e-3, 1e3, 64), (-50, 77, 70)]:
        yield Case("linspace", list(args), **EXACT, name=f"linspace {args}")
        for dt in NUMERIC:
            if dt == torch.uint8 and min(args[:2]) < 0:
                continue
            if dt in (torch.int8, torch.uint8) and max(abs(args[0]), abs(args[1])) > 127:
                continue
            yield Case("linspace", list(args), {"dtype": dt}, **EXACT, name=f"linspace {args} {dt}")
    yield Case("linspace", [-5, 5, 3], {"dtype": torch.uint8}, name="linspace uint8 wraps start")
    yield Case("linspace", [0.7, 9.9, 4], {"dtype": torch.int32}, name="linspace truncates")
    # Errors.
    yield Case("linspace", [0, 10, -1], name="linspace negative steps")
    yield Case("linspace", [0, 1, 3], {"dtype": torch.bool}, name="linspace bool")
    yield Case("linspace", [0, 300, 4], {"dtype": torch.int8}, name="linspace int8 overflow")
    yield Case("linspace", [0, 1e6, 4], {"dtype": torch.float16}, name="linspace half overflow")


def eye_cases(g):
    for dt in ALL:
        yield Case("eye", [3], {"dtype": dt}, name=f"eye {dt}")
        yield Case("eye.m", [2, 4], {"dtype": dt}, name=f"eye.m {dt}")
    yield Case("eye", [4], name="eye default")
    yield Case("eye.m", [5, 3], name="eye.m tall")
    yield Case("eye.m", [0, 3], name="eye.m empty")
    yield Case("eye", [0], name="eye 0")
    yield Case("eye", [-1], name="eye negative")
    yield Case("eye.m", [2, -1], name="eye.m negative")
