// Fuzzes the safetensors reader: header length, JSON header, dtypes, shapes,
// data_offsets and overlap checks. Tensors view the input in place, so
// touching each one checks its range lies inside the input.
#include <cstdint>

#include "fuzz_util.h"
#include "safetensors/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // No owner: the tensors die before the fuzzer frees `data`.
  auto tensors = kiln::safetensors_parse(data, size, nullptr, "fuzz.safetensors");
  kiln::fuzz::check_status(tensors.status());
  if (tensors.ok())
    for (const auto& [name, t] : *tensors) kiln::fuzz::touch(t);
  return 0;
}
