// kiln serve's request parsers on arbitrary bodies: the first byte picks
// the endpoint (OpenAI images, A1111 txt2img or img2img, an image or video
// job, the model field) or base64 on raw bytes; the rest is the body. Every
// input must come back as a request within the limits or a RequestError
// naming a field, never a crash, a hang or a huge allocation.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "serve/api_request.h"
#include "serve/base64.h"

namespace {

using kiln::serve::JobRequest;
using kiln::serve::RequestError;

// What a parser accepted must be inside the limits the server relies on.
void check_accepted(const kiln::serve::Parsed<JobRequest>& parsed, const kiln::serve::ServeLimits& l) {
  const auto* j = std::get_if<JobRequest>(&parsed);
  if (!j) {
    if (std::get<RequestError>(parsed).message.empty()) std::abort();
    return;
  }
  const auto& r = j->image;
  const bool image_ok = r.steps >= 1 && r.steps <= l.max_steps && r.batch >= 1 && r.batch <= l.max_images &&
                        int64_t(r.width) * r.height <= l.max_pixels && r.width <= l.max_side && r.height <= l.max_side;
  const auto& v = j->video;
  const bool video_ok = j->kind == kiln::serve::JobKind::kImage ||
                        (v.frames >= 1 && v.frames <= l.max_frames && v.width * v.height <= l.max_pixels);
  if (!image_ok || !video_ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const kiln::serve::ServeLimits limits{.max_upload_bytes = 1 << 20};
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] % 7 == 6) {
    auto bytes = kiln::serve::base64_decode(body, 1 << 20);
    if (bytes.ok() && bytes->size() > body.size()) std::abort();
    return 0;
  }
  const nlohmann::json json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return 0;
  switch (data[0] % 7) {
    case 0: check_accepted(kiln::serve::parse_openai_images(json, limits), limits); break;
    case 1: check_accepted(kiln::serve::parse_a1111(json, false, limits), limits); break;
    case 2: check_accepted(kiln::serve::parse_a1111(json, true, limits), limits); break;
    case 3: check_accepted(kiln::serve::parse_job(json, kiln::serve::JobKind::kImage, limits), limits); break;
    case 4: check_accepted(kiln::serve::parse_job(json, kiln::serve::JobKind::kVideo, limits), limits); break;
    case 5: (void)kiln::serve::parse_model_field(json); break;
  }
  return 0;
}
