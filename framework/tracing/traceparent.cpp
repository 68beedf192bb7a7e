#include "framework/tracing/traceparent.h"

namespace chatflow::tracing {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // upper case too: W3C allows only lower-case hex
}

// Reads 2 * N lower-case hex digits into `out`; false on any other character.
template <size_t N>
bool read_hex(std::string_view text, std::array<uint8_t, N>& out) {
  if (text.size() != 2 * N) return false;
  for (size_t i = 0; i < N; ++i) {
    int high = hex_value(text[2 * i]);
    int low = hex_value(text[2 * i + 1]);
    if (high < 0 || low < 0) return false;
    out[i] = static_cast<uint8_t>(high << 4 | low);
  }
  return true;
}

template <size_t N>
bool all_zero(const std::array<uint8_t, N>& bytes) {
  for (uint8_t byte : bytes) {
    if (byte != 0) return false;
  }
  return true;
}

bool plausible_tracestate(std::string_view value) {
  constexpr size_t kLongest = 512;
  if (value.size() > kLongest) return false;
  for (char c : value) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

std::string_view trim(std::string_view value) {
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
    value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t'))
    value.remove_suffix(1);
  return value;
}

}  // namespace

std::optional<SpanContext> parse_traceparent(std::string_view traceparent,
                                             std::string_view tracestate) {
  // version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2.
  constexpr size_t kLength = 55;
  traceparent = trim(traceparent);
  if (traceparent.size() < kLength) return std::nullopt;
  std::array<uint8_t, 1> version{};
  if (!read_hex(traceparent.substr(0, 2), version) || version[0] == 0xff) return std::nullopt;
  // Version 00 is exactly 55 characters; a later version may append fields after a dash.
  if (version[0] == 0 && traceparent.size() != kLength) return std::nullopt;
  if (traceparent.size() > kLength && traceparent[kLength] != '-') return std::nullopt;
  if (traceparent[2] != '-' || traceparent[35] != '-' || traceparent[52] != '-')
    return std::nullopt;
  SpanContext context;
  std::array<uint8_t, 1> flags{};
  if (!read_hex(traceparent.substr(3, 32), context.trace_id) ||
      !read_hex(traceparent.substr(36, 16), context.span_id) ||
      !read_hex(traceparent.substr(53, 2), flags)) {
    return std::nullopt;
  }
  if (all_zero(context.trace_id) || all_zero(context.span_id)) return std::nullopt;
  context.sampled = (flags[0] & 0x01) != 0;
  tracestate = trim(tracestate);
  if (plausible_tracestate(tracestate)) context.trace_state = std::string(tracestate);
  return context;
}

}  // namespace chatflow::tracing
