#include "framework/server/document_routes.h"

#include <algorithm>

#include <boost/json.hpp>

#include "framework/chat/request_body.h"
#include "framework/retrieval/owned_documents.h"
#include "framework/text/utf8.h"

namespace chatflow::server {
namespace json = boost::json;
using chat::request_body::Fields;
using chat::request_body::invalid;
using chat::request_body::kind_of;
namespace {

std::string decoded(std::string_view text) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && hex(text[i + 1]) >= 0 && hex(text[i + 2]) >= 0) {
      out += static_cast<char>(hex(text[i + 1]) * 16 + hex(text[i + 2]));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

// The uploads of the serving pipeline's first retrieval_index that takes them, or the 404 every
// documents route answers without one.
retrieval::OwnedDocuments& documents_of(const RouteCall& call) {
  const auto& pipeline = *call.served->pipeline;
  for (const auto& resource : pipeline.spec().resources) {
    auto object = pipeline.resource(resource.name);
    const auto* provider = dynamic_cast<const retrieval::OwnedDocumentsProvider*>(object.get());
    if (provider && provider->owned_documents()) return *provider->owned_documents();
  }
  throw RequestFailure(make_error(404, "invalid_request_error",
                                  "this pipeline takes no document uploads (add 'uploads: {}' to "
                                  "a retrieval_index resource, and a hybrid_retrieval stage "
                                  "reading it)",
                                  "not_found"));
}

// Whose documents a call means: the caller's own, or for an admin the user (?user=U) or the key
// without a user (?key=ID) of their tenant — as for sessions.
retrieval::DocumentOwner document_owner(const RouteCall& call) {
  std::string user = decoded(query_value(call.query, "user"));
  std::string key = decoded(query_value(call.query, "key"));
  if (user.empty() && key.empty()) {
    if (call.served->authenticator && call.caller.owner().empty()) {
      throw RequestFailure(make_error(403, "permission_error",
                                      "your credential names no user, so there are no documents "
                                      "of yours: uploads need a token with a user claim or an "
                                      "API key",
                                      "no_document_owner"));
    }
    return {call.caller.tenant, call.caller.owner()};
  }
  if (call.served->authenticator && !call.caller.has_role("admin")) {
    throw RequestFailure(make_error(403, "permission_error",
                                    "only admins may read another user's documents", "forbidden"));
  }
  return {call.caller.tenant, !user.empty() ? "user:" + user : "key:" + key};
}

json::object document_json(const retrieval::UploadedDocument& document) {
  return {{"id", document.id},
          {"object", "document"},
          {"name", document.name},
          {"content_type", document.content_type},
          {"bytes", document.bytes},
          {"chunks", document.chunks},
          {"created_at", document.created_at}};
}

[[noreturn]] void no_document(const std::string& id) {
  throw RequestFailure(make_error(404, "invalid_request_error",
                                  "no document '" + text::repair(id) + "'", "document_not_found",
                                  "id"));
}

// A header's parameter (`boundary`, `name`, `filename`), unquoted; empty when absent.
std::string header_parameter(std::string_view header, std::string_view name) {
  size_t at = 0;
  while ((at = header.find(';', at)) != std::string_view::npos) {
    ++at;
    while (at < header.size() && header[at] == ' ')
      ++at;
    size_t equals = header.find('=', at);
    if (equals == std::string_view::npos) return {};
    std::string key(header.substr(at, equals - at));
    std::transform(key.begin(), key.end(), key.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    size_t value_start = equals + 1;
    std::string value;
    if (value_start < header.size() && header[value_start] == '"') {
      size_t end = value_start + 1;
      while (end < header.size() && header[end] != '"') {
        if (header[end] == '\\' && end + 1 < header.size()) ++end;
        value += header[end++];
      }
    } else {
      size_t end = std::min(header.find(';', value_start), header.size());
      value = std::string(header.substr(value_start, end - value_start));
      while (!value.empty() && value.back() == ' ')
        value.pop_back();
    }
    if (key == name) return value;
  }
  return {};
}

struct Upload {
  std::string name;
  std::string content_type;
  std::string text;
};

Upload upload_of_form(const RouteCall& call) {
  std::vector<FormPart> parts = parse_form(call.content_type, call.body);
  Upload upload;
  const FormPart* file = nullptr;
  for (const auto& part : parts) {
    if (part.name == "file") {
      if (file) invalid("the form has more than one 'file': upload one document at a time", "file");
      file = &part;
    } else if (part.name == "name") {
      upload.name = part.body;
    } else if (part.name != "purpose") {  // OpenAI's file uploads send one; nothing to do here
      invalid("the form has a field '" + text::repair(part.name) +
                  "'; it takes 'file' (the document) and optionally 'name'",
              part.name);
    }
  }
  if (!file) invalid("the form has no 'file' part: send the document as file=@NAME", "file");
  if (upload.name.empty()) upload.name = file->filename;
  upload.content_type = file->content_type;
  upload.text = file->body;
  return upload;
}

Upload upload_of_json(const RouteCall& call) {
  json::value body = chat::request_body::parse_object(call.body);
  Fields fields(body.as_object());
  Upload upload;
  const json::value* text = fields.get("text");
  if (!text) invalid("'text' is required: the document's text", "text");
  if (!text->is_string())
    invalid("'text' must be a string, got " + std::string(kind_of(*text)), "text");
  upload.text = std::string(text->as_string());
  upload.name = fields.string("name", "");
  upload.content_type = fields.string("content_type", "");
  if (upload.content_type.empty()) upload.content_type = "text/plain";
  fields.refuse_unread({});
  return upload;
}

}  // namespace

std::vector<FormPart> parse_form(std::string_view content_type, std::string_view body) {
  std::string boundary = header_parameter(content_type, "boundary");
  if (boundary.empty()) invalid("the multipart/form-data Content-Type names no boundary", "file");
  std::string delimiter = "--" + boundary;
  size_t at = body.find(delimiter);
  if (at == std::string_view::npos)
    invalid("the form body does not contain its boundary '" + boundary + "'", "file");
  std::vector<FormPart> parts;
  while (true) {
    at += delimiter.size();
    if (body.substr(at, 2) == "--") return parts;  // the closing delimiter
    if (body.substr(at, 2) != "\r\n")
      invalid("the form body is malformed after a boundary", "file");
    at += 2;
    size_t headers_end = body.find("\r\n\r\n", at);
    if (headers_end == std::string_view::npos)
      invalid("a form part has no end of its headers", "file");
    FormPart part;
    std::string_view headers = body.substr(at, headers_end - at);
    for (size_t line_start = 0; line_start < headers.size();) {
      size_t line_end = std::min(headers.find("\r\n", line_start), headers.size());
      std::string_view line = headers.substr(line_start, line_end - line_start);
      line_start = line_end + 2;
      size_t colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      std::string field(line.substr(0, colon));
      std::transform(field.begin(), field.end(), field.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      std::string_view value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ')
        value.remove_prefix(1);
      if (field == "content-disposition") {
        part.name = header_parameter(value, "name");
        part.filename = header_parameter(value, "filename");
      } else if (field == "content-type") {
        part.content_type = std::string(value);
      }
    }
    size_t body_start = headers_end + 4;
    size_t next = body.find("\r\n" + delimiter, body_start);
    if (next == std::string_view::npos)
      invalid("the form body ends before its closing boundary (was it cut short?)", "file");
    part.body = std::string(body.substr(body_start, next - body_start));
    parts.push_back(std::move(part));
    at = next + 2;
  }
}

Response upload_document(const RouteCall& call) {
  retrieval::OwnedDocuments& documents = documents_of(call);
  retrieval::DocumentOwner owner = document_owner(call);
  Upload upload = call.content_type.empty() ? upload_of_json(call) : upload_of_form(call);
  retrieval::UploadedDocument document =
      documents.upload(owner, upload.name, upload.content_type, upload.text);
  return Response(200, json::serialize(document_json(document)));
}

Response list_documents(const RouteCall& call) {
  retrieval::OwnedDocuments& documents = documents_of(call);
  retrieval::DocumentOwner owner = document_owner(call);
  json::array data;
  int64_t bytes = 0;
  for (const auto& document : documents.documents_of(owner)) {
    bytes += document.bytes;
    data.push_back(document_json(document));
  }
  const retrieval::UploadLimits& limits = documents.limits();
  json::array accepted;
  for (const auto& type : documents.accepted_types())
    accepted.push_back(json::string(type));
  return Response(200, json::serialize(json::object{
                           {"object", "list"},
                           {"data", std::move(data)},
                           {"bytes", bytes},
                           {"limits",
                            {{"max_bytes", limits.max_bytes},
                             {"max_documents_per_owner", limits.max_documents_per_owner},
                             {"max_bytes_per_owner", limits.max_bytes_per_owner},
                             {"accepted_types", std::move(accepted)}}}}));
}

Response get_document(const RouteCall& call) {
  retrieval::OwnedDocuments& documents = documents_of(call);
  std::string id = decoded(call.parameter);
  std::string text;
  std::vector<retrieval::ChunkSpan> chunks;
  auto found = documents.document(document_owner(call), id, &text, &chunks);
  if (!found) no_document(id);
  json::object object = document_json(*found);
  object["text"] = text;
  json::array offsets;
  for (const auto& chunk : chunks) {
    offsets.push_back(json::object{{"chunk", chunk.chunk},
                                   {"start", static_cast<int64_t>(chunk.start)},
                                   {"end", static_cast<int64_t>(chunk.end)}});
  }
  object["chunk_offsets"] = std::move(offsets);
  return Response(200, json::serialize(object));
}

Response delete_document(const RouteCall& call) {
  retrieval::OwnedDocuments& documents = documents_of(call);
  std::string id = decoded(call.parameter);
  if (!documents.remove(document_owner(call), id)) no_document(id);
  return Response(200, json::serialize(json::object{
                           {"id", id}, {"object", "document.deleted"}, {"deleted", true}}));
}

}  // namespace chatflow::server
