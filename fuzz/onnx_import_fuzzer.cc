// Fuzzes the ONNX model loader: protobuf parse, opsets, initializers,
// external-data checks, graph building, topological sort, verifier and shape
// inference of every op.
//
// External data resolves against a fresh temporary folder holding one 64-byte
// file, ext_data.bin (the name the bad-input seeds use), so offsets and
// lengths are checked against a real mapping; any other location fails to
// open, and nothing outside the folder may be reached.
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz_util.h"
#include "onnx/onnx_import.h"

namespace {

std::string g_base_dir;

void remove_base_dir() { std::filesystem::remove_all(g_base_dir); }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  char dir[] = "/tmp/kiln-fuzz-XXXXXX";
  if (!mkdtemp(dir)) abort();
  g_base_dir = dir;
  std::ofstream(g_base_dir + "/ext_data.bin", std::ios::binary) << std::string(64, '\x01');
  atexit(remove_base_dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto g = kiln::onnx_import_bytes(data, size, "fuzz.onnx", g_base_dir);
  kiln::fuzz::check_status(g.status());
  if (!g.ok()) return 0;
  for (const auto& v : g->values())
    if (v->constant) kiln::fuzz::touch(*v->constant);
  // The printer walks every node, value and shape the importer accepted.
  (void)kiln::graph_to_string(*g);
  return 0;
}
