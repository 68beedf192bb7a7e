// The exchange between a connection and the pipeline: a chat or completion request becomes a
// Request submitted to the pipeline; its chunks come back through HttpSink and go out as
// server-sent events, or as one JSON body once it finishes.
#include <sys/socket.h>

#include <boost/asio.hpp>

#include "framework/anthropic/messages_protocol.h"
#include "framework/api/sink.h"
#include "framework/openai/openai_protocol.h"
#include "framework/responses/responses_protocol.h"
#include "framework/server/access_log.h"
#include "framework/server/connection.h"
#include "framework/server/kept_response_store.h"
#include "framework/server/request_spans.h"

namespace chatflow::server {

class HttpSink final : public Sink {
 public:
  // Who asked, for the access log.
  struct Exchange {
    std::string method;
    std::string path;
    ExchangeAddresses addresses;
    std::string route;  // the route's pattern, for traces
  };

  HttpSink(std::shared_ptr<Connection> connection, uint64_t exchange_id,
           std::shared_ptr<const ServedPipeline> served, std::shared_ptr<AccessLog> access_log,
           std::shared_ptr<tracing::Tracer> tracer, bool stream, int64_t received_ns,
           Exchange exchange, Wire wire)
      : connection_(std::move(connection)),
        exchange_id_(exchange_id),
        served_(std::move(served)),
        access_log_(std::move(access_log)),
        tracer_(std::move(tracer)),
        stream_(stream),
        exchange_(std::move(exchange)),
        wire_(wire) {
    times_.received_ns = received_ns;
  }

  void on_chunk(Request& request, const Chunk& chunk) override {
    int64_t now = now_ns();
    if (!chunk.token_ids.empty() || !chunk.text.empty() || !chunk.reasoning.empty() ||
        !chunk.tool_calls.empty()) {
      if (times_.first_token_ns == 0) {
        times_.first_token_ns = now;
      } else if (!chunk.token_ids.empty()) {
        served_->metrics->observe_inter_token(static_cast<double>(now - times_.last_token_ns) /
                                              1e9);
      }
      times_.last_token_ns = now;
    }
    if (wire_ == Wire::responses) {
      // As for Anthropic: the Responses API's events and object are written here.
      std::string bytes = responses->push(request, chunk);
      if (stream_ && !bytes.empty()) connection_->deliver(exchange_id_, std::move(bytes));
    } else if (wire_ == Wire::anthropic) {
      // An emitter stage's events are OpenAI's: Anthropic's are written here, from the chunks.
      if (stream_) {
        std::string bytes = messages_encoder_.encode(request, chunk);
        if (!bytes.empty()) connection_->deliver(exchange_id_, std::move(bytes));
      } else {
        gathered_.add(answer_stream_.push(request, chunk));
      }
    } else if (stream_) {
      // A pipeline with an emitter stage (sse_emit) renders the events itself; without one, the
      // server does, with the same encoder.
      std::string bytes;
      if (!chunk.encoded.empty()) {
        pipeline_encodes_ = true;
        bytes = chunk.encoded;
      } else if (!pipeline_encodes_) {
        bytes = encoder_.encode(request, chunk);
      }
      if (!bytes.empty()) connection_->deliver(exchange_id_, std::move(bytes));
    } else {
      answer_.add(chunk);
    }
  }

  void on_finish(Request& request) override {
    Outcome outcome;
    // Only a request that ended normally has passed every stage: then its usage is final.
    if (!stream_ && !request.error()) {
      outcome.body = wire_ == Wire::responses   ? responses->finish(request)
                     : wire_ == Wire::anthropic ? anthropic::message_json(request, gathered_)
                                                : openai::completion_json(request, answer_);
    }
    connection_->complete(exchange_id_, std::move(outcome));
    connection_.reset();  // the request holds this sink: let go of the connection now
  }

  // The event that ends a stream that began with an error (read once the pipeline is done).
  std::string stream_error_event(const RequestError& error) {
    if (wire_ == Wire::responses) return responses->stream_error(error);
    return wire_ == Wire::anthropic ? anthropic::stream_error_event(error)
                                    : openai::stream_error_events(error);
  }

