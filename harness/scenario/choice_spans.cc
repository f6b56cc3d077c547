#include "harness/scenario/choice_spans.h"

#include "harness/scenario/draw/fdp_chooser.h"

#include <utility>

namespace zerocheck {
namespace {

// An FdpChooser that notes how many bytes remained when each part began and ended.
class SpanRecorder final : public Chooser {
 public:
  SpanRecorder(const uint8_t* data, size_t size) : in_(data, size) {}

  int64_t integer(int64_t lo, int64_t hi) override { return in_.integer(lo, hi); }
  bool another() override { return in_.another(); }
  void span_begins(ChoiceSpan) override { open_.push_back({in_.remaining(), in_.short_reads()}); }
  void span_ends(ChoiceSpan kind) override {
    const Opened at_begin = open_.back();
    open_.pop_back();
    // A part that ran out of input took zeros its bytes do not hold: moved elsewhere, it would read
    // the bytes below it as its own.
    if (in_.remaining() < at_begin.remaining && in_.short_reads() == at_begin.short_reads)
      spans_.push_back({kind, in_.remaining(), at_begin.remaining});
  }

  std::vector<ChoiceSpanAt> take() { return std::move(spans_); }

 private:
  struct Opened {
    size_t remaining, short_reads;
  };
  FdpChooser in_;
  std::vector<Opened> open_;
  std::vector<ChoiceSpanAt> spans_;
};

}  // namespace

std::vector<ChoiceSpanAt> choice_spans(const uint8_t* data, size_t size, const DecodeLimits& limits) {
  SpanRecorder recorder(data, size);
  draw_scenario(recorder, limits);
  return recorder.take();
}

std::vector<ChoiceSpanAt> spans_of(const std::vector<ChoiceSpanAt>& spans, ChoiceSpan kind) {
  std::vector<ChoiceSpanAt> out;
  for (const auto& span : spans)
    if (span.kind == kind) out.push_back(span);
  return out;
}

const char* to_string(ChoiceSpan kind) {
  switch (kind) {
    case ChoiceSpan::world: return "world";
    case ChoiceSpan::leaf: return "leaf";
    case ChoiceSpan::expert: return "expert";
    case ChoiceSpan::attribute_name: return "attribute_name";
    case ChoiceSpan::operation_unit: return "operation_unit";
  }
  return "?";
}

}  // namespace zerocheck
