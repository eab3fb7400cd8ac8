// Fuzzes the safetensors reader (header length, JSON header, dtypes, shapes,
// data_offsets and overlap checks) and, on what it accepts, the checkpoint
// loaders behind it: a single file's keys mapped to each network's names
// (models/ldm_names.h), the family and configuration read from the shapes
// (models/sd_model.h), and each network's graph built over them. Tensors
// view the input in place, so touching each one checks its range lies
// inside the input.
#include <cstdint>

#include "fuzz_util.h"
#include "models/sd_model.h"
#include "safetensors/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // No owner: the tensors die before the fuzzer frees `data`.
  auto tensors = kiln::safetensors_parse(data, size, nullptr, "fuzz.safetensors");
  kiln::fuzz::check_status(tensors.status());
  if (!tensors.ok()) return 0;
  for (const auto& [name, t] : *tensors) kiln::fuzz::touch(t);
  auto model = kiln::sd_model_from_tensors(std::move(*tensors), "fuzz.safetensors");
  kiln::fuzz::check_status(model.status());
  if (!model.ok()) return 0;
  const kiln::SdModel& m = **model;
  kiln::fuzz::check_status(kiln::sd_unet_graph(m.unet_config, m.unet).status());
  if (m.has_text_encoder) kiln::fuzz::check_status(kiln::clip_text_graph(m.text_config, m.text_encoder).status());
  if (m.has_text_encoder_2)  // SDXL's second, with its pooled output
    kiln::fuzz::check_status(kiln::clip_text_graph(m.text_config_2, m.text_encoder_2).status());
  if (m.has_vae) {
    kiln::fuzz::check_status(kiln::vae_decoder_graph(m.vae_config, m.vae).status());
    kiln::fuzz::check_status(kiln::vae_encoder_graph(m.vae_config, m.vae).status());
  }
  return 0;
}
