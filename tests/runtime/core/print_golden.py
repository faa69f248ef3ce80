#!/usr/bin/python3
"""Writes print_golden.txt: PyTorch 1.13's repr of tensors that print_test.cpp builds
the same way in kiln (from explicit float64 values, arange and basic arithmetic).

    /usr/bin/python3 tests/runtime/core/print_golden.py > tests/runtime/core/print_golden.txt

Each case is "=== name" followed by the repr's lines. Keep the names and the
constructions in step with print_test.cpp.
"""

import math

import torch

inf, nan = math.inf, math.nan
f16, bf16, f32, f64 = torch.float16, torch.bfloat16, torch.float32, torch.float64


def vals(values, dtype=f32):
    return torch.tensor(values, dtype=f64).to(dtype)


def ar(n, dtype=f64):
    return torch.arange(n, dtype=dtype)


CASES = [
    ("float_basic", lambda: vals([1, 2, 3])),
    ("float_frac", lambda: (ar(14) * 0.75 - 5).to(f32)),
    ("float_round", lambda: vals([0.12345, 1.99996, 10.5, -3.25])),
    ("float_neg_int", lambda: vals([-1, 2, -300])),
    ("float_neg_zero", lambda: vals([-0.0, 1.0])),
    ("float_zeros", lambda: vals([0, 0, 0])),
    ("float_sci_small", lambda: vals([1e-5, 0.5, 2])),
    ("float_sci_big", lambda: vals([1e9, 1, 2])),
    ("float_sci_ratio", lambda: vals([0.001, 2.5])),
    ("float_sci_tiny", lambda: vals([1e-10, 2e-10])),
    ("float_sci_width", lambda: vals([1e-8, -1e10, 3])),
    ("float_int_sci", lambda: vals([1e10, 1])),
    ("float_int_1e8", lambda: vals([1e8, 1])),
    ("float_int_ratio", lambda: vals([1, 1e5])),
    ("float_inf_nan", lambda: vals([inf, -inf, nan, 1.5, 0])),
    ("float_int_inf", lambda: vals([1, inf, -inf, nan])),
    ("float_only_nonfinite", lambda: vals([nan, inf])),
    ("float_sci_nonfinite", lambda: vals([1e-5, inf, nan, -2])),
    ("float64", lambda: ar(5) / 3),
    ("float64_int", lambda: ar(4)),
    ("float16", lambda: (ar(8) * 0.25).to(f16)),
    ("float16_frac", lambda: (ar(6) / 7).to(f16)),
    ("bfloat16", lambda: torch.linspace(-1, 1, 7, dtype=f64).to(bf16)),
    ("bfloat16_big", lambda: vals([3e5, -1, 0.5], bf16)),
    ("int64", lambda: ar(25, torch.int64) - 5),
    ("int64_extreme", lambda: torch.tensor([-9223372036854775807, 1, 42])),
    ("int32", lambda: (ar(12, torch.int64) - 6).reshape(3, 4).to(torch.int32)),
    ("int16", lambda: vals([-300, 7, 12000], torch.int16)),
    ("int8", lambda: vals([-128, 0, 127], torch.int8)),
    ("uint8", lambda: vals([0, 5, 255], torch.uint8)),
    ("bool", lambda: ar(6, torch.int64) > 2),
    ("bool_2d", lambda: (ar(6, torch.int64) > 3).reshape(2, 3)),
    ("scalar_float", lambda: vals(3.0)),
    ("scalar_frac", lambda: vals(-2.5)),
    ("scalar_sci", lambda: vals(1e-7)),
    ("scalar_int", lambda: torch.tensor(7)),
    ("scalar_int32", lambda: vals(-7, torch.int32)),
    ("scalar_bool", lambda: torch.tensor(True)),
    ("scalar_half", lambda: vals(1.5, f16)),
    ("scalar_nan", lambda: vals(nan)),
    ("empty", lambda: torch.zeros(0)),
    ("empty_2d", lambda: torch.zeros(0, 3)),
    ("empty_int64", lambda: torch.zeros(0, dtype=torch.int64)),
    ("empty_int32_3d", lambda: torch.zeros(2, 0, 3, dtype=torch.int32)),
    ("empty_half", lambda: torch.zeros(0, dtype=f16)),
    ("matrix", lambda: (ar(12) / 7).to(f32).reshape(3, 4)),
    ("matrix_int", lambda: ar(12, torch.int64).reshape(3, 4) * 11 - 40),
    ("tensor3d", lambda: (ar(24) - 12).to(f32).reshape(2, 3, 4)),
    ("tensor4d", lambda: (ar(16) * 0.5).to(f32).reshape(2, 2, 2, 2)),
    ("wrap_1d", lambda: (ar(30) / 7).to(f32)),
    ("wrap_2d", lambda: (ar(40) / 3).to(f32).reshape(2, 20)),
    ("wrap_int", lambda: ar(40, torch.int64) * 1001),
    ("wrap_suffix", lambda: (ar(16) / 3).to(f16)),
    ("wrap_suffix_2d", lambda: (ar(33) / 3).to(f64).reshape(3, 11)),
    ("big_1d", lambda: ar(2000).to(f32)),
    ("big_1d_frac", lambda: (ar(1500) / 9).to(f32)),
    ("big_2d", lambda: ar(1200, torch.int64).reshape(40, 30)),
    ("big_2d_narrow", lambda: (ar(1206) * 0.5).to(f32).reshape(201, 6)),
    ("big_3d", lambda: (ar(3000) * 0.01).to(f32).reshape(10, 15, 20)),
    ("big_3d_sci", lambda: (ar(3000) * 1e-6).to(f32).reshape(20, 10, 15)),
    ("big_bool", lambda: (ar(1001, torch.int64) > 500)),
    ("big_half", lambda: (ar(1100) / 3).to(f16)),
    ("transposed", lambda: (ar(12) / 4).to(f32).reshape(3, 4).t()),
    ("strided", lambda: (ar(20) - 10).to(f32)[::3]),
    ("transposed_3d", lambda: ar(24, torch.int64).reshape(2, 3, 4).transpose(0, 2)),
    ("expanded", lambda: vals([1, 2, 3]).expand(2, 3)),
    ("big_transposed", lambda: ar(2400, torch.int64).reshape(40, 60).t()),
    ("huge_expanded", lambda: vals([1.5, -2]).expand(100000, 100000, 2)),
]


def main():
    for name, make in CASES:
        print(f"=== {name}")
        print(repr(make()))
    print("=== meta")
    print(repr(torch.empty(2, 3, device="meta")))
    print("=== meta_half")
    print(repr(torch.empty(5, dtype=f16, device="meta")))


if __name__ == "__main__":
    main()
