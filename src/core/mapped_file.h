// Read-only memory-mapped files. Weights (ONNX external data, safetensors)
// are viewed in place through these, never copied.
//
//   KILN_ASSIGN_OR_RETURN(auto file, MappedFile::open("unet/model.onnx_data"));
//   const uint8_t* bytes = file->data();
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace kiln {

class MappedFile {
 public:
  static Result<std::shared_ptr<const MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Drops the pages wholly inside [p, p + bytes) from this process's
  // resident memory when they belong to a mapped file (anything else is
  // left alone): they are read from the file again if touched. For weights
  // a plan has packed into its own copy.
  static void drop_resident_pages(const void* p, size_t bytes);

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// A regular file opened read-only (the caller closes the descriptor), and its
// size; errors name the path ("no such file", "not a regular file").
Result<int> open_regular_file(const std::string& path, size_t* size);

// Whole file into a string (small files: JSON, .npy headers in tests).
Result<std::string> read_file(const std::string& path);
Status write_file(const std::string& path, std::string_view bytes);

}  // namespace kiln
