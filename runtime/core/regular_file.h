#pragma once

// Reading files kiln did not write itself (a cache entry, a checkpoint's JSON)
// without trusting what stands at the path.
//
// Note [Reading untrusted paths]
// A path that should name a file may name a directory, a FIFO, a device
// (/dev/zero) or a huge sparse file. Opening and reading it blindly throws
// from the stream (a directory), blocks forever (a FIFO with no writer) or
// reads without end (a device). So the path is opened with O_NONBLOCK (a FIFO
// opens at once instead of waiting for a writer), its type and size are taken
// from the open descriptor (no window between the check and the read), and
// only a regular file no larger than the caller's limit is read.

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln {

class RegularFile {
 public:
  enum class Kind { kRegular, kDirectory, kSpecial, kUnreadable };

  // Opens `path` for reading; kind() says what it found. Only a kRegular file
  // stays open.
  explicit RegularFile(const std::string& path);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  Kind kind() const { return kind_; }
  bool ok() const { return kind_ == Kind::kRegular; }
  // Nothing is at the path (ENOENT).
  bool missing() const;
  // The file's size when ok().
  int64_t size() const { return size_; }
  // Why it is not ok(): "a directory", "a special file" or the open/stat error.
  std::string problem() const;

  // Reads exactly n bytes from the current position (retrying short reads and
  // EINTR); false on an error or an early end of file.
  bool read(void* out, size_t n);

 private:
  int fd_ = -1;
  Kind kind_ = Kind::kUnreadable;
  int errno_ = 0;
  int64_t size_ = 0;
};

// Writes all n bytes to fd (retrying short writes and EINTR); false on an error.
bool write_all(int fd, const void* data, size_t n);

}  // namespace kiln
