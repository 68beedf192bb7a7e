// The routing half of a connection: what the header alone decides (OPTIONS, the method,
// credentials, size and type of the body), then the route's answer once the body is in: a side
// endpoint (at once or on a worker), a reload, or a generation (generation_exchange.cpp).
#include <variant>

#include <boost/json.hpp>

#include "framework/anthropic/messages_protocol.h"
#include "framework/server/connection.h"
#include "framework/server/model_routing.h"

namespace chatflow::server {

// What can be answered from the header alone, before a byte of the body is read: OPTIONS, a
// wrong method, missing or bad credentials (so no unauthenticated body is ever parsed), a body
// too large, a body that is not JSON.
std::optional<EarlyAnswer> Connection::check_before_body(const http::request_header<>& header) {
  // A path may have a route per method (GET, PATCH and DELETE of /v1/sessions/{id}).
  route_ = &route_for_method(*route_, method_);
  const Route& route = *route_;
  std::string allowed = allowed_methods(route);
  auto refusal = [&route](const RequestError& error) {
    return EarlyAnswer{error_response(error, route.wire), error};
  };
  if (header.method() == http::verb::options) {
    Response response(204, "", "");
    response.headers = {{"Allow", allowed + ", OPTIONS"}};
    if (!cors_allowed_origin_.empty()) {
      response.headers.push_back({"Access-Control-Allow-Methods", allowed + ", OPTIONS"});
      response.headers.push_back({"Access-Control-Allow-Headers",
                                  "Authorization, Content-Type, X-Request-Id, OpenAI-Organization, "
                                  "OpenAI-Project, X-Stainless-*, X-Api-Key, Anthropic-Version, "
                                  "Anthropic-Beta"});
      response.headers.push_back({"Access-Control-Max-Age", "86400"});
    }
    return EarlyAnswer{response, std::nullopt};
  }
  if (method_ != route.method) {
    RequestError error = make_error(405, "invalid_request_error",
                                    method_ + " is not allowed on " + path_ + "; use " + allowed,
                                    "method_not_allowed");
    EarlyAnswer answer = refusal(error);
    answer.response.headers.push_back({"Allow", allowed + ", OPTIONS"});
    return answer;
  }
  served_ = state_->served_snapshot();
  call_.served = served_.get();
  // The metrics listener answers without credentials: it is meant for a scraper only.
  call_.public_path = metrics_only_ || (served_ && served_->authenticator &&
                                        served_->authenticator->is_public(path_));
  if (route.wire == Wire::anthropic) anthropic::adopt_api_key(headers_);
  if (served_ && served_->authenticator && !call_.public_path) {
    // Nothing here may wait: this is the connection's I/O thread. A generation that passes the
    // authenticator first in the pipeline may leave it the decision (a JWT whose key the key
    // set is being fetched for); the stage then waits without holding a thread.
    const Authenticator& authenticator = *served_->authenticator;
    // The Responses API needs its caller before the pipeline runs: previous_response_id is
    // looked up among the caller's own responses.
    // With `models:` the request may go to another pipeline, so it is decided here.
    bool pipeline_decides =
        route.kind == RouteKind::generation && route.wire != Wire::responses &&
        !state_->model_router && served_->pipeline &&
        dynamic_cast<const Authenticator*>(served_->pipeline->stage(0)) == &authenticator;
    try {
      if (!pipeline_decides) {
        call_.caller = authenticator.authenticate(headers_);
      } else if (auto caller = authenticator.authenticate_or_defer(headers_)) {
        call_.caller = std::move(*caller);
      }
    } catch (const RequestFailure& failure) {
      return refusal(failure.error());
    }
  }
  if (auto length = parser_->content_length();
      length && *length > static_cast<uint64_t>(state_->settings.max_body_bytes)) {
    return refusal(make_error(413, "invalid_request_error",
                              "the request body is " + std::to_string(*length) +
                                  " bytes; this server accepts at most " +
                                  std::to_string(state_->settings.max_body_bytes),
                              "request_too_large"));
  }
  bool has_body =
      !parser_->is_done() || parser_->content_length().value_or(0) > 0 || parser_->chunked();
  bool body_expected = header.method() == http::verb::post ||
                       header.method() == http::verb::patch ||
                       header.method() == http::verb::delete_;
  if (body_expected && !(route.body_optional && !has_body)) {
    std::string type = lowercase(header[http::field::content_type]);
    type = type.substr(0, type.find(';'));
    while (!type.empty() && type.back() == ' ')
      type.pop_back();
    if (route.multipart && type == "multipart/form-data") {
      call_.content_type = std::string(header[http::field::content_type]);  // with its boundary
    } else if (type != "application/json") {
      return refusal(make_error(
          415, "invalid_request_error",
          std::string("the body must be JSON sent with 'Content-Type: application/json'") +
              (route.multipart ? " or a form sent as multipart/form-data" : "") +
              (type.empty() ? std::string(" (no Content-Type was given)") : ", got '" + type + "'"),
          "unsupported_media_type"));
    }
  }
  return std::nullopt;
}

// Answers before the body was read: a connection whose body is still coming cannot be reused,
// so it lingers (reading and discarding) and closes.
void Connection::reject_early(const EarlyAnswer& answer) {
  if (!parser_->is_done()) {
    keep_alive_ = false;
    lingering_ = true;
  }
  std::string endpoint = route_ ? std::string(route_->pattern) : "other";
  respond(answer.response, endpoint, answer.error ? &*answer.error : nullptr);
}

void Connection::reject_early(const RequestError& error, const std::string& endpoint) {
  if (!parser_->is_done()) {
    keep_alive_ = false;
    lingering_ = true;
  }
  respond_error(error, endpoint);
}

void Connection::dispatch() {
  const Route& route = *route_;
  std::string endpoint(route.pattern);
  call_.client_address = client_.address;
  call_.request_id = request_id_;
  call_.metrics = &state_->metrics;
  call_.responses = &state_->responses;
  call_.dashboard_history = &state_->dashboard_history;
  call_.model_router = state_->model_router.get();
  call_.phase = state_->draining ? ServerPhase::draining
                : served_        ? ServerPhase::serving
                                 : ServerPhase::loading;
  if (route.needs_pipeline && !served_) {
    Response response =
        error_response(make_error(503, "server_error", "the model is still loading; retry shortly",
                                  "model_loading"),
                       route.wire);
    response.headers.push_back({"Retry-After", "1"});
    return respond(response, endpoint);
  }
  try {
    require_admin(route, call_);
    switch (route.kind) {
      case RouteKind::side:
        if (state_->model_router && routes_by_model(route)) return route_side_call(route, endpoint);
        if (route.off_io_thread) return run_on_worker(route, endpoint);
        return respond(route.endpoint(call_), endpoint);
      case RouteKind::reload:
        return reload(endpoint);
      case RouteKind::generation:
        if (state_->model_router) return route_generation(route.generation, endpoint);
        return start_generation(served_, route.generation, call_.body, endpoint);
    }
  } catch (const RequestFailure& failure) {
    return respond_error(failure.error(), endpoint);
  } catch (const std::exception& failure) {
    // Never out of the I/O handler: that would end the process.
    return respond_error(make_error(500, "server_error", failure.what(), "internal_error"),
                         endpoint);
  }
}

// Runs a side endpoint on the server's workers and answers back on this connection's strand.
// The connection holds the pipeline snapshot the call points into until then.
void Connection::run_on_worker(const Route& route, const std::string& endpoint) {
  auto self = shared_from_this();
  bool queued = state_->workers.submit([self, &route, endpoint] {
    std::variant<Response, RequestError> answer = RequestError{};
    try {
      answer = route.endpoint(self->call_);
    } catch (const RequestFailure& failure) {
      answer = failure.error();
    } catch (const std::exception& error) {
      answer = make_error(500, "server_error", error.what(), "internal_error");
    }
    net::post(self->stream_.get_executor(), [self, endpoint, answer = std::move(answer)] {
      if (self->closed_) return;
      if (const auto* error = std::get_if<RequestError>(&answer)) {
        return self->respond_error(*error, endpoint);
      }
      self->respond(std::get<Response>(answer), endpoint);
    });
  });
  if (!queued) {
    Response busy = error_response(make_error(503, "server_error",
                                              "too many requests wait for a worker; retry shortly",
                                              "server_overloaded"));
    busy.headers.push_back({"Retry-After", std::to_string(state_->settings.retry_after_s)});
    respond(busy, endpoint);
  }
}

// POST /admin/reload: admins rebuild the pipeline from its configuration; answered once the new
// pipeline serves, or with the configuration's errors (file:line:column) while the old one
// keeps serving.
void Connection::reload(const std::string& endpoint) {
  if (!state_->reloader) {
    throw RequestFailure(make_error(404, "invalid_request_error",
                                    "this server was not started with a reloadable "
                                    "configuration",
                                    "not_found"));
  }
  auto self = shared_from_this();
  state_->in_background([self, endpoint] {
    auto outcome = self->state_->reload();
    net::post(self->stream_.get_executor(), [self, outcome, endpoint] {
      if (self->closed_) return;
      if (!outcome.ok) {
        return self->respond_error(
            make_error(400, "invalid_request_error",
                       "the new configuration was not applied; the old pipeline keeps "
                       "serving:\n" +
                           outcome.error,
                       "invalid_config"),
            endpoint);
      }
      boost::json::array reused;
      for (const auto& name : outcome.reused)
        reused.push_back(boost::json::string(name));
      boost::json::object answer{
          {"reloaded", true}, {"pipeline", outcome.pipeline}, {"resources_kept", reused}};
      if (outcome.tls) {
        boost::json::object tls{{"reloaded", outcome.tls->ok},
                                {"certificate", outcome.tls->certificate}};
        if (!outcome.tls->ok) tls["error"] = outcome.tls->error;
        answer["tls"] = std::move(tls);
      }
      self->respond(Response(200, boost::json::serialize(answer)), endpoint);
    });
  });
}

}  // namespace chatflow::server