  std::shared_ptr<responses::ResponseWriter> responses;  // Wire::responses

  // The connection's last word on the exchange: the status the client got (499: it left).
  void set_status(int status) { status_ = status; }

  // Metrics and the access log read what stages wrote, so they wait until no stage can still be
  // writing (a cancelled request finishes while stages may be busy with it).
  void on_released(const Request& request) override {
    if (status_ == 0) return;  // never answered through this sink
    served_->metrics->observe_finished(request, times_, status_);
    access_log_->write(access_record(request));
    if (tracer_ && request.trace && request.trace->sampled()) {
      tracer_->finish(request_spans(
          request, served_->pipeline->spec(),
          TracedExchange{exchange_.method, exchange_.route, exchange_.path, exchange_.addresses,
                         status_, times_.received_ns, times_.first_token_ns}));
    }
  }

 private:
  AccessRecord access_record(const Request& request) const {
    AccessRecord record;
    record.id = request.id;
    record.request_id = request.request_id;
    record.method = exchange_.method;
    record.path = exchange_.path;
    record.remote = exchange_.addresses.remote;
    record.peer = exchange_.addresses.peer;
    record.scheme = exchange_.addresses.scheme;
    record.status = status_;
    record.tenant = request.identity.tenant;
    record.user = request.identity.user;
    record.end_user = request.end_user;
    record.model = request.model;
    record.stream = stream_;
    record.prompt_tokens = request.usage.prompt_tokens;
    record.completion_tokens = request.usage.completion_tokens;
    record.cached_tokens = request.usage.cached_prompt_tokens;
    if (times_.first_token_ns > 0) {
      record.ttft_ms = static_cast<double>(times_.first_token_ns - times_.received_ns) / 1e6;
    }
    int64_t finished = request.finished_ns() > 0 ? request.finished_ns() : now_ns();
    record.total_ms = static_cast<double>(finished - times_.received_ns) / 1e6;
    const auto& error = request.error();
    if (auto reason = request.finish_reason(); reason && !error) {
      record.finish_reason = std::string(to_string(*reason));
    }
    if (error) record.error_code = error->code.empty() ? error->type : error->code;
    record.annotations = request.annotations();
    return record;
  }

