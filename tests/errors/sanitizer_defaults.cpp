// ASan defaults for kiln_tests. The must-fail tests ask for tensors no machine
// can hold (2^40 floats and up): kiln must answer with kiln::Error, as it does
// when malloc returns null, but ASan by default aborts on such a request
// instead of returning null. ASAN_OPTIONS in the environment still wins.

#if defined(__SANITIZE_ADDRESS__)
extern "C" __attribute__((no_sanitize_address, used, visibility("default"))) const char*
__asan_default_options() {
  return "allocator_may_return_null=1";
}
#endif
