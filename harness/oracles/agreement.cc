// I9: the ranks agree on what they hold. Each rank digests its own view (FNV-1a over the fields'
// bytes); run_ops gathers the digests with the flag it exchanges after every operation anyway, so
// the check costs no collective of its own.
#include "harness/oracles/oracles.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <string_view>

namespace zerocheck::oracles {
namespace {

class Digest {
 public:
  void bytes(const void* data, size_t size) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < size; ++i) {
      hash_ ^= p[i];
      hash_ *= 1099511628211ULL;
    }
  }
  void number(int64_t v) { bytes(&v, sizeof v); }
  void text(std::string_view s) {
    number(static_cast<int64_t>(s.size()));  // "ab","c" and "a","bc" digest apart
    bytes(s.data(), s.size());
  }
  int64_t value() const {
    int64_t out;
    std::memcpy(&out, &hash_, sizeof out);
    return out;
  }

 private:
  uint64_t hash_ = 14695981039346656037ULL;
};

enum Field { live, params, shapes, partitions, statuses, steps, whole_copies };

// A whole parameter's bytes are the same on every rank that holds it whole and is not its
// placed owner's alone: persistent ones always, partitioned ones while gathered.
bool whole_everywhere(const zero3::ManagedParamView& v) {
  return v.owner < 0 && (v.persistent || v.status == zero3::ParamStatus::Available);
}

}  // namespace

const std::array<const char*, kAgreementFields>& agreement_fields() {
  static const std::array<const char*, kAgreementFields> names = {
      "live engine", "parameter list", "shapes", "partition sizes", "statuses", "step counters", "whole copies"};
  return names;
}

AgreementDigest agreement_digest(const zero3::Engine* engine) {
  AgreementDigest out{};
  if (!engine) return out;
  std::array<Digest, kAgreementFields> d;
  d[live].number(1);
  for (const auto& v : engine->params()) {
    d[params].text(v.path);
    d[shapes].number(static_cast<int64_t>(v.shape.size()));
    for (int64_t extent : v.shape) d[shapes].number(extent);
    d[partitions].number(v.owner < 0 ? v.layout.chunk() : -1);
    d[statuses].number(v.persistent);
    d[statuses].number(v.owner);
    d[statuses].number(v.trainable);
    if (v.owner < 0) d[statuses].number(static_cast<int64_t>(v.status));
    if (whole_everywhere(v) && v.param.defined() && v.param.numel() > 0) {
      const at::Tensor data = v.param.detach().contiguous();
      d[whole_copies].text(v.path);
      d[whole_copies].bytes(data.data_ptr(), static_cast<size_t>(data.nbytes()));
    }
  }
  d[steps].number(engine->micro_steps());
  d[steps].number(engine->optimizer_steps());
  for (size_t i = 0; i < kAgreementFields; ++i) out[i] = d[i].value();
  return out;
}

Result agreement(const std::vector<AgreementDigest>& by_rank, const std::string& target) {
  for (size_t field = 0; field < kAgreementFields; ++field) {
    std::vector<int> differing;
    for (size_t r = 1; r < by_rank.size(); ++r)
      if (by_rank[r][field] != by_rank[0][field]) differing.push_back(static_cast<int>(r));
    if (differing.empty()) continue;
    const std::string name = agreement_fields()[field];
    Violation v = violation("I9", target, name, fmt::format("rank 0's {} (digest {:#x})", name, static_cast<uint64_t>(by_rank[0][field])),
                            fmt::format("rank(s) {} hold other {}", fmt::join(differing, ", "), name),
                            fmt::format("ranks disagree on {}: rank 0 and rank(s) {}", name, fmt::join(differing, ", ")));
    v.rank = differing.front();
    return v;
  }
  return std::nullopt;
}

}  // namespace zerocheck::oracles
