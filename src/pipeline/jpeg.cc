#include "pipeline/jpeg.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavutil/imgutils.h>
#include <libavutil/log.h>
#include <libswscale/swscale.h>
}

#include <algorithm>
#include <memory>
#include <vector>

namespace kiln {

namespace {

struct CodecFree {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
  void operator()(AVPacket* p) const { av_packet_free(&p); }
  void operator()(AVFrame* f) const { av_frame_free(&f); }
  void operator()(SwsContext* s) const { sws_freeContext(s); }
};

// The decoder's full-range ("J") formats as the plain ones, with the range said apart.
AVPixelFormat plain_format(int format, bool* full_range) {
  *full_range = true;
  switch (format) {
    case AV_PIX_FMT_YUVJ420P: return AV_PIX_FMT_YUV420P;
    case AV_PIX_FMT_YUVJ422P: return AV_PIX_FMT_YUV422P;
    case AV_PIX_FMT_YUVJ444P: return AV_PIX_FMT_YUV444P;
    case AV_PIX_FMT_YUVJ440P: return AV_PIX_FMT_YUV440P;
    default: *full_range = false; return AVPixelFormat(format);
  }
}

}  // namespace

bool is_jpeg(const uint8_t* data, size_t size) {
  return size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF;
}

Result<RgbImage> decode_jpeg(const uint8_t* data, size_t size, const std::string& name, int max_side) {
  if (!is_jpeg(data, size) || size > size_t(INT32_MAX) - AV_INPUT_BUFFER_PADDING_SIZE)
    return invalid_argument("{}: not a JPEG", name);
  // The decoder fills a cut-off image with grey rather than fail: a JPEG
  // must end in its end-of-image marker (FF D9), give or take trailing padding.
  const size_t tail = std::min<size_t>(size, 64);
  bool ends = false;
  for (size_t i = size - tail; i + 1 < size && !ends; ++i) ends = data[i] == 0xFF && data[i + 1] == 0xD9;
  if (!ends) return invalid_argument("{}: a truncated JPEG (no end-of-image marker)", name);
  av_log_set_level(AV_LOG_QUIET);  // a broken file is this function's error, not libav's log line
  const AVCodec* codec = avcodec_find_decoder(AV_CODEC_ID_MJPEG);
  if (!codec) return unsupported("{}: this libavcodec cannot decode JPEG", name);
  std::unique_ptr<AVCodecContext, CodecFree> context(avcodec_alloc_context3(codec));
  if (!context) return internal_error("libavcodec: cannot start a JPEG decoder");
  context->thread_count = 1;
  context->err_recognition = AV_EF_EXPLODE;            // stop at the first damaged segment
  context->max_pixels = int64_t(max_side) * max_side;  // refused before the pixels are allocated
  if (avcodec_open2(context.get(), codec, nullptr) < 0)
    return internal_error("libavcodec: cannot open the JPEG decoder");
  // libavcodec reads past a packet's end: the bytes go into a zero-padded copy.
  std::vector<uint8_t> padded(size + AV_INPUT_BUFFER_PADDING_SIZE, 0);
  std::copy_n(data, size, padded.begin());
  std::unique_ptr<AVPacket, CodecFree> packet(av_packet_alloc());
  std::unique_ptr<AVFrame, CodecFree> frame(av_frame_alloc());
  if (!packet || !frame) return internal_error("libavcodec: out of memory");
  packet->data = padded.data();
  packet->size = int(size);
  if (avcodec_send_packet(context.get(), packet.get()) < 0 || avcodec_send_packet(context.get(), nullptr) < 0 ||
      avcodec_receive_frame(context.get(), frame.get()) < 0)
    return invalid_argument("{}: a corrupt, truncated or unsupported JPEG (or over {} pixels a side)", name, max_side);
  const int width = frame->width, height = frame->height;
  if (width <= 0 || height <= 0 || width > max_side || height > max_side)
    return invalid_argument("{}: the image is {}x{}; kiln reads up to {} pixels a side", name, width, height, max_side);
  bool full_range = false;
  const AVPixelFormat format = plain_format(frame->format, &full_range);
  std::unique_ptr<SwsContext, CodecFree> sws(sws_getContext(width, height, format, width, height, AV_PIX_FMT_RGB24,
                                                            SWS_BICUBIC, nullptr, nullptr, nullptr));
  if (!sws) return unsupported("{}: JPEG pixel format {} cannot be turned into RGB", name, frame->format);
  const int* coefficients = sws_getCoefficients(SWS_CS_ITU601);  // JPEG's YCbCr is BT.601
  sws_setColorspaceDetails(sws.get(), coefficients, full_range ? 1 : 0, coefficients, 1, 0, 1 << 16, 1 << 16);
  RgbImage out{width, height, std::vector<uint8_t>(size_t(width) * size_t(height) * 3)};
  uint8_t* rows[1] = {out.rgb.data()};
  const int stride[1] = {width * 3};
  sws_scale(sws.get(), frame->data, frame->linesize, 0, height, rows, stride);
  return out;
}

}  // namespace kiln
