// The chat page and the dashboard as files: GET / (index.html), GET /dashboard (dashboard.html)
// and GET /assets/<file> from a web root built by web/build.mjs. They carry no data, so no
// credentials are asked; the pages' own API calls carry the key.
//
// Every file of the web root is read, hashed and gzipped (level 9) once, when the server starts,
// so a request does no file reading or compressing. Each request still stats its file: a file
// whose size, modification time or inode moved is read again (gzip level 6, on the I/O thread: a
// rebuild is rare and the files are small), a file gone is dropped from memory and is 404. A
// file that changes while it is read (its stat before and after differ, or the bytes read are
// not its size) is served as read but not kept. An edit in place (same inode) that keeps both
// size and modification time is not seen until the next restart; an edit that only touches
// the time keeps its ETag, which is the content's hash.
#pragma once

#include <cstdint>
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

  // Whether `name` ("index.html", "assets/chat-1A2B3C4D.js") is held in memory (for the tests).
  bool cached(const std::string& name) const;

  // True for paths this class answers, whatever the method.
  static bool owns(std::string_view path);

 private:
  // One stat(2) of the file: the inode tells a file renamed over it (as web/build.mjs does)
  // from the one before, even with the same size and time.
  struct Stat {
    int64_t modified_s = 0;
    int64_t modified_ns = 0;
    uint64_t size = 0;
    uint64_t inode = 0;
    bool operator==(const Stat&) const = default;
  };
  struct File {
    std::string body;
    std::string gzipped;  // empty when compressing does not pay (or the type is binary)
    std::string etag;     // of the identity body; the gzipped one adds "-gz"
    std::string content_type;
    Stat stat;  // as it was when `body` was read
  };

  // The file's stat when it is a regular file whose real location is inside the root.
  std::optional<Stat> locate(const std::string& name, std::filesystem::path& real) const;
  std::shared_ptr<const File> load(const std::string& name, int gzip_level) const;
  std::shared_ptr<const File> make(const std::string& name, std::string body, const Stat& stat,
                                   const File* previous, int gzip_level) const;
  void forget(const std::string& name) const;
  Response serve(const File& file, const std::string& name, const HeaderFields& headers) const;

  std::filesystem::path root_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, std::shared_ptr<const File>> files_;
};

// Exposed for the tests.
namespace static_detail {
std::string gzip(std::string_view bytes, int level = 9);
std::string gunzip(std::string_view bytes);
bool accepts_gzip(std::string_view accept_encoding);
// An /assets/ name whose stem ends in "-<8 or more letters and digits>": its content never
// changes under that name, so it may be cached for a year.
bool is_hashed_name(std::string_view name);
std::string content_type_of(std::string_view name);
}  // namespace static_detail

}  // namespace chatflow::server
