#!/usr/bin/python3
"""Writes the PyTorch oracle's golden files.

Run with Debian's python3 and python3-torch (CI's oracle):
    ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 /usr/bin/python3 generate.py --out DIR

Every module in cases/ has `def cases(g)`, yielding Case objects built with the
generator `g` (seeded tensors in contiguous, transposed, strided, offset,
expanded and 0-dim layouts). For each case this script calls the op through
torch.ops.aten (or the case's `ref`), and writes inputs, outputs, or the error
torch raised. The C++ runner (oracle_test.cpp) replays each case through kiln's
boxed call by the same schema name and compares.

Output: DIR/cases.json (descriptions) and DIR/data.bin (raw tensor bytes).
"""

import argparse
import importlib.util
import json
import math
import pathlib
import sys
import traceback

import torch

HERE = pathlib.Path(__file__).resolve().parent

DTYPES = {
    torch.bool: "bool", torch.uint8: "uint8", torch.int8: "int8", torch.int16: "int16",
    torch.int32: "int32", torch.int64: "int64", torch.float16: "float16",
    torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float64: "float64",
}
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]
ALL = FLOATS + INTS + [torch.bool]


class Case:
    """One call of one op.

    op: schema name, e.g. "add.Tensor".
    args, kwargs: Python values; tensors come from the generator.
    ref: optional callable(*args, **kwargs) used instead of torch.ops.aten.
    rtol, atol: tolerances for floating outputs (default per dtype).
    check_strides: also compare the output strides (views, layout rules).
    mutates: compare every tensor argument's storage after the call.
    name: a label for messages.
    """

    def __init__(self, op, args=(), kwargs=None, ref=None, rtol=None, atol=None,
                 check_strides=False, mutates=None, name=""):
        self.op = op
        self.args = list(args)
        self.kwargs = dict(kwargs or {})
        self.ref = ref
        self.rtol = rtol
        self.atol = atol
        self.check_strides = check_strides
        base = op.split(".")[0]
        self.mutates = mutates if mutates is not None else (
            base.endswith("_") or "out" in op.split(".", 1)[-1])
        self.name = name


class Gen:
    """Seeded tensors in the layouts kiln must handle."""

    LAYOUTS = ["contiguous", "transposed", "strided", "offset", "expanded"]

    def __init__(self, seed):
        self.rng = torch.Generator().manual_seed(seed)
        self._layout_i = 0

    def values(self, n, dtype, low, high):
        if dtype == torch.bool:
            return torch.rand(n, generator=self.rng) < 0.5
        if dtype.is_floating_point:
            v = torch.rand(n, generator=self.rng, dtype=torch.float64) * (high - low) + low
            return v.to(dtype)
        lo = max(int(low), 0) if dtype == torch.uint8 else int(low)
        hi = int(high)
        if hi <= lo:
            hi = lo + 1
        return torch.randint(lo, hi, (n,), generator=self.rng).to(dtype)

    def tensor(self, shape, dtype=torch.float32, layout=None, low=-3.0, high=3.0):
        """A tensor of `shape` whose storage and strides follow `layout`
        ("any" or None cycles through every layout)."""
        shape = list(shape)
        if layout in (None, "any"):
            layout = self.LAYOUTS[self._layout_i % len(self.LAYOUTS)]
            self._layout_i += 1
        nd = len(shape)
        if nd == 0 or layout == "contiguous":
            n = max(math.prod(shape), 1)
            base = self.values(n, dtype, low, high)
            return base.as_strided(shape, contiguous_strides(shape), 0)
        if layout == "transposed" and nd >= 2:
            perm = list(range(nd))[::-1]
            inner = [shape[p] for p in perm]
            n = max(math.prod(inner), 1)
            base = self.values(n, dtype, low, high)
            return base.as_strided(inner, contiguous_strides(inner), 0).permute(perm)
        if layout == "strided" or (layout == "transposed" and nd < 2):
            padded = shape[:-1] + [shape[-1] * 2]
            n = max(math.prod(padded), 1)
            base = self.values(n, dtype, low, high)
            st = contiguous_strides(padded)
            st[-1] *= 2
            return base.as_strided(shape, st, 0)
        if layout == "offset":
            padded = [s + 1 for s in shape]
            n = max(math.prod(padded), 1)
            base = self.values(n, dtype, low, high)
            st = contiguous_strides(padded)
            return base.as_strided(shape, st, sum(st))
        if layout == "expanded":
            # Broadcast the first dim of size > 1 from a stride-0 view.
            st_shape = list(shape)
            d = next((i for i, s in enumerate(shape) if s > 1), None)
            if d is None:
                return self.tensor(shape, dtype, "contiguous", low, high)
            st_shape[d] = 1
            n = max(math.prod(st_shape), 1)
            base = self.values(n, dtype, low, high)
            st = contiguous_strides(st_shape)
            st[d] = 0
            return base.as_strided(shape, st, 0)
        raise ValueError(f"unknown layout {layout}")

    def index(self, shape, high, dtype=torch.int64):
        return torch.randint(0, max(high, 1), list(shape), generator=self.rng).to(dtype)


def contiguous_strides(shape):
    st, s = [], 1
    for n in reversed(shape):
        st.append(s)
        s *= max(n, 1)
    return list(reversed(st))