  std::shared_ptr<Connection> connection_;
  uint64_t exchange_id_;
  std::shared_ptr<const ServedPipeline> served_;
  std::shared_ptr<AccessLog> access_log_;
  std::shared_ptr<tracing::Tracer> tracer_;
  bool stream_;
  Exchange exchange_;
  TokenTimes times_;
  bool pipeline_encodes_ = false;
  openai::SseEncoder encoder_;
  openai::WholeAnswer answer_;
  Wire wire_;
  anthropic::MessagesSseEncoder messages_encoder_;  // Wire::anthropic, streamed
  chat::AnswerStream answer_stream_;                // Wire::anthropic, whole
  chat::GatheredAnswer gathered_;
  int status_ = 0;
};

void Connection::start_generation(const std::shared_ptr<const ServedPipeline>& served,
                                  RequestKind kind, const std::string& body,
                                  const std::string& endpoint) {
  endpoint_ = endpoint;
  if (state_->draining) {
    return respond(error_response(make_error(503, "server_error",
                                             "the server is shutting down; retry elsewhere",
                                             "server_shutting_down"),
                                  wire()),
                   endpoint);
  }
  auto request = std::make_shared<Request>();
  std::shared_ptr<responses::ResponseWriter> response_writer;
  if (wire() == Wire::responses) {
    auto owner = responses::owner_of(served->authenticator != nullptr, call_.caller);
    auto keeper = response_keeper(*served, state_->responses);
    if (keeper->reads_wait()) {
      return parse_responses_on_worker(served, kind, body, endpoint, std::move(keeper), owner);
    }
    auto parsed = responses::parse_request(body, *request, served->model_ids, *keeper, owner);
    request->id = random_id("resp_");
    response_writer =
        std::make_shared<responses::ResponseWriter>(std::move(parsed), std::move(keeper), owner);
  } else if (wire() == Wire::anthropic) {
    anthropic::parse_messages_request(body, *request, served->model_ids);
    request->id = random_id("msg_");
  } else {
    openai::parse_completion_request(body, kind, *request, served->model_ids);
    request->id = random_id(kind == RequestKind::chat ? "chatcmpl-" : "cmpl-");
  }
  submit_generation(served, kind, body, endpoint, request, std::move(response_writer));
}

// A Responses request whose previous_response_id is read from the history store (a database's
// round trip, or a wait for its lock) is parsed on a worker: the connection waits holding no
// thread, and the I/O thread serves its other connections meanwhile.
void Connection::parse_responses_on_worker(const std::shared_ptr<const ServedPipeline>& served,
                                           RequestKind kind, const std::string& body,
                                           const std::string& endpoint,
                                           std::shared_ptr<responses::ResponseKeeper> keeper,
                                           const std::optional<std::string>& owner) {
  auto self = shared_from_this();
  uint64_t exchange = exchange_;
  bool queued = state_->workers.submit([self, exchange, served, kind, body, endpoint,
                                        keeper = std::move(keeper), owner] {
    auto request = std::make_shared<Request>();
    std::shared_ptr<responses::ResponseWriter> writer;
    std::optional<RequestError> error;
    try {
      auto parsed = responses::parse_request(body, *request, served->model_ids, *keeper, owner);
      writer = std::make_shared<responses::ResponseWriter>(std::move(parsed), keeper, owner);
    } catch (const RequestFailure& failure) {
      error = failure.error();
    } catch (const std::exception& failure) {
      error = make_error(500, "server_error", failure.what(), "internal_error");
    }
    net::post(self->stream_.get_executor(),
              [self, exchange, served, kind, body, endpoint, request, writer, error] {
                if (self->closed_ || exchange != self->exchange_) return;
                if (error) return self->respond_error(*error, endpoint);
                request->id = random_id("resp_");
                try {
                  self->submit_generation(served, kind, body, endpoint, request, writer);
                } catch (const RequestFailure& failure) {
                  self->respond_error(failure.error(), endpoint);
                } catch (const std::exception& failure) {
                  self->respond_error(
                      make_error(500, "server_error", failure.what(), "internal_error"), endpoint);
                }
              });
  });
  if (!queued) {
    Response busy = error_response(
        make_error(503, "server_error", "too many requests wait for a worker; retry shortly",
                   "server_overloaded"),
        wire());
    busy.headers.push_back({"Retry-After", std::to_string(state_->settings.retry_after_s)});
    respond(busy, endpoint);
  }
}

void Connection::submit_generation(const std::shared_ptr<const ServedPipeline>& served,
                                   RequestKind kind, const std::string& body,
                                   const std::string& endpoint,
                                   const std::shared_ptr<Request>& request,
                                   std::shared_ptr<responses::ResponseWriter> response_writer) {
  request->request_id = request_id_.empty() ? request->id : request_id_;
  request->client_address = client_.address;
  request->headers = std::move(headers_);
  // The header holds to the body field's limits, whichever of the two names the session.
  if (auto session = request->header("x-session-id")) {
    openai::check_session_id(*session, "x-session-id");
    if (request->session_id.empty()) request->session_id = std::string(*session);
  }
  if (state_->tracer) {
    request->trace = state_->tracer->start_request(request->header("traceparent"),
                                                   request->header("tracestate"));
  }
  request->created = unix_seconds();
  double timeout = state_->settings.request_timeout_s;
  if (timeout > 0) {
    request->deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout));
  }
  sink_ = std::make_shared<HttpSink>(
      shared_from_this(), exchange_, served, state_->access_log, state_->tracer, request->stream,
      received_ns_, HttpSink::Exchange{method_, path_, exchange_addresses(), endpoint}, wire());
  sink_->responses = std::move(response_writer);
  request->sink = sink_;
  request_ = request;
  streaming_ = request->stream;
  headers_sent_ = false;
  gone_ = false;
  last_stream_write_ns_ = now_ns();
  state_->track(request);
  Admission admission = served->pipeline->submit(request);
  if (admission == Admission::accepted) {
    if (streaming_) schedule_heartbeat();
    return watch_request(timeout);
  }

  state_->untrack(request);
  request_.reset();
  sink_.reset();
  request->sink.reset();
  // A reload swapped pipelines between our snapshot and the submit: the new one takes it.
  if (admission == Admission::closed && !state_->draining) {
    auto fresh = state_->served_snapshot();
    if (fresh && fresh != served) {
      headers_ = std::move(request->headers);
      return start_generation(fresh, kind, body, endpoint);
    }
  }
  bool full = admission == Admission::full;
  Response response =
      error_response(make_error(503, "server_error",
                                full ? "the server is at its limit of " +
                                           std::to_string(served->pipeline->spec().max_in_flight) +
                                           " requests in flight; retry after " +
                                           std::to_string(state_->settings.retry_after_s) + " s"
                                     : "the server is shutting down; retry elsewhere",
                                full ? "server_overloaded" : "server_shutting_down"),
                     wire());
  response.headers.push_back({"Retry-After", std::to_string(state_->settings.retry_after_s)});
  respond(response, endpoint);
}

