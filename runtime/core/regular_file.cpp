#include "runtime/core/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kiln {

RegularFile::RegularFile(const std::string& path) {
  // Note [Reading untrusted paths]: O_NONBLOCK so that a FIFO cannot hold the open.
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd_ < 0) {
    errno_ = errno;
    return;
  }
  struct stat st {};
  if (fstat(fd_, &st) != 0) {
    errno_ = errno;
  } else if (S_ISREG(st.st_mode)) {
    kind_ = Kind::kRegular;
    size_ = static_cast<int64_t>(st.st_size);
    return;
  } else {
    kind_ = S_ISDIR(st.st_mode) ? Kind::kDirectory : Kind::kSpecial;
  }
  ::close(fd_);
  fd_ = -1;
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

bool RegularFile::missing() const {
  return kind_ == Kind::kUnreadable && errno_ == ENOENT;
}

std::string RegularFile::problem() const {
  switch (kind_) {
    case Kind::kRegular:
      return "";
    case Kind::kDirectory:
      return "a directory";
    case Kind::kSpecial:
      return "a special file";
    case Kind::kUnreadable:
      break;
  }
  return std::strerror(errno_);
}

bool RegularFile::read(void* out, size_t n) {
  if (fd_ < 0) return false;
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    ssize_t got = ::read(fd_, p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

bool write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t put = ::write(fd, p, n);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    p += put;
    n -= static_cast<size_t>(put);
  }
  return true;
}

}  // namespace kiln