class Writer:
    def __init__(self, out_dir):
        self.out_dir = pathlib.Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.blob = open(self.out_dir / "data.bin.tmp", "wb")
        self.offset = 0

    def put(self, raw: bytes):
        off = self.offset
        self.blob.write(raw)
        self.offset += len(raw)
        return off

    def storage_of(self, t):
        """(bytes of the whole storage, element count)"""
        st = t.storage()
        n = st.size()
        flat = torch.empty(0, dtype=t.dtype).set_(st, 0, (n,), (1,))
        return tensor_bytes(flat), n

    def tensor(self, t):
        raw, n = self.storage_of(t)
        return {"type": "tensor", "dtype": DTYPES[t.dtype], "sizes": list(t.shape),
                "strides": list(t.stride()), "offset": t.storage_offset(),
                "storage_numel": n, "data": self.put(raw)}

    def value(self, v):
        if isinstance(v, torch.Tensor):
            return self.tensor(v)
        if v is None:
            return {"type": "none"}
        if isinstance(v, bool):
            return {"type": "bool", "v": v}
        if isinstance(v, int):
            return {"type": "int", "v": v}
        if isinstance(v, float):
            return {"type": "float", "v": repr(v)}
        if isinstance(v, str):
            return {"type": "str", "v": v}
        if isinstance(v, torch.dtype):
            return {"type": "dtype", "v": DTYPES[v]}
        if isinstance(v, torch.device):
            return {"type": "device", "v": str(v)}
        if isinstance(v, (list, tuple)):
            if all(isinstance(x, torch.Tensor) for x in v) and len(v) > 0:
                return {"type": "tensors", "v": [self.tensor(x) for x in v]}
            if all(isinstance(x, bool) for x in v) and len(v) > 0:
                raise TypeError("bool lists are not a schema type")
            if all(isinstance(x, int) for x in v):
                return {"type": "ints", "v": list(v)}
            if all(isinstance(x, (int, float)) for x in v):
                return {"type": "floats", "v": [repr(float(x)) for x in v]}
        raise TypeError(f"cannot serialize {type(v)}")

    def close(self):
        self.blob.close()
        (self.out_dir / "data.bin.tmp").replace(self.out_dir / "data.bin")


def tensor_bytes(t):
    t = t.contiguous()
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    if t.dtype in (torch.float16, torch.bfloat16):
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def clone_args(v):
    """Deep copies of tensor arguments that keep their storage layout."""
    if isinstance(v, torch.Tensor):
        st = v.storage()
        fresh = torch.empty(0, dtype=v.dtype).set_(st.clone(), v.storage_offset(), v.shape,
                                                   v.stride())
        return fresh
    if isinstance(v, (list, tuple)):
        return type(v)(clone_args(x) for x in v)
    if isinstance(v, dict):
        return {k: clone_args(x) for k, x in v.items()}
    return v


def aten_op(name):
    base, _, overload = name.partition(".")
    packet = getattr(torch.ops.aten, base)
    return getattr(packet, overload or "default")


def tensors_in(v):
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, (list, tuple)):
        return [t for x in v for t in tensors_in(x)]
    if isinstance(v, dict):
        return [t for x in v.values() for t in tensors_in(x)]
    return []


def run_case(case, w):
    entry = {"op": case.op, "name": case.name,
             "args": [w.value(a) for a in case.args],
             "kwargs": {k: w.value(v) for k, v in case.kwargs.items()},
             "check_strides": case.check_strides, "mutates": case.mutates}
    if case.rtol is not None:
        entry["rtol"] = case.rtol
    if case.atol is not None:
        entry["atol"] = case.atol
    args = clone_args(case.args)
    kwargs = clone_args(case.kwargs)
    fn = case.ref if case.ref is not None else aten_op(case.op)
    try:
        with torch.no_grad():
            out = fn(*args, **kwargs)
    except Exception as e:  # torch refused: kiln must refuse too
        entry["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        return entry
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    entry["outputs"] = [w.tensor(o) if isinstance(o, torch.Tensor) else w.value(o) for o in outs]
    entry["output_is_list"] = isinstance(out, list)
    if case.mutates:
        entry["after"] = [w.tensor(t) for t in tensors_in([args, kwargs])]
    return entry


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="", help="comma-separated case modules")
    opts = ap.parse_args()
    torch.set_num_threads(1)
    w = Writer(opts.out)
    entries = []
    only = set(filter(None, opts.only.split(",")))
    modules = sorted((HERE / "cases").glob("*.py"))
    for path in modules:
        if only and path.stem not in only:
            continue
        spec = importlib.util.spec_from_file_location(f"cases_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        seed = sum(map(ord, path.stem)) * 7919
        count = 0
        for case in mod.cases(Gen(seed)):
            if not case.name:
                case.name = f"{path.stem}#{count}"
            try:
                entries.append(run_case(case, w))
            except Exception:
                print(f"generate.py: case {case.name} ({case.op}) failed to serialize",
                      file=sys.stderr)
                traceback.print_exc()
                sys.exit(1)
            count += 1
        print(f"{path.stem}: {count} cases")
    w.close()
    tmp = pathlib.Path(opts.out) / "cases.json.tmp"
    tmp.write_text(json.dumps({"torch": torch.__version__, "cases": entries}))
    tmp.replace(pathlib.Path(opts.out) / "cases.json")
    print(f"wrote {len(entries)} cases to {opts.out}")


if __name__ == "__main__":
    main()
