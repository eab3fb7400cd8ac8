#include "pipeline/video_writer.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libavutil/imgutils.h>
#include <libavutil/log.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
}

#include <fmt/format.h>
#include <malloc.h>
#include <unistd.h>

#include <cstdlib>

#include <filesystem>

#include "pipeline/latent_codec.h"
#include "pipeline/png.h"

namespace kiln {

namespace {

std::string av_message(int code) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, text, sizeof(text));
  return text;
}

Status check_frames(const TensorView& frames, int64_t width, int64_t height) {
  if (frames.dtype != DType::kF32 || frames.shape.size() != 5 || frames.shape[0] != 1 || frames.shape[1] != 3 ||
      frames.shape[3] != height || frames.shape[4] != width)
    return invalid_argument("video frames must be [1, 3, T, {}, {}], got {}", height, width,
                            shape_to_string(frames.shape));
  return ok_status();
}

// Frame t of [1, 3, T, H, W] as H x W x RGB bytes.
void frame_rgb(const TensorView& frames, int64_t t, std::vector<uint8_t>& rgb) {
  const int64_t plane = frames.shape[3] * frames.shape[4];
  rgb.resize(size_t(plane) * 3);
  planes_to_rgb(frames.as<float>() + t * plane, plane, frames.shape[2] * plane, rgb.data());
}

class Mp4Writer final : public VideoWriter {
 public:
  ~Mp4Writer() override {
    close();
    if (!finished_) std::filesystem::remove(temp_);
  }

  Status open(const std::string& path, int64_t width, int64_t height, int fps, const VideoMetadata& metadata) {
    path_ = path, width_ = width, height_ = height;
    // Debian's libx264 reads heap memory it never wrote (its output follows
    // MALLOC_PERTURB_ even in the ffmpeg command), so in a process whose heap
    // kiln has used, the same frames gave different files from run to run.
    // While the encoder lives, glibc fills what malloc hands out with one
    // byte (M_PERTURB, as MALLOC_PERTURB_ does), which makes those bytes the
    // same each run; close() puts the setting back.
    mallopt(M_PERTURB, kPerturbByte);
    perturbing_ = true;
    temp_ = fmt::format("{}.{}.tmp", path, getpid());
    av_log_set_level(AV_LOG_ERROR);
    if (int e = avformat_alloc_output_context2(&format_, nullptr, "mp4", temp_.c_str()); e < 0 || !format_)
      return internal_error("{}: libavformat has no MP4 muxer ({})", path, av_message(e));
    const AVCodec* codec = avcodec_find_encoder_by_name("libx264");
    if (!codec) codec = avcodec_find_encoder(AV_CODEC_ID_H264);
    if (!codec) return unsupported("{}: this libavcodec has no H.264 encoder", path);
    stream_ = avformat_new_stream(format_, nullptr);
    codec_ = avcodec_alloc_context3(codec);
    if (!stream_ || !codec_) return resource_exhausted("{}: out of memory opening the encoder", path);
    codec_->width = int(width), codec_->height = int(height);
    codec_->time_base = {1, fps};
    codec_->framerate = {fps, 1};
    codec_->pix_fmt = AV_PIX_FMT_YUV420P;
    codec_->color_range = AVCOL_RANGE_MPEG;
    codec_->colorspace = AVCOL_SPC_BT709;
    codec_->color_primaries = AVCOL_PRI_BT709;
    codec_->color_trc = AVCOL_TRC_BT709;
    if (format_->oformat->flags & AVFMT_GLOBALHEADER) codec_->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    // One encoder thread: x264's choices depend on its thread count, which it
    // would take from the core count, and the same seed should give the same
    // file on any machine. Encoding is a small part of a generation's time.
    codec_->thread_count = 1;
    av_opt_set(codec_->priv_data, "crf", "18", 0);
    av_opt_set(codec_->priv_data, "preset", "medium", 0);
    if (int e = avcodec_open2(codec_, codec, nullptr); e < 0)
      return internal_error("{}: cannot open the H.264 encoder for {}x{} at {} fps ({})", path, width, height, fps,
                            av_message(e));
    if (int e = avcodec_parameters_from_context(stream_->codecpar, codec_); e < 0)
      return internal_error("{}: {}", path, av_message(e));
    stream_->time_base = codec_->time_base;
    for (const auto& [key, value] : metadata) av_dict_set(&format_->metadata, key.c_str(), value.c_str(), 0);
    if (int e = avio_open(&format_->pb, temp_.c_str(), AVIO_FLAG_WRITE); e < 0)
      return invalid_argument("{}: cannot write it ({})", path, av_message(e));
    AVDictionary* options = nullptr;
    // faststart: the index in front, for players that stream; use_metadata_tags: every key kept.
    av_dict_set(&options, "movflags", "+faststart+use_metadata_tags", 0);
    const int e = avformat_write_header(format_, &options);
    av_dict_free(&options);
    if (e < 0) return internal_error("{}: {}", path, av_message(e));
    scale_ = sws_getContext(int(width), int(height), AV_PIX_FMT_RGB24, int(width), int(height), AV_PIX_FMT_YUV420P,
                            SWS_BICUBIC | SWS_ACCURATE_RND, nullptr, nullptr, nullptr);
    frame_ = av_frame_alloc();
    packet_ = av_packet_alloc();
    if (!scale_ || !frame_ || !packet_) return resource_exhausted("{}: out of memory opening the encoder", path);
    // Full-range RGB in, BT.709 limited-range YUV out, as tagged above.
    sws_setColorspaceDetails(scale_, sws_getCoefficients(SWS_CS_DEFAULT), 1, sws_getCoefficients(SWS_CS_ITU709), 0, 0,
                             1 << 16, 1 << 16);
    frame_->format = AV_PIX_FMT_YUV420P, frame_->width = int(width), frame_->height = int(height);
    if (int e2 = av_frame_get_buffer(frame_, 0); e2 < 0) return internal_error("{}: {}", path, av_message(e2));
    return ok_status();
  }

