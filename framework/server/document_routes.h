// /v1/documents: documents a user uploads into the serving pipeline's retrieval index (a
// `retrieval_index` resource with `uploads:`), owner-scoped as /v1/sessions are: a caller sees,
// retrieves from and deletes only their own; an admin may name another owner of their tenant
// (?user=U or ?key=ID). Uploads are multipart/form-data (a `file` part, optional `name`) or JSON
// {"name", "text"}.
#pragma once

#include "framework/server/routes.h"

namespace chatflow::server {

// Throw RequestFailure (OpenAI's error shape) for a refusal.
Response upload_document(const RouteCall& call);  // POST /v1/documents
Response list_documents(const RouteCall& call);   // GET /v1/documents
Response get_document(const RouteCall& call);     // GET /v1/documents/{id}
Response delete_document(const RouteCall& call);  // DELETE /v1/documents/{id}

// The parts of a multipart/form-data body (RFC 7578), or a 400 saying what is malformed.
struct FormPart {
  std::string name;      // the form field
  std::string filename;  // empty for a plain field
  std::string content_type;
  std::string body;
};
std::vector<FormPart> parse_form(std::string_view content_type, std::string_view body);

}  // namespace chatflow::server
