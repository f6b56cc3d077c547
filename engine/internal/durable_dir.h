// Writing files and replacing directories so that a crash at any instant leaves the old
// content or the new, complete, never a mix. POSIX (fsync, renameat2 on Linux).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace zero3::durable {

// Writes `bytes` to `path` (created or truncated) and fsyncs it. Throws std::system_error.
void write_file(const std::string& path, const std::vector<char>& bytes);
// Fsyncs the directory `path`, so entries created or renamed in it survive a crash.
void sync_dir(const std::string& path);
// Makes `staging` (complete and synced) become `target`: an atomic exchange when `target`
// exists (the old content is removed afterwards), a rename otherwise; then fsyncs their parent.
// `after_exchange` runs between the exchange and the removal of the old content (a test hook).
void replace_dir(const std::string& staging, const std::string& target,
                 const std::function<void()>& after_exchange);

}  // namespace zero3::durable