// Notices a client that goes away while its request runs, and the request's deadline.
void Connection::watch_request(double timeout) {
  stream_.socket().async_wait(tcp::socket::wait_read,
                              [self = shared_from_this(), exchange = exchange_](
                                  beast::error_code error) { self->on_readable(error, exchange); });
  if (timeout <= 0) return;
  timer_.expires_at(request_->deadline);
  timer_.async_wait(
      [self = shared_from_this(), exchange = exchange_, timeout](beast::error_code error) {
        if (error || exchange != self->exchange_ || !self->request_) return;
        char seconds[32];
        std::snprintf(seconds, sizeof seconds, "%g", timeout);
        self->request_->cancel(make_error(504, "timeout",
                                          std::string("the request ran longer than "
                                                      "request_timeout_s (") +
                                              seconds + " s)",
                                          "request_timeout"));
      });
}

// While a stream is silent (queued, prefilling, a slow stage) an SSE comment every
// sse_heartbeat_ms keeps proxies that cut idle connections from cutting it. The first one sends
// the stream's head: from then on an error is an error event, as for any stream that began.
void Connection::schedule_heartbeat() {
  int64_t period_ms = state_->settings.sse_heartbeat_ms;
  if (period_ms <= 0) return;
  auto due = Clock::time_point(std::chrono::duration_cast<Clock::duration>(
                 std::chrono::nanoseconds(last_stream_write_ns_))) +
             std::chrono::milliseconds(period_ms);
  heartbeat_timer_.expires_at(due);
  heartbeat_timer_.async_wait(
      [self = shared_from_this(), exchange = exchange_, period_ms](beast::error_code error) {
        if (error || exchange != self->exchange_ || !self->request_ || self->closed_) return;
        if (now_ns() - self->last_stream_write_ns_ >= period_ms * 1'000'000) {
          if (!self->headers_sent_) {
            self->send(self->stream_head(*self->request_));
            self->headers_sent_ = true;
          }
          self->send_framed(": keep-alive\n\n");
          self->last_stream_write_ns_ = now_ns();
        }
        self->schedule_heartbeat();
      });
}

void Connection::on_deliver(uint64_t exchange, std::string bytes) {
  if (exchange != exchange_ || !request_ || closed_) return;
  if (!headers_sent_) {
    send(stream_head(*request_));
    headers_sent_ = true;
  }
  send_framed(bytes);
  last_stream_write_ns_ = now_ns();
  if (outbox_.held_bytes() > static_cast<size_t>(state_->settings.max_stream_backlog_bytes))
    on_slow_client(exchange);
}

