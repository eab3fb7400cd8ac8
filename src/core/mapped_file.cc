#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace kiln {

Result<int> open_regular_file(const std::string& path, size_t* size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return not_found("{}: no such file", path);
    return invalid_argument("{}: cannot open: {}", path, std::strerror(errno));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument("{}: not a regular file", path);
  }
  *size = size_t(st.st_size);
  return fd;
}

Result<std::shared_ptr<const MappedFile>> MappedFile::open(const std::string& path) {
  std::shared_ptr<MappedFile> file(new MappedFile());
  KILN_ASSIGN_OR_RETURN(const int fd, open_regular_file(path, &file->size_));
  file->path_ = path;
  if (file->size_ > 0) {
    void* p = mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      return invalid_argument("{}: cannot map: {}", path, std::strerror(errno));
    }
    file->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return std::shared_ptr<const MappedFile>(std::move(file));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) munmap(const_cast<uint8_t*>(data_), size_);
}

Result<std::string> read_file(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(auto file, MappedFile::open(path));
  return std::string(reinterpret_cast<const char*>(file->data()), file->size());
}

Status write_file(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return invalid_argument("{}: cannot open for writing", path);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out) return invalid_argument("{}: write failed", path);
  return ok_status();
}

}  // namespace kiln
