// kiln-info: what this build of kiln holds.
//   kiln-info --ops     one registered op schema per line
//   kiln-info --build   version, compiler, CPU ISA, CUDA availability

#include <cstdio>
#include <cstring>

#include "kiln/kiln.h"

namespace {

int print_ops() {
  for (const kiln::OpHandle& op : kiln::all_ops()) std::printf("%s\n", op.schema().str().c_str());
  return 0;
}

int print_build() {
  std::printf("%s\n", kiln::build_info().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 2 && std::strcmp(argv[1], "--ops") == 0) return print_ops();
    if (argc == 1 || (argc == 2 && std::strcmp(argv[1], "--build") == 0)) return print_build();
    std::fprintf(stderr, "usage: kiln-info [--ops | --build]\n");
    return 2;
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln-info: %s\n", e.what());
    return 1;
  }
}
