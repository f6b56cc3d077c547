#include "engine/internal/durable_dir.h"

#include <cerrno>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <system_error>
#include <unistd.h>

namespace zero3::durable {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw std::system_error(errno, std::generic_category(), what + " " + path);
}

void sync_fd_of(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) fail("cannot open", path);
  if (::fsync(fd) != 0) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    fail("cannot fsync", path);
  }
  ::close(fd);
}

std::string parent_of(const std::string& path) {
  const auto parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

}  // namespace

void write_file(const std::string& path, const std::vector<char>& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create", path);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int saved = errno;
      ::close(fd);
      errno = saved;
      fail("cannot write", path);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) fail("cannot fsync", path);
}

void sync_dir(const std::string& path) { sync_fd_of(path, O_RDONLY | O_DIRECTORY); }

void replace_dir(const std::string& staging, const std::string& target,
                 const std::function<void()>& after_exchange) {
  std::error_code ec;
  if (std::filesystem::exists(target, ec)) {
    // RENAME_EXCHANGE swaps both names in one step: there is no instant without a checkpoint.
    if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0)
      fail("cannot exchange " + staging + " with", target);
    sync_dir(parent_of(target));
    if (after_exchange) after_exchange();
    std::filesystem::remove_all(staging);  // now the old checkpoint
  } else {
    if (::rename(staging.c_str(), target.c_str()) != 0) fail("cannot rename " + staging + " to", target);
    sync_dir(parent_of(target));
    if (after_exchange) after_exchange();
  }
}

}  // namespace zero3::durable
