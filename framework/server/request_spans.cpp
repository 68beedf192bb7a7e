#include "framework/server/request_spans.h"

#include <algorithm>
#include <utility>

namespace chatflow::server {
namespace {

// The request's own times are steady-clock; spans carry wall-clock Unix nanoseconds.
struct ClockOffset {
  int64_t steady_to_unix = unix_now_ns() - now_ns();
  int64_t operator()(int64_t steady_ns) const { return steady_ns + steady_to_unix; }
};

SpanRecord child_of(const RequestTrace& trace, std::string name, int64_t start_unix_ns,
                    int64_t end_unix_ns) {
  SpanRecord span;
  span.trace_id = trace.server_span().trace_id;
  span.span_id = random_span_id();
  span.parent_span_id = trace.server_span().span_id;
  span.trace_state = trace.server_span().trace_state;
  span.name = std::move(name);
  span.kind = SpanKind::internal;
  span.start_unix_ns = start_unix_ns;
  span.end_unix_ns = std::max(start_unix_ns, end_unix_ns);
  return span;
}

// "127.0.0.1:41712" or "[::1]:41712" as an address and a port (0 when there is none).
std::pair<std::string, int64_t> split_address(const std::string& text) {
  size_t colon = text.rfind(':');
  bool bracketed = !text.empty() && text.front() == '[';
  // A bare IPv6 address ("2001:db8::5", forwarded without a port) has colons and no port.
  if (colon == std::string::npos || (!bracketed && text.find(':') != colon)) return {text, 0};
  std::string address = text.substr(0, colon);
  if (address.size() >= 2 && address.front() == '[' && address.back() == ']')
    address = address.substr(1, address.size() - 2);
  int64_t port = 0;
  for (char c : text.substr(colon + 1)) {
    if (c < '0' || c > '9') return {text, 0};
    port = port * 10 + (c - '0');
  }
  return {address, port};
}

// The semantic conventions' client.* (the client, forwarded by a trusted proxy or not) and, behind
// a proxy, network.peer.* (the proxy itself).
void add_client_address(const ExchangeAddresses& addresses,
                        std::vector<SpanAttribute>& attributes) {
  if (addresses.remote.empty()) return;
  auto [address, port] = split_address(addresses.remote);
  attributes.push_back({"client.address", address});
  if (port > 0) attributes.push_back({"client.port", port});
  if (addresses.peer.empty()) return;
  auto [peer_address, peer_port] = split_address(addresses.peer);
  attributes.push_back({"network.peer.address", peer_address});
  if (peer_port > 0) attributes.push_back({"network.peer.port", peer_port});
}

std::string operation_name(RequestKind kind) {
  return kind == RequestKind::chat ? "chat" : "text_completion";
}

void add_gen_ai_attributes(const Request& request, std::vector<SpanAttribute>& attributes) {
  attributes.push_back({"gen_ai.operation.name", operation_name(request.kind)});
  if (!request.model.empty()) attributes.push_back({"gen_ai.request.model", request.model});
  if (request.generation.max_tokens > 0)  // 0: not given (up to the context)
    attributes.push_back({"gen_ai.request.max_tokens", request.generation.max_tokens});
  attributes.push_back(
      {"gen_ai.request.temperature", static_cast<double>(request.generation.temperature)});
  attributes.push_back({"gen_ai.request.top_p", static_cast<double>(request.generation.top_p)});
  if (request.generation.seed) {
    attributes.push_back({"gen_ai.request.seed", static_cast<int64_t>(*request.generation.seed)});
  }
  attributes.push_back({"gen_ai.response.id", request.id});
  if (auto reason = request.finish_reason(); reason && !request.error()) {
    attributes.push_back({"gen_ai.response.finish_reasons",
                          std::vector<std::string>{std::string(to_string(*reason))}});
  }
  attributes.push_back({"gen_ai.usage.input_tokens", request.usage.prompt_tokens});
  attributes.push_back({"gen_ai.usage.output_tokens", request.usage.completion_tokens});
}

SpanRecord server_span(const Request& request, const PipelineSpec& spec,
                       const TracedExchange& exchange, const ClockOffset& to_unix) {
  const RequestTrace& trace = *request.trace;
  SpanRecord span;
  span.trace_id = trace.server_span().trace_id;
  span.span_id = trace.server_span().span_id;
  span.parent_span_id = trace.parent_span_id();
  span.trace_state = trace.server_span().trace_state;
  span.name = exchange.method + " " + exchange.route;
  span.kind = SpanKind::server;
  span.start_unix_ns = to_unix(exchange.received_ns);
  span.end_unix_ns = to_unix(request.finished_ns() > 0 ? request.finished_ns() : now_ns());
  auto& attributes = span.attributes;
  attributes.reserve(32);
  attributes.push_back({"http.request.method", exchange.method});
  attributes.push_back({"http.route", exchange.route});
  attributes.push_back({"url.path", exchange.path});
  attributes.push_back({"http.response.status_code", int64_t{exchange.status}});
  add_client_address(exchange.addresses, attributes);
  attributes.push_back({"chatflow.request_id", request.request_id});
  attributes.push_back({"chatflow.pipeline", spec.name});
  if (!request.identity.tenant.empty())
    attributes.push_back({"chatflow.tenant", request.identity.tenant});
  if (!request.identity.user.empty())
    attributes.push_back({"chatflow.user", request.identity.user});
  if (auto arm = request.annotation("arm")) attributes.push_back({"chatflow.ab.arm", *arm});
  if (!request.session_id.empty())
    attributes.push_back({"chatflow.session_id", request.session_id});
  attributes.push_back({"chatflow.stream", request.stream});
  add_gen_ai_attributes(request, attributes);
  if (request.usage.cached_prompt_tokens > 0) {
    attributes.push_back(
        {"chatflow.usage.cached_prompt_tokens", request.usage.cached_prompt_tokens});
  }
  if (exchange.first_token_ns > 0) {
    attributes.push_back(
        {"chatflow.time_to_first_token_ms",
         static_cast<double>(exchange.first_token_ns - exchange.received_ns) / 1e6});
  }
  if (const auto& error = request.error()) {
    attributes.push_back({"error.type", error->code.empty() ? error->type : error->code});
    // HTTP semantic conventions: a server span is an error for 5xx, not for the client's 4xx.
    if (exchange.status >= 500 || exchange.status == 0) {
      span.status = SpanStatus::error;
      span.status_message = error->message;
    }
  }
  return span;
}

void add_stage_spans(const Request& request, const PipelineSpec& spec, const ClockOffset& to_unix,
                     std::vector<SpanRecord>& spans) {
  const RequestTrace& trace = *request.trace;
  auto timings = request.stage_timings();
  auto annotations = request.annotations();
  auto annotation_stages = request.annotation_stages();
  for (size_t i = 0; i < timings.size() && i < spec.stages.size(); ++i) {
    const StageTiming& timing = timings[i];
    if (timing.calls == 0) continue;
    const StageSpec& stage = spec.stages[i];
    SpanRecord span =
        child_of(trace, stage.name, to_unix(timing.first_start_ns), to_unix(timing.last_end_ns));
    bool stream = stage.type->kind == StageKind::stream;
    span.attributes.reserve(8);
    span.attributes.push_back({"chatflow.stage.name", stage.name});
    span.attributes.push_back({"chatflow.stage.type", stage.type->name});
    span.attributes.push_back({"chatflow.stage.kind", std::string(stream ? "stream" : "request")});
    span.attributes.push_back({"chatflow.stage.calls", int64_t{timing.calls}});
    span.attributes.push_back(
        {"chatflow.stage.busy_ms", static_cast<double>(timing.busy_ns) / 1e6});
    const auto& ports = stage.type->ports;
    if (timing.port >= 0 && static_cast<size_t>(timing.port) < ports.size()) {
      span.attributes.push_back({"chatflow.stage.port", ports[timing.port].name});
    }
    for (size_t note = 0; note < annotations.size() && note < annotation_stages.size(); ++note) {
      if (annotation_stages[note] == static_cast<int32_t>(i)) {
        span.attributes.push_back(
            {"chatflow.annotation." + annotations[note].first, annotations[note].second});
      }
    }
    spans.push_back(std::move(span));
  }
  // Notes made outside any stage (an engine thread, the server) go on the server span.
  for (size_t note = 0; note < annotations.size() && note < annotation_stages.size(); ++note) {
    if (annotation_stages[note] < 0) {
      spans.front().attributes.push_back(
          {"chatflow.annotation." + annotations[note].first, annotations[note].second});
    }
  }
}

void add_engine_spans(const Request& request, const ClockOffset& to_unix,
                      std::vector<SpanRecord>& spans) {
  const RequestTrace& trace = *request.trace;
  const GenerationTimes& times = request.generation_times;
  int64_t queued = times.queued_ns.load();
  int64_t scheduled = times.scheduled_ns.load();
  int64_t first_token = times.first_token_ns.load();
  int64_t finished = times.finished_ns.load();
  if (queued <= 0) return;
  // A generation cancelled or failed on the way ends its last phase when the request ended.
  int64_t ended = finished > 0 ? finished : request.finished_ns();
  auto engine_span = [&](const char* name, int64_t start, int64_t end) {
    SpanRecord span = child_of(trace, name, to_unix(start), to_unix(end > 0 ? end : start));
    if (!request.model.empty()) span.attributes.push_back({"gen_ai.request.model", request.model});
    return span;
  };
  spans.push_back(engine_span("engine.queue", queued, scheduled > 0 ? scheduled : ended));
  if (scheduled <= 0) return;
  SpanRecord prefill =
      engine_span("engine.prefill", scheduled, first_token > 0 ? first_token : ended);
  prefill.attributes.push_back({"gen_ai.usage.input_tokens", request.usage.prompt_tokens});
  prefill.attributes.push_back(
      {"chatflow.usage.cached_prompt_tokens", request.usage.cached_prompt_tokens});
  spans.push_back(std::move(prefill));
  if (first_token <= 0) return;
  SpanRecord decode = engine_span("engine.decode", first_token, ended);
  decode.attributes.push_back({"gen_ai.usage.output_tokens", request.usage.completion_tokens});
  spans.push_back(std::move(decode));
}

}  // namespace

std::vector<SpanRecord> request_spans(const Request& request, const PipelineSpec& spec,
                                      const TracedExchange& exchange) {
  ClockOffset to_unix;
  std::vector<SpanRecord> spans;
  spans.reserve(spec.stages.size() + 5);
  spans.push_back(server_span(request, spec, exchange, to_unix));
  add_stage_spans(request, spec, to_unix, spans);
  add_engine_spans(request, to_unix, spans);
  for (SpanRecord& child : request.trace->take_children())
    spans.push_back(std::move(child));
  return spans;
}

}  // namespace chatflow::server