  Status add(const TensorView& frames) override {
    KILN_RETURN_IF_ERROR(check_frames(frames, width_, height_));
    std::vector<uint8_t> rgb;
    for (int64_t t = 0; t < frames.shape[2]; ++t) {
      frame_rgb(frames, t, rgb);
      if (int e = av_frame_make_writable(frame_); e < 0) return internal_error("{}: {}", path_, av_message(e));
      const uint8_t* src[1] = {rgb.data()};
      const int stride[1] = {int(width_) * 3};
      sws_scale(scale_, src, stride, 0, int(height_), frame_->data, frame_->linesize);
      frame_->pts = written_++;
      KILN_RETURN_IF_ERROR(encode(frame_));
    }
    return ok_status();
  }

  Status finish() override {
    KILN_RETURN_IF_ERROR(encode(nullptr));  // drains the encoder
    if (int e = av_write_trailer(format_); e < 0) return internal_error("{}: {}", path_, av_message(e));
    close();
    std::error_code ec;
    std::filesystem::rename(temp_, path_, ec);
    if (ec) return invalid_argument("{}: cannot move the finished video there ({})", path_, ec.message());
    finished_ = true;
    return ok_status();
  }

  int64_t frames_written() const override { return written_; }

 private:
  Status encode(const AVFrame* frame) {
    if (int e = avcodec_send_frame(codec_, frame); e < 0)
      return internal_error("{}: encoding: {}", path_, av_message(e));
    for (;;) {
      const int e = avcodec_receive_packet(codec_, packet_);
      if (e == AVERROR(EAGAIN) || e == AVERROR_EOF) return ok_status();
      if (e < 0) return internal_error("{}: encoding: {}", path_, av_message(e));
      av_packet_rescale_ts(packet_, codec_->time_base, stream_->time_base);
      packet_->stream_index = stream_->index;
      const int w = av_interleaved_write_frame(format_, packet_);
      if (w < 0) return invalid_argument("{}: writing: {}", path_, av_message(w));
    }
  }

  void close() {
    if (perturbing_) mallopt(M_PERTURB, perturb_setting());
    perturbing_ = false;
    if (format_ && format_->pb) avio_closep(&format_->pb);
    avformat_free_context(format_), format_ = nullptr;
    avcodec_free_context(&codec_);
    av_frame_free(&frame_);
    av_packet_free(&packet_);
    sws_freeContext(scale_), scale_ = nullptr;
  }

  // MALLOC_PERTURB_'s value where the user set one, else 0 (off).
  static int perturb_setting() {
    const char* env = std::getenv("MALLOC_PERTURB_");
    return env ? std::atoi(env) : 0;
  }
  static constexpr int kPerturbByte = 0x5a;

  std::string path_, temp_;
  int64_t width_ = 0, height_ = 0, written_ = 0;
  bool finished_ = false, perturbing_ = false;
  AVFormatContext* format_ = nullptr;
  AVStream* stream_ = nullptr;
  AVCodecContext* codec_ = nullptr;
  AVFrame* frame_ = nullptr;
  AVPacket* packet_ = nullptr;
  SwsContext* scale_ = nullptr;
};

class PngFramesWriter final : public VideoWriter {
 public:
  PngFramesWriter(std::string dir, int64_t width, int64_t height, VideoMetadata text)
      : dir_(std::move(dir)), width_(width), height_(height), text_(std::move(text)) {}

  Status add(const TensorView& frames) override {
    KILN_RETURN_IF_ERROR(check_frames(frames, width_, height_));
    std::vector<uint8_t> rgb;
    for (int64_t t = 0; t < frames.shape[2]; ++t) {
      frame_rgb(frames, t, rgb);
      PngText text = text_;
      text.emplace_back("frame", std::to_string(written_ + 1));
      const std::string path = (std::filesystem::path(dir_) / fmt::format("frame_{:04}.png", written_ + 1)).string();
      KILN_RETURN_IF_ERROR(write_png(path, rgb.data(), int(width_), int(height_), text));
      ++written_;
    }
    return ok_status();
  }
  Status finish() override { return ok_status(); }
  int64_t frames_written() const override { return written_; }

 private:
  std::string dir_;
  int64_t width_, height_, written_ = 0;
  VideoMetadata text_;
};

}  // namespace

Result<std::unique_ptr<VideoWriter>> open_mp4_writer(const std::string& path, int64_t width, int64_t height, int fps,
                                                     const VideoMetadata& metadata) {
  if (width < 2 || height < 2 || width % 2 || height % 2)
    return invalid_argument("{}: an H.264 video needs an even width and height, got {}x{}", path, width, height);
  if (fps < 1 || fps > 240) return invalid_argument("--fps must be 1 to 240, got {}", fps);
  auto writer = std::make_unique<Mp4Writer>();
  KILN_RETURN_IF_ERROR(writer->open(path, width, height, fps, metadata));
  return std::unique_ptr<VideoWriter>(std::move(writer));
}

Result<std::unique_ptr<VideoWriter>> open_png_frames_writer(const std::string& dir, int64_t width, int64_t height,
                                                            const VideoMetadata& text) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return not_found("--frames-dir {}: no such folder", dir);
  return std::unique_ptr<VideoWriter>(std::make_unique<PngFramesWriter>(dir, width, height, text));
}

}  // namespace kiln