// The client reads the stream slower than it is made, by more than max_stream_backlog_bytes:
// the request is cancelled and the connection closed at once, so what was queued for it is
// freed (it could not read the error event behind it anyway).
void Connection::on_slow_client(uint64_t exchange) {
  if (exchange != exchange_ || !request_ || closed_) {
    slow_client_.store(false);  // that exchange is over; the next one starts with a clean slate
    return;
  }
  request_->cancel(make_error(503, "server_error",
                              "the client reads the stream too slowly (more than " +
                                  std::to_string(state_->settings.max_stream_backlog_bytes) +
                                  " bytes behind); the request was cancelled",
                              "slow_client"));
  outbox_.drop_queued();
  queued_bytes_.store(outbox_.held_bytes(), std::memory_order_relaxed);
  close();
}

// The client's side of the connection became readable while its request runs: more bytes (a
// pipelined request: leave them for later), an error (it reset the connection: it is gone), or
// the end of its stream. That end may be a half-close (shutdown(SHUT_WR) after the request),
// which is no disconnect: the answer still goes out. A client that closed altogether resets the
// connection at our next write, so a stream still waiting for its first event writes the stream
// head and a comment (which clients skip) at once, and any reset after that cancels the request.
void Connection::on_readable(beast::error_code error, uint64_t exchange) {
  if (exchange != exchange_ || !request_ || closed_) return;
  if (error == net::error::operation_aborted) return;
  boost::system::error_code status;
  size_t available = stream_.socket().available(status);
  if (!error && !status && available > 0) return;
  char probe;
  ssize_t read = ::recv(stream_.socket().native_handle(), &probe, 1, MSG_PEEK | MSG_DONTWAIT);
  if (error || status || read != 0) return client_gone();
  keep_alive_ = false;  // it can send no further request
  if (streaming_ && !headers_sent_) {
    send(stream_head(*request_));
    headers_sent_ = true;
    send_framed(": waiting for the first token\n\n");
    last_stream_write_ns_ = now_ns();
  }
  stream_.socket().async_wait(tcp::socket::wait_error,
                              [self = shared_from_this(), exchange](beast::error_code error) {
                                if (error == net::error::operation_aborted) return;
                                if (exchange != self->exchange_ || !self->request_) return;
                                self->client_gone();
                              });
}

void Connection::client_gone() {
  if (request_) {
    request_->cancel(make_error(499, "client_closed_request", "the client closed the connection",
                                "client_disconnected"));
  }
  gone_ = true;
  close();
}

void Connection::on_complete(uint64_t exchange, Outcome outcome) {
  if (exchange != exchange_ || !request_) return;
  std::shared_ptr<Request> request = std::move(request_);
  request_.reset();
  timer_.cancel();
  heartbeat_timer_.cancel();
  state_->untrack(request);
  const auto& error = request->error();
  int status = 200;
  if (gone_) {
    status = 499;
  } else if (closed_) {
    status = error ? error->status : 200;
  } else if (streaming_ && headers_sent_) {
    if (error) {
      send_framed(sink_->stream_error_event(*error));
    }
    if (http10_) {
      keep_alive_ = false;
    } else {
      send("0\r\n\r\n");
    }
  } else if (error) {
    status = error->status;
  } else if (streaming_) {
    // The pipeline ended without a single event (nothing to say): an empty, well-formed stream.
    send(stream_head(*request));
    if (!http10_) send("0\r\n\r\n");
  }

  if (!closed_ && !(streaming_ && headers_sent_) && (error || !streaming_)) {
    // A whole response: an error with its real status, or the non-streaming JSON.
    Response response =
        error ? error_response(*error, wire()) : Response(200, std::move(outcome.body));
    response.headers = request->response_headers();
    bool has_retry_after = false;
    for (const auto& [name, value] : response.headers)
      has_retry_after |= lowercase(name) == "retry-after";
    if (error && error->status == 503 && !has_retry_after) {
      response.headers.push_back({"Retry-After", std::to_string(state_->settings.retry_after_s)});
    }
    write_response(response, request->request_id);
  }
  state_->count_http(endpoint_, status);
  sink_->set_status(status);
  // The sink goes with the request (its on_released logs it); the pipeline thread may still be
  // returning from on_finish.
  sink_.reset();
  next_request();
}

}  // namespace chatflow::server
