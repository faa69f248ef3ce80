// The CPU code-generation layer: ISA selection, register pools, the frame,
// f16/bf16 conversions (bit-exact against kiln's Half and BFloat16), masked
// tails, listings and compile time.

#include "jit/codegen_cpu/emitter.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "jit/codegen_cpu/elementwise_jit.h"
#include "jit/codegen_cpu/jit_runtime.h"
#include "jit/codegen_cpu/vecmath.h"
#include "kiln/half.h"
#include "kiln/logging.h"
#include "tests/support/testing.h"

namespace kiln::jit::cpu {
namespace {

namespace x86 = asmjit::x86;

std::vector<Isa> isas() {
  std::vector<Isa> v;
  for (Isa i : {Isa::kAvx2, Isa::kAvx512}) {
    if (isa_supported(i)) v.push_back(i);
  }
  return v;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(CpuCodegen, HostIsa) {
  if (!isa_supported(Isa::kAvx2)) {
    EXPECT_KILN_ERROR(host_isa(), "AVX2");
    return;
  }
  const char* user = std::getenv("KILN_CPU_ISA");
  std::string saved = user != nullptr ? user : "";
  unsetenv("KILN_CPU_ISA");
  Isa isa = host_isa();
  EXPECT_TRUE(isa_supported(isa));
  EXPECT_EQ(isa, isa_supported(Isa::kAvx512) ? Isa::kAvx512 : Isa::kAvx2);
  setenv("KILN_CPU_ISA", "avx2", 1);
  EXPECT_EQ(host_isa(), Isa::kAvx2);
  setenv("KILN_CPU_ISA", "sse2", 1);  // not a value it takes: the default (and a warning)
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(host_isa(), isa_supported(Isa::kAvx512) ? Isa::kAvx512 : Isa::kAvx2);
  (void)::testing::internal::GetCapturedStderr();
  if (!isa_supported(Isa::kAvx512)) {
    setenv("KILN_CPU_ISA", "avx512", 1);
    EXPECT_KILN_ERROR(host_isa(), "this CPU lacks it");
  }
  if (user != nullptr) {
    setenv("KILN_CPU_ISA", saved.c_str(), 1);
  } else {
    unsetenv("KILN_CPU_ISA");
  }
}

// f16 -> f32 over all 65536 patterns, and f32 -> f16 back from each value, its
// neighbours and the midpoints between halves (ties), all bit-exact.
TEST(CpuCodegen, Float16ConversionsBitExact) {
  JitRuntime rt;
  for (Isa isa : isas()) {
    ElementwiseKernel load(rt, isa, {.in = kFloat16, .out = kFloat32});
    ElementwiseKernel store(rt, isa, {.in = kFloat32, .out = kFloat16});
    std::vector<uint16_t> h(65536);
    for (int i = 0; i < 65536; ++i) h[i] = static_cast<uint16_t>(i);
    std::vector<float> f(65536);
    load(h.data(), f.data(), 65536);
    for (int i = 0; i < 65536; ++i) {
      float want = Half::from_bits(h[i]);
      ASSERT_EQ(bits(f[i]), bits(want)) << isa_name(isa) << " f16 0x" << std::hex << i;
    }
    // Every half's value, plus values around every rounding boundary.
    std::vector<float> in;
    for (int i = 0; i < 65536; ++i) {
      float v = Half::from_bits(static_cast<uint16_t>(i));
      uint32_t b = bits(v);
      in.push_back(v);
      if (!std::isnan(v)) {
        in.push_back(from_bits(b + 1));
        in.push_back(from_bits(b - 1));
        float next = Half::from_bits(static_cast<uint16_t>(i + 1));
        if (std::isfinite(next) && std::isfinite(v) && (i & 0x7fff) != 0x7bff) {
          float mid = static_cast<float>((static_cast<double>(v) + next) / 2);
          in.push_back(mid);
          in.push_back(from_bits(bits(mid) + 1));
          in.push_back(from_bits(bits(mid) - 1));
        }
      }
    }
    // NaN payloads and a strided sweep of all float32 patterns.
    for (uint32_t p : {0x7f800001u, 0x7fc00001u, 0xffbfffffu, 0x7fffffffu, 0xff801234u}) {
      in.push_back(from_bits(p));
    }
    for (uint64_t u = 0; u < (1ull << 32); u += 4093)
      in.push_back(from_bits(static_cast<uint32_t>(u)));
    std::vector<uint16_t> out(in.size());
    store(in.data(), out.data(), static_cast<int64_t>(in.size()));
    for (size_t i = 0; i < in.size(); ++i) {
      ASSERT_EQ(out[i], Half(in[i]).bits)
          << isa_name(isa) << " f32 0x" << std::hex << bits(in[i]) << " (" << in[i] << ")";
    }
  }
}

TEST(CpuCodegen, BFloat16ConversionsBitExact) {
  JitRuntime rt;
  for (Isa isa : isas()) {
    ElementwiseKernel load(rt, isa, {.in = kBFloat16, .out = kFloat32});
    ElementwiseKernel store(rt, isa, {.in = kFloat32, .out = kBFloat16});
    std::vector<uint16_t> h(65536);
    for (int i = 0; i < 65536; ++i) h[i] = static_cast<uint16_t>(i);
    std::vector<float> f(65536);
    load(h.data(), f.data(), 65536);
    for (int i = 0; i < 65536; ++i) {
      ASSERT_EQ(bits(f[i]), bits(BFloat16::from_bits(h[i]))) << isa_name(isa) << " bf16 " << i;
    }
    // Each bf16 pattern shifted up, with every low half that matters for
    // rounding: 0, 1, ties (0x8000) and their neighbours, 0xffff.
    std::vector<float> in;
    for (uint32_t hi = 0; hi < 65536; ++hi) {
      for (uint32_t lo : {0x0u, 0x1u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
        in.push_back(from_bits(hi << 16 | lo));
      }
    }
    std::vector<uint16_t> out(in.size());
    store(in.data(), out.data(), static_cast<int64_t>(in.size()));
    for (size_t i = 0; i < in.size(); ++i) {
      ASSERT_EQ(out[i], BFloat16(in[i]).bits)
          << isa_name(isa) << " f32 0x" << std::hex << bits(in[i]);
    }
  }
}

// n = 0..40 for every dtype pair: the tail writes exactly n elements, reads
// none past n (guard values around the buffers stay put), and the result of a
// math op matches the full-vector path.
TEST(CpuCodegen, MaskedTails) {
  JitRuntime rt;
  const DType types[] = {kFloat32, kFloat16, kBFloat16};
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<float> src(64);
  for (float& v : src) v = dist(gen);
  for (Isa isa : isas()) {
    for (DType in_t : types) {
      for (DType out_t : types) {
        for (int unroll : {1, 3}) {
          ElementwiseKernel k(rt, isa,
                              {.op = MathOp::kTanh, .in = in_t, .out = out_t, .unroll = unroll});
          // Reference: the same kernel over a long buffer (full vectors only).
          std::vector<uint8_t> in_buf(64 * 4), full(64 * 4);
          for (int i = 0; i < 64; ++i) {
            if (in_t == kFloat32) std::memcpy(&in_buf[i * 4], &src[i], 4);
            if (in_t == kFloat16) reinterpret_cast<uint16_t*>(in_buf.data())[i] = Half(src[i]).bits;
            if (in_t == kBFloat16)
              reinterpret_cast<uint16_t*>(in_buf.data())[i] = BFloat16(src[i]).bits;
          }
          k(in_buf.data(), full.data(), 64);
          size_t osz = itemsize(out_t);
          for (int n = 0; n <= 40; ++n) {
            std::vector<uint8_t> out(64 * 4 + 128, 0xab);
            uint8_t* o = out.data() + 64;
            k(in_buf.data(), o, n);
            for (size_t b = 0; b < 64; ++b) ASSERT_EQ(out[b], 0xab) << "wrote before the buffer";
            for (size_t b = n * osz; b < 64 * 4 + 64; ++b) {
              ASSERT_EQ(o[b], 0xab) << isa_name(isa) << " n=" << n << " wrote byte " << b;
            }
            ASSERT_EQ(std::memcmp(o, full.data(), n * osz), 0)
                << isa_name(isa) << " " << in_t << "->" << out_t << " n=" << n;
          }
        }
      }
    }
  }
}

// A tail read must not touch memory past n: put the input at the very end of
// a readable page followed by an inaccessible one.
TEST(CpuCodegen, TailDoesNotReadPastEnd) {
  JitRuntime rt;
  const size_t page = 4096;
  void* mem = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* base = static_cast<uint8_t*>(mem);
  ASSERT_EQ(mprotect(base + page, page, PROT_NONE), 0);
  for (Isa isa : isas()) {
    for (DType t : {kFloat32, kFloat16, kBFloat16}) {
      ElementwiseKernel k(rt, isa, {.op = MathOp::kExp, .in = t, .out = kFloat32, .unroll = 1});
      for (int n = 1; n < 16; ++n) {
        uint8_t* in = base + page - n * itemsize(t);
        std::memset(in, 0, n * itemsize(t));
        std::vector<float> out(n);
        k(in, out.data(), n);
        for (float v : out) ASSERT_EQ(v, 1.0f);
      }
    }
  }
  munmap(mem, 2 * page);
}

TEST(CpuCodegen, BroadcastLoadsAndStackSlots) {
  JitRuntime rt;
  for (Isa isa : isas()) {
    for (DType t : {kFloat32, kFloat16, kBFloat16}) {
      // f(const T* scalar, float* out): out[0..lanes) = scalar, via a stack slot.
      Emitter e(isa, "broadcast", 2, {.validate = true});
      Vec v = e.acquire_vec();
      e.load_broadcast(v, x86::ptr(e.arg(0)), t);
      e.stack_slot(4, 4);  // offsets the next slot
      Mem slot = e.stack_slot(e.vec_bytes(), 64);
      e.as().vmovaps(slot, v);  // faults unless the frame aligned the slot
      e.zero(v);
      e.as().vmovaps(v, slot);
      e.store(x86::ptr(e.arg(1)), v, kFloat32);
      e.release(v);
      JitCode code(rt, e);
      uint16_t h16 = t == kFloat16 ? Half(-2.75f).bits : BFloat16(-2.75f).bits;
      float f32 = -2.75f;
      const void* src = t == kFloat32 ? static_cast<const void*>(&f32) : &h16;
      std::vector<float> out(16, 0.0f);
      code.as<void (*)(const void*, float*)>()(src, out.data());
      for (int i = 0; i < e.lanes(); ++i) EXPECT_EQ(out[i], -2.75f) << isa_name(isa) << " " << t;
    }
  }
}

// AVX-512 conversions and tails with every register from zmm16-31 and the
// upper k registers: instructions there need EVEX forms.
TEST(CpuCodegen, HighRegistersConvert) {
  if (!isa_supported(Isa::kAvx512)) GTEST_SKIP() << "this CPU lacks AVX-512";
  JitRuntime rt;
  std::vector<uint16_t> h(64);
  for (int i = 0; i < 64; ++i) h[i] = static_cast<uint16_t>(i * 1021 + 7);  // NaNs included
  for (DType in_t : {kFloat16, kBFloat16}) {
    for (DType out_t : {kFloat16, kBFloat16, kFloat32}) {
      ElementwiseKernel ref(rt, Isa::kAvx512, {.in = in_t, .out = out_t, .unroll = 1});
      Emitter e(Isa::kAvx512, "high", 3, {.validate = true});
      std::vector<Vec> low;
      for (int i = 0; i < 16; ++i) low.push_back(e.acquire_vec());
      std::vector<Mask> ks;
      for (int i = 0; i < 3; ++i) ks.push_back(e.acquire_mask());
      Vec v = e.acquire_vec();
      e.load(v, x86::ptr(e.arg(0)), in_t);
      e.store(x86::ptr(e.arg(1)), v, out_t);
      TailMask t = e.make_tail_mask(e.arg(2));
      e.load(v, x86::ptr(e.arg(0), 32), in_t, &t);
      e.store(x86::ptr(e.arg(1), 16 * static_cast<int>(itemsize(out_t))), v, out_t, &t);
      JitCode code(rt, e);
      for (int n = 1; n < 16; ++n) {
        std::vector<uint8_t> got(32 * 4, 0), want(32 * 4, 0);
        code.as<void (*)(const void*, void*, int64_t)>()(h.data(), got.data(), n);
        ref(h.data(), want.data(), 16 + n);
        ASSERT_EQ(std::memcmp(got.data(), want.data(), (16 + n) * itemsize(out_t)), 0)
            << in_t << " -> " << out_t << " n=" << n;
      }
    }
  }
}

TEST(CpuCodegen, RegisterPools) {
  for (Isa isa : isas()) {
    Emitter e(isa, "pools", 1);
    const int total = isa == Isa::kAvx512 ? 32 : 16;
    EXPECT_EQ(e.free_vecs(), total);
    std::vector<Vec> held;
    for (int i = 0; i < total; ++i) held.push_back(e.acquire_vec());
    EXPECT_EQ(e.free_vecs(), 0);
    EXPECT_KILN_ERROR(e.acquire_vec(), "ran out of vector registers");
    e.release(held.back());
    EXPECT_KILN_ERROR(e.release(held.back()), "released twice");
    EXPECT_EQ(e.peak_vecs(), total);
    // 14 allocatable GP registers minus the argument.
    std::vector<Gp> gps;
    while (e.free_gps() > 0) gps.push_back(e.acquire_gp());
    EXPECT_EQ(gps.size(), 13u);
    EXPECT_KILN_ERROR(e.acquire_gp(), "ran out of general-purpose registers");
  }
}

// Callee-saved registers used by the body are saved and restored by the
// deferred prolog/epilog (Note [Deferred frame]). A generated caller puts
// known values in every GP register, calls a body that clobbers all it can
// acquire, and writes the registers out afterwards.
TEST(CpuCodegen, CalleeSavedRegistersPreserved) {
  JitRuntime rt;
  for (Isa isa : isas()) {
    Emitter callee(isa, "clobber", 1);
    std::vector<Gp> gps;
    while (callee.free_gps() > 0) gps.push_back(callee.acquire_gp());
    for (const Gp& g : gps) callee.as().mov(g, 0x1234);
    callee.as().mov(x86::qword_ptr(callee.arg(0)), gps.back());
    JitCode clobber(rt, callee);

    // caller(void* fn, int64_t* regs): regs[0] receives the callee's output.
    Emitter caller(isa, "caller", 2);
    Gp fn = caller.arg(0), out = caller.arg(1);
    const Gp saved[] = {x86::rbx, x86::r12, x86::r13, x86::r14, x86::r15};
    std::vector<Gp> all;
    while (caller.free_gps() > 0) all.push_back(caller.acquire_gp());  // marks them dirty
    auto& a = caller.as();
    a.push(out);
    a.push(out);  // keeps the stack 16-byte aligned at the call
    for (int i = 0; i < 5; ++i) a.mov(saved[i], 1000 + i);
    a.mov(x86::rax, fn);
    a.mov(x86::rdi, out);
    a.call(x86::rax);
    a.pop(out);
    a.pop(out);
    for (int i = 0; i < 5; ++i) a.mov(x86::qword_ptr(out, 8 * (i + 1)), saved[i]);
    JitCode run(rt, caller);
    int64_t regs[6] = {};
    run.as<void (*)(void*, int64_t*)>()(clobber.entry(), regs);
    EXPECT_EQ(regs[0], 0x1234);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(regs[i + 1], 1000 + i) << isa_name(isa) << " reg " << i;
  }
}

TEST(CpuCodegen, ListingAndLogging) {
  if (!isa_supported(Isa::kAvx2)) GTEST_SKIP() << "this CPU lacks AVX2";
  JitRuntime rt;
  for (Isa isa : isas()) {
    ElementwiseKernel k(rt, isa, {.op = MathOp::kExp}, {.keep_listing = true});
    const std::string& l = k.listing();
    EXPECT_NE(l.find(isa == Isa::kAvx512 ? "zmm" : "ymm"), std::string::npos) << l;
    EXPECT_NE(l.find("vfmadd"), std::string::npos);
    EXPECT_NE(l.find("vzeroupper"), std::string::npos);
    EXPECT_EQ(l.find(isa == Isa::kAvx512 ? "ymm0," : "zmm"), std::string::npos);
  }
  ElementwiseKernel quiet(rt, Isa::kAvx2, {.op = MathOp::kExp});
  EXPECT_TRUE(quiet.listing().empty());
  set_logs("output_code");
  ::testing::internal::CaptureStderr();
  ElementwiseKernel logged(rt, Isa::kAvx2, {.op = MathOp::kSigmoid});
  std::string err = ::testing::internal::GetCapturedStderr();
  set_logs("");
  EXPECT_NE(err.find("[kiln output_code] cpu kernel 'elementwise_sigmoid_float32_float32' (avx2"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("vdivps"), std::string::npos);
}

// The listing of one canonical kernel per ISA is pinned: a change to the code
// generator shows up as a diff here. KILN_UPDATE_GOLDEN=1 rewrites the files.
TEST(CpuCodegen, GoldenListings) {
  JitRuntime rt;
  std::string dir = std::string(KILN_TEST_SOURCE_DIR) + "/jit/codegen_cpu/golden/";
  for (Isa isa : isas()) {
    ElementwiseKernel k(rt, isa,
                        {.op = MathOp::kSigmoid, .in = kBFloat16, .out = kFloat16, .unroll = 1},
                        {.keep_listing = true});
    std::string path = dir + "sigmoid_bf16_f16_" + isa_name(isa) + ".s";
    if (std::getenv("KILN_UPDATE_GOLDEN") != nullptr) {
      std::ofstream(path) << k.listing();
      continue;
    }
    std::ifstream in(path);
    ASSERT_TRUE(in.good()) << "missing " << path << " (run with KILN_UPDATE_GOLDEN=1)";
    std::stringstream want;
    want << in.rdbuf();
    EXPECT_EQ(k.listing(), want.str()) << path;
  }
}

TEST(CpuCodegen, BadSpecs) {
  if (!isa_supported(Isa::kAvx2)) GTEST_SKIP() << "this CPU lacks AVX2";
  JitRuntime rt;
  Isa isa = Isa::kAvx2;
  EXPECT_KILN_ERROR(ElementwiseKernel(rt, isa, {.in = kInt32}),
                    "expected float32, float16 or bfloat16 operands, got int32");
  EXPECT_KILN_ERROR(ElementwiseKernel(rt, isa, {.unroll = 5}), "expected unroll in 1..4, got 5");
  ElementwiseKernel unary(rt, isa, {.op = MathOp::kExp});
  float x = 0, y = 0;
  EXPECT_KILN_ERROR(unary(&x, &x, &y, 1), "expected 1 input, got 2");
  ElementwiseKernel binary(rt, isa, {.op = MathOp::kPow});
  EXPECT_KILN_ERROR(binary(&x, &y, 1), "expected 2 inputs, got 1");
  Emitter e(isa, "bad_load", 1);
  Vec v = e.acquire_vec();
  EXPECT_KILN_ERROR(e.load(v, x86::ptr(e.arg(0)), kInt64),
                    "expected float32, float16 or bfloat16, got int64");
}

// Compile time of a typical fused body: 30 ops (arithmetic, exp, tanh,
// sigmoid) in an elementwise loop, the body emitted twice (vector loop and
// masked tail), and of a 300-op body to show the cost grows linearly.
// Printed, not asserted.
TEST(CpuCodegen, CompileTime) {
  JitRuntime rt;
  for (Isa isa : isas()) {
    auto build = [&](int groups, size_t* bytes, size_t* insts) {
      Emitter e(isa, "body", 3, {.keep_listing = insts != nullptr});
      Gp in = e.arg(0), out = e.arg(1), n = e.arg(2);
      auto body = [&](const TailMask* tail) {
        Scratch s(e);
        Vec x = s.vec(), y = s.vec(), z = s.vec();
        e.load(x, x86::ptr(in), kFloat32, tail);
        for (int i = 0; i < groups; ++i) {
          e.mul(y, x, e.f32c(1.5f + i));
          e.add(y, y, e.f32c(0.25f * i));
          e.fmadd(z, y, x, e.f32c(-0.5f));
          switch (i % 3) {
            case 0:
              emit_exp(e, z, z);
              break;
            case 1:
              emit_tanh(e, z, z);
              break;
            case 2:
              emit_sigmoid(e, z, z);
              break;
          }
          e.max(x, z, e.f32c(-1.0f));
        }
        e.store(x86::ptr(out), x, kFloat32, tail);
      };
      Label loop = e.new_label(), tail = e.new_label(), done = e.new_label();
      e.as().cmp(n, e.lanes());
      e.as().jl(tail);
      e.bind(loop);
      body(nullptr);
      e.as().add(in, e.vec_bytes());
      e.as().add(out, e.vec_bytes());
      e.as().sub(n, e.lanes());
      e.as().cmp(n, e.lanes());
      e.as().jge(loop);
      e.bind(tail);
      e.as().test(n, n);
      e.as().jle(done);
      TailMask t = e.make_tail_mask(n);
      body(&t);
      e.release_tail(t);
      e.bind(done);
      JitCode code(rt, e);
      if (bytes != nullptr) *bytes = e.code_size();
      if (insts != nullptr) {
        *insts = 0;
        for (const std::string& line : {e.listing()}) {
          size_t pos = 0;
          while ((pos = line.find('\n', pos)) != std::string::npos) ++pos, ++*insts;
        }
      }
      return code;
    };
    std::vector<double> us;
    // 5 ops per group: 6 groups = the 30-op body; 60 groups = 300 ops.
    for (int groups : {6, 60}) {
      us.clear();
      for (int rep = 0; rep < 25; ++rep) {
        auto t0 = std::chrono::steady_clock::now();
        JitCode c = build(groups, nullptr, nullptr);
        auto t1 = std::chrono::steady_clock::now();
        ASSERT_TRUE(c);
        us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
      std::sort(us.begin(), us.end());
      size_t bytes = 0, lines = 0;
      build(groups, &bytes, &lines);
      std::printf(
          "[codegen_cpu] %s: %d-op elementwise body (~%zu listing lines, %zu bytes) "
          "compiled in %.0f us (median of 25, min %.0f)\n",
          isa_name(isa), groups * 5, lines, bytes, us[us.size() / 2], us[0]);
    }
    // The exp kernel alone.
    us.clear();
    size_t size = 0;
    for (int rep = 0; rep < 25; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      ElementwiseKernel k(rt, isa, {.op = MathOp::kExp});
      auto t1 = std::chrono::steady_clock::now();
      size = k.code_size();
      us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    std::sort(us.begin(), us.end());
    std::printf("[codegen_cpu] %s: exp elementwise kernel (%zu bytes) compiled in %.0f us\n",
                isa_name(isa), size, us[us.size() / 2]);
  }
}

}  // namespace
}  // namespace kiln::jit::cpu
