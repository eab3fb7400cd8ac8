// Fuzzes the .npy reader: magic, version, the Python-dict header, sizes.
#include <cstdint>

#include "fuzz_util.h"
#include "npy/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto t = kiln::npy_parse(data, size, "fuzz.npy");
  kiln::fuzz::check_status(t.status());
  if (t.ok()) kiln::fuzz::touch(*t);
  return 0;
}
