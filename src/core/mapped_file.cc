#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

namespace kiln {

namespace {

// The live mappings, begin -> end: drop_resident_pages acts on these only
// (MADV_DONTNEED on anonymous memory would zero it).
std::mutex mappings_mutex;
std::map<uintptr_t, uintptr_t> mappings;

}  // namespace

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
    std::lock_guard<std::mutex> lock(mappings_mutex);
    mappings[reinterpret_cast<uintptr_t>(p)] = reinterpret_cast<uintptr_t>(p) + file->size_;
  }
  ::close(fd);
  return std::shared_ptr<const MappedFile>(std::move(file));
}

MappedFile::~MappedFile() {
  if (data_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(mappings_mutex);
    mappings.erase(reinterpret_cast<uintptr_t>(data_));
  }
  munmap(const_cast<uint8_t*>(data_), size_);
}

void MappedFile::drop_resident_pages(const void* p, size_t bytes) {
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) / page * page;
  if (end <= begin) return;
  std::lock_guard<std::mutex> lock(mappings_mutex);
  auto it = mappings.upper_bound(begin);
  if (it == mappings.begin()) return;
  --it;
  if (begin >= it->first && end <= it->second)  // read-only private mapping: re-read on access
    madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
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
