// A generated video written out as its frames arrive (pipeline/video_decoder.h
// streams them): an MP4, or a folder of PNGs.
//
//   KILN_ASSIGN_OR_RETURN(auto out, open_mp4_writer("cat.mp4", 832, 480, 24, {{"prompt", "a cat"}}));
//   KILN_RETURN_IF_ERROR(out->add(frames));   // [1, 3, T, 480, 832] in [-1, 1], as often as frames come
//   KILN_RETURN_IF_ERROR(out->finish());
//
// MP4: H.264 (libx264, CRF 18) in yuv420p, BT.709, through Debian's
// libavformat and libavcodec, the moov atom in front (+faststart) so
// browsers play it at once. Its metadata (the MP4 "udta" keys title,
// comment, ...) holds what made it. Written to PATH.<pid>.tmp and renamed
// over PATH by finish(), so a failed run leaves no half file.
// PNG frames: DIR/frame_0001.png ..., each with the text chunks given.
// Values map to bytes as image_to_pixels does (pipeline/latent_codec.h).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace kiln {

class VideoWriter {
 public:
  virtual ~VideoWriter() = default;
  // frames [1, 3, T, height, width] in [-1, 1].
  virtual Status add(const TensorView& frames) = 0;
  // Closes the file(s); nothing is written after.
  virtual Status finish() = 0;
  virtual int64_t frames_written() const = 0;
};

using VideoMetadata = std::vector<std::pair<std::string, std::string>>;

Result<std::unique_ptr<VideoWriter>> open_mp4_writer(const std::string& path, int64_t width, int64_t height, int fps,
                                                     const VideoMetadata& metadata);
// The folder must exist.
Result<std::unique_ptr<VideoWriter>> open_png_frames_writer(const std::string& dir, int64_t width, int64_t height,
                                                            const VideoMetadata& text);

}  // namespace kiln
