#include "engine/datastore/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mnemo::datastore {

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path,
                                                             int64_t expected_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return absl::DataLossError(absl::StrCat("cannot stat ", path));
  }
  const int64_t size = st.st_size;
  if (expected_bytes >= 0 && size != expected_bytes) {
    ::close(fd);
    return absl::DataLossError(absl::StrCat(path, " has ", size, " bytes, the manifest says ",
                                            expected_bytes, " (truncated or corrupt)"));
  }
  void* data = nullptr;
  if (size > 0) {
    data = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_SHARED, fd, 0);
    if (data == MAP_FAILED) {
      ::close(fd);
      return absl::InternalError(absl::StrCat("mmap ", path, ": ", std::strerror(errno)));
    }
  }
  ::close(fd);  // the mapping keeps the file alive
  return std::unique_ptr<MappedFile>(new MappedFile(data, size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<void*>(data_), static_cast<size_t>(size_));
}

}  // namespace mnemo::datastore
