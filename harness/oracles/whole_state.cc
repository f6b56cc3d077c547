// gather_whole_state: one world's parameters and optimizer state, joined from its shards.
//
// A checkpoint loaded into worlds of different sizes is cut differently in each, so the worlds
// are compared on what they hold whole: every partitioned parameter and each of its state
// fields all-gathered and stripped of padding, a placed one broadcast by its owner, a persistent
// one as every rank holds it.
#include "harness/oracles/observation.h"

#include "engine/optimizer_rebuild.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

namespace zerocheck::oracles {
namespace {

// What a rank holds of one state field, as a code every rank can exchange before the data: a
// tensor's element count, or one of these.
constexpr int64_t kNoField = -2;
constexpr int64_t kNumberField = -1;
constexpr int64_t kNoState = -1;
// Adam's tuple has four fields, SGD's one: room for both (optimizer_rebuild.h).
constexpr int64_t kMaxFields = 4;
constexpr int64_t kHeader = 1 + kMaxFields;

struct LocalState {
  at::Tensor header;                 // [field count or kNoState, one code per field, kNoField padding]
  std::vector<at::Tensor> fields;    // flattened CPU tensors; numbers as one double
};

LocalState local_state(torch::optim::Optimizer& optimizer, const at::Tensor& master) {
  LocalState out;
  out.header = at::full({kHeader}, kNoField, at::kLong);
  int64_t* header = out.header.data_ptr<int64_t>();
  const c10::IValue state = zero3::param_state_value(optimizer, master);
  if (state.isNone()) {
    header[0] = kNoState;
    return out;
  }
  const auto elements = state.toTuple()->elements();
  TORCH_INTERNAL_ASSERT(static_cast<int64_t>(elements.size()) <= kMaxFields, "more state fields than kMaxFields");
  header[0] = static_cast<int64_t>(elements.size());
  for (size_t f = 0; f < elements.size(); ++f) {
    const c10::IValue& field = elements[f];
    at::Tensor t;
    if (field.isTensor()) {
      t = field.toTensor().detach().reshape({-1}).cpu().contiguous();
      header[1 + f] = t.numel();
    } else if (field.isInt() || field.isDouble() || field.isBool()) {
      const double number = field.isInt() ? static_cast<double>(field.toInt())
                            : field.isBool() ? static_cast<double>(field.toBool())
                                             : field.toDouble();
      t = at::full({1}, number, at::kDouble);
      header[1 + f] = kNumberField;
    }
    out.fields.push_back(t);
  }
  return out;
}

// Returns a zero tensor shaped for what `code` says a field holds.
at::Tensor buffer_for(int64_t code, at::ScalarType tensor_type) {
  if (code == kNumberField) return at::zeros({1}, at::kDouble);
  if (code >= 0) return at::zeros({code}, tensor_type);
  return at::Tensor();
}

// A placed parameter: its owner's copy and state, sent to every rank.
void from_owner(zero3::Comm& comm, const zero3::ManagedParamView& v, const LocalState& mine, WholeParam& out) {
  const bool owner = comm.rank() == v.owner;
  at::Tensor header = owner ? mine.header.clone() : at::zeros({kHeader}, at::kLong);
  comm.broadcast(header, v.owner);
  int64_t numel = 1;
  for (int64_t d : v.shape) numel *= d;
  out.value = owner ? v.master.detach().reshape({-1}).cpu().to(at::kFloat).clone() : at::zeros({numel}, at::kFloat);
  comm.broadcast(out.value, v.owner);
  const int64_t fields = header.data_ptr<int64_t>()[0];
  out.has_state = fields != kNoState;
  for (int64_t f = 0; f < std::max<int64_t>(fields, 0); ++f) {
    const int64_t code = header.data_ptr<int64_t>()[1 + f];
    at::Tensor field = owner ? mine.fields[static_cast<size_t>(f)] : buffer_for(code, at::kFloat);
    if (field.defined()) {
      field = field.clone();
      comm.broadcast(field, v.owner);
    }
    out.state.push_back(field);
  }
}

// Returns the first `numel` elements of every rank's equal-sized piece, joined in rank order.
at::Tensor joined(zero3::Comm& comm, const at::Tensor& piece, int64_t numel) {
  at::Tensor all = at::empty({piece.numel() * comm.world_size()}, piece.options());
  comm.all_gather(piece.contiguous(), all);
  return all.narrow(0, 0, std::min(numel, all.numel())).clone();
}

// A partitioned parameter: every rank's shard of it and of each state field, joined.
void from_shards(zero3::Comm& comm, const zero3::ManagedParamView& v, const LocalState& mine, WholeParam& out) {
  const int64_t numel = v.layout.numel;
  // The ranks must hold state of one structure, or the fields could not be joined.
  at::Tensor headers = at::empty({kHeader * comm.world_size()}, at::kLong);
  comm.all_gather(mine.header, headers);
  for (int r = 1; r < comm.world_size(); ++r)
    if (!at::equal(headers.narrow(0, r * kHeader, kHeader), headers.narrow(0, 0, kHeader))) {
      out.problem = fmt::format("rank {} holds optimizer state of another structure than rank 0 ({} vs {})", r,
                                c10::str(headers.narrow(0, r * kHeader, kHeader)), c10::str(headers.narrow(0, 0, kHeader)));
      return;
    }
  out.value = joined(comm, v.master.detach().reshape({-1}).cpu().to(at::kFloat), numel);
  const int64_t fields = mine.header.data_ptr<int64_t>()[0];
  out.has_state = fields != kNoState;
  for (int64_t f = 0; f < std::max<int64_t>(fields, 0); ++f) {
    const int64_t code = mine.header.data_ptr<int64_t>()[1 + f];
    const at::Tensor& field = mine.fields[static_cast<size_t>(f)];
    out.state.push_back(code >= 0 ? joined(comm, field, numel) : field);  // a number is every rank's
  }
}

}  // namespace

std::vector<WholeParam> gather_whole_state(zero3::Engine& engine) {
  zero3::Comm& comm = engine.comm();
  std::vector<WholeParam> out;
  for (const auto& v : engine.params()) {
    WholeParam whole;
    whole.path = v.path;
    const LocalState mine = local_state(engine.optimizer(), v.master);
    if (v.owner >= 0) {
      from_owner(comm, v, mine, whole);
    } else if (v.persistent) {
      whole.value = v.master.detach().reshape({-1}).cpu().to(at::kFloat).clone();
      whole.has_state = mine.header.data_ptr<int64_t>()[0] != kNoState;
      whole.state = mine.fields;
    } else {
      from_shards(comm, v, mine, whole);
    }
    out.push_back(std::move(whole));
  }
  return out;
}

}  // namespace zerocheck::oracles
