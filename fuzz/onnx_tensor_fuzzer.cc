// Fuzzes the TensorProto reader (.pb files, as the ONNX backend tests store
// inputs and outputs).
#include <cstdint>

#include "fuzz_util.h"
#include "onnx/onnx_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto t = kiln::onnx_parse_tensor_bytes(data, size, "fuzz.pb");
  kiln::fuzz::check_status(t.status());
  if (t.ok()) kiln::fuzz::touch(*t);
  return 0;
}
