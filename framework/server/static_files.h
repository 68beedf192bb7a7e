// The chat page and the dashboard as files: GET / (index.html), GET /dashboard (dashboard.html)
// and GET /assets/<file> from a web root built by web/build.mjs. They carry no data, so no
// credentials are asked; the pages' own API calls carry the key. Each file is read, hashed and
// gzipped once and kept in memory until it changes on disk.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "framework/api/request.h"
#include "framework/server/http_response.h"

namespace chatflow::server {

class StaticFiles {
 public:
  // `root` empty: the folder `web` beside the running executable.
  explicit StaticFiles(std::string root);

  // The answer for a web UI path; nullopt for any other path (the route table's business).
  // `headers` are the request's, names lowercase.
  std::optional<Response> answer(std::string_view method, std::string_view path,
                                 const HeaderFields& headers) const;

  const std::filesystem::path& root() const { return root_; }

  // True for paths this class answers, whatever the method.
  static bool owns(std::string_view path);

 private:
  struct File {
    std::string body;
    std::string gzipped;  // empty when compressing does not pay (or the type is binary)
    std::string etag;     // of the identity body; the gzipped one adds "-gz"
    std::string content_type;
    std::filesystem::file_time_type modified;
    uintmax_t size = 0;
  };

  std::shared_ptr<const File> load(const std::string& name) const;
  Response serve(const File& file, const std::string& name, const HeaderFields& headers) const;

  std::filesystem::path root_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, std::shared_ptr<const File>> files_;
};

// Exposed for the tests.
namespace static_detail {
std::string gzip(std::string_view bytes);
std::string gunzip(std::string_view bytes);
bool accepts_gzip(std::string_view accept_encoding);
// An /assets/ name whose stem ends in "-<8 or more letters and digits>": its content never
// changes under that name, so it may be cached for a year.
bool is_hashed_name(std::string_view name);
std::string content_type_of(std::string_view name);
}  // namespace static_detail

}  // namespace chatflow::server
