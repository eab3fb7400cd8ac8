// Shared by the libFuzzer targets: checks that what a loader returns is safe
// to use, and that a rejected input is rejected as bad input.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/tensor.h"

namespace kiln::fuzz {

// Reads every byte of the tensor, so a tensor that views bytes past the input
// is caught by ASan here rather than later in a kernel. The sum is kept so
// the loop is not removed.
inline void touch(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.raw());
  uint8_t sum = 0;
  for (size_t i = 0; i < t.nbytes(); ++i) sum ^= p[i];
  volatile uint8_t sink = sum;
  (void)sink;
}

// Bad input must come back as InvalidArgument, Unsupported, NotFound or
// ResourceExhausted (exit code 2 in the CLI); Internal means kiln tripped over
// its own invariants (exit code 1), which is a bug the fuzzer should report.
inline void check_status(const Status& s) {
  if (s.code() != StatusCode::kInternal) return;
  std::fprintf(stderr, "internal error on fuzz input: %s\n", s.message().c_str());
  std::abort();
}

}  // namespace kiln::fuzz
