#include "engine/store.h"

#include "engine/errors.h"
#include "engine/internal/store_rendezvous.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <thread>
#include <type_traits>
#include <utility>

namespace zero3 {
namespace {

class TcpKeyValueStore final : public KeyValueStore {
 public:
  TcpKeyValueStore(c10::intrusive_ptr<c10d::TCPStore> store, std::string where)
      : store_(std::move(store)), where_(std::move(where)) {}

  int port() const override { return store_->getPort(); }

  void set(const std::string& key, const std::string& value) override {
    guarded("set " + key, [&] { store_->set(key, std::vector<uint8_t>(value.begin(), value.end())); });
  }

  std::optional<std::string> get(const std::string& key, std::chrono::milliseconds wait) override {
    const auto deadline = std::chrono::steady_clock::now() + wait;
    // Short sleeps first: results usually arrive within a millisecond or two.
    auto pause = std::chrono::microseconds(100);
    while (true) {
      bool present = false;
      guarded("check " + key, [&] { present = store_->check({key}); });
      if (present) {
        std::vector<uint8_t> bytes;
        guarded("get " + key, [&] { bytes = store_->get(key); });
        return std::string(bytes.begin(), bytes.end());
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(5));
    }
  }

  void erase(const std::string& key) override {
    guarded("delete " + key, [&] { (void)store_->deleteKey(key); });
  }

  int64_t add(const std::string& key, int64_t delta) override {
    int64_t value = 0;
    guarded("add " + key, [&] { value = store_->add(key, delta); });
    return value;
  }

  std::shared_ptr<GlooRendezvous> rendezvous(const std::string& prefix) override {
    c10::intrusive_ptr<c10d::Store> base = store_;
    return std::make_shared<internal::StoreRendezvous>(c10::make_intrusive<c10d::PrefixStore>(prefix, base));
  }

 private:
  template <typename F>
  void guarded(const std::string& what, F&& f) {
    try {
      f();
    } catch (const c10::Error& e) {
      throw CommError("store at " + where_ + ": " + what + " failed: " + e.what_without_backtrace());
    }
  }

  c10::intrusive_ptr<c10d::TCPStore> store_;
  std::string where_;
};

// LibTorch 2.4+ asks for a libuv server by default, and Debian's build has no libuv ("use_libuv
// was requested but PyTorch was build without libuv support"); 1.13 has no such field.
template <typename Options, typename = void>
struct HasUseLibUV : std::false_type {};
template <typename Options>
struct HasUseLibUV<Options, std::void_t<decltype(std::declval<Options&>().useLibUV)>> : std::true_type {};

template <typename Options>
void use_plain_sockets(Options& options) {
  if constexpr (HasUseLibUV<Options>::value) options.useLibUV = false;
}

}  // namespace

std::shared_ptr<KeyValueStore> KeyValueStore::tcp(const std::string& host, int port, bool serve,
                                                  std::chrono::milliseconds timeout) {
  const std::string where = host + ":" + std::to_string(port);
  if (port < 0 || port > 65535) throw UsageError("store port " + std::to_string(port) + " is outside 0..65535");
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = serve;
  options.waitWorkers = false;
  options.timeout = timeout;
  use_plain_sockets(options);
  try {
    return std::make_shared<TcpKeyValueStore>(c10::make_intrusive<c10d::TCPStore>(host, options), where);
  } catch (const std::exception& e) {
    throw CommError(std::string(serve ? "cannot host" : "cannot reach") + " the store at " + where + ": " + e.what());
  }
}

}  // namespace zero3
