#include "framework/server/static_files.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <zlib.h>

namespace chatflow::server {
namespace {

namespace fs = std::filesystem;

// The pages run only their own bundled scripts and styles: no inline code, nothing from
// elsewhere, no plugins, no framing. The model's answers are sanitised too; this is the net
// under that.
constexpr std::string_view kContentSecurityPolicy =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
    "form-action 'self'";

fs::path executable_directory() {
  std::error_code error;
  fs::path self = fs::read_symlink("/proc/self/exe", error);
  return error ? fs::current_path(error) : self.parent_path();
}

Response not_found(std::string_view path) {
  return error_response(make_error(404, "invalid_request_error",
                                   "no route for GET " + std::string(path), "not_found"));
}

std::string_view header_value(const HeaderFields& headers, std::string_view name) {
  for (const auto& [key, value] : headers)
    if (key == name) return value;
  return {};
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The percent-decoded asset name, or nullopt unless it is one plain file name: letters,
// digits, '.', '_' and '-', not starting with a dot. That refuses '..', '/', '\', NUL and
// absolute paths however they are encoded.
std::optional<std::string> asset_name(std::string_view raw) {
  std::string name;
  for (size_t i = 0; i < raw.size(); ++i) {
    char c = raw[i];
    if (c == '%') {
      int high = i + 1 < raw.size() ? hex_digit(raw[i + 1]) : -1;
      int low = i + 2 < raw.size() ? hex_digit(raw[i + 2]) : -1;
      if (high < 0 || low < 0) return std::nullopt;
      c = static_cast<char>(high * 16 + low);
      i += 2;
    }
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
    if (!plain) return std::nullopt;
    name += c;
  }
  if (name.empty() || name.front() == '.') return std::nullopt;
  return name;
}

// FNV-1a over the bytes: an ETag only has to change when the file does.
std::string content_hash(std::string_view bytes) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  char text[24];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

bool compressible(std::string_view type) {
  return type.starts_with("text/") || type.starts_with("application/javascript") ||
         type.starts_with("application/json") || type.starts_with("image/svg+xml");
}

// True when `If-None-Match` lists `etag` (or is "*"); weak validators compare alike.
bool etag_matches(std::string_view if_none_match, std::string_view etag) {
  if (if_none_match.empty()) return false;
  std::string list(if_none_match);
  std::stringstream parts(list);
  std::string tag;
  while (std::getline(parts, tag, ',')) {
    size_t begin = tag.find_first_not_of(" \t");
    if (begin == std::string::npos) continue;
    tag = tag.substr(begin, tag.find_last_not_of(" \t") - begin + 1);
    if (tag == "*") return true;
    if (tag.starts_with("W/")) tag = tag.substr(2);
    if (tag == etag) return true;
  }
  return false;
}

}  // namespace

namespace static_detail {

std::string gzip(std::string_view bytes, int level) {
  z_stream stream{};
  // 15 + 16: a gzip wrapper rather than zlib's own.
  if (deflateInit2(&stream, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return {};
  std::string out(deflateBound(&stream, bytes.size()) + 32, '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  stream.avail_in = static_cast<uInt>(bytes.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  int result = deflate(&stream, Z_FINISH);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return result == Z_STREAM_END ? out : std::string();
}

std::string gunzip(std::string_view bytes) {
  z_stream stream{};
  if (inflateInit2(&stream, 15 + 16) != Z_OK) return {};
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  stream.avail_in = static_cast<uInt>(bytes.size());
  std::string out;
  std::array<char, 16384> buffer;
  int result = Z_OK;
  while (result == Z_OK) {
    stream.next_out = reinterpret_cast<Bytef*>(buffer.data());
    stream.avail_out = buffer.size();
    result = inflate(&stream, Z_NO_FLUSH);
    out.append(buffer.data(), buffer.size() - stream.avail_out);
  }
  inflateEnd(&stream);
  return result == Z_STREAM_END ? out : std::string();
}

bool accepts_gzip(std::string_view accept_encoding) {
  std::string list = lowercase(accept_encoding);
  std::stringstream parts(list);
  std::string item;
  bool any = false;
  bool gzip = false;
  bool gzip_refused = false;
  while (std::getline(parts, item, ',')) {
    size_t semicolon = item.find(';');
    std::string coding = item.substr(0, semicolon);
    coding.erase(0, coding.find_first_not_of(" \t"));
    coding.erase(coding.find_last_not_of(" \t") + 1);
    bool refused = false;
    if (semicolon != std::string::npos) {
      std::string params = item.substr(semicolon + 1);
      size_t q = params.find("q=");
      if (q != std::string::npos) refused = std::strtod(params.c_str() + q + 2, nullptr) <= 0;
    }
    if (coding == "gzip" || coding == "x-gzip") (refused ? gzip_refused : gzip) = true;
    if (coding == "*" && !refused) any = true;
  }
  return gzip || (any && !gzip_refused);
}

bool is_hashed_name(std::string_view name) {
  size_t dot = name.find('.');
  std::string_view stem = name.substr(0, dot);
  size_t dash = stem.rfind('-');
  if (dash == std::string_view::npos) return false;
  std::string_view hash = stem.substr(dash + 1);
  if (hash.size() < 8) return false;
  for (char c : hash) {
    bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum) return false;
  }
  return true;
}

std::string content_type_of(std::string_view name) {
  static const std::pair<std::string_view, std::string_view> kTypes[] = {
      {".html", "text/html; charset=utf-8"},
      {".js", "application/javascript; charset=utf-8"},
      {".mjs", "application/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".json", "application/json"},
      {".map", "application/json"},
      {".svg", "image/svg+xml"},
      {".png", "image/png"},
      {".jpg", "image/jpeg"},
      {".jpeg", "image/jpeg"},
      {".gif", "image/gif"},
      {".webp", "image/webp"},
      {".ico", "image/x-icon"},
      {".woff2", "font/woff2"},
      {".woff", "font/woff"},
      {".txt", "text/plain; charset=utf-8"},
  };
  for (const auto& [extension, type] : kTypes)
    if (name.ends_with(extension)) return std::string(type);
  return "application/octet-stream";
}

}  // namespace static_detail

StaticFiles::StaticFiles(std::string root)
    : root_(root.empty() ? executable_directory() / "web" : fs::path(root)) {
  // Everything now, at the best compression: requests then only stat.
  std::error_code error;
  if (!fs::is_directory(root_, error)) return;
  load("index.html", 9);
  load("dashboard.html", 9);
  for (fs::directory_iterator it(root_ / "assets", error), end; !error && it != end;
       it.increment(error)) {
    std::string file = it->path().filename().string();
    if (auto asset = asset_name(file); asset && *asset == file) load("assets/" + file, 9);
  }
}

bool StaticFiles::owns(std::string_view path) {
  return path == "/" || path == "/index.html" || path == "/dashboard" ||
         path == "/dashboard.html" || path.starts_with("/assets/");
}

bool StaticFiles::cached(const std::string& name) const {
  std::lock_guard lock(mutex_);
  return files_.contains(name);
}

std::optional<Response> StaticFiles::answer(std::string_view method, std::string_view path,
                                            const HeaderFields& headers) const {
  if (!owns(path)) return std::nullopt;
  if (method != "GET" && method != "HEAD") {
    Response refusal = error_response(
        make_error(405, "invalid_request_error",
                   std::string(method) + " is not allowed on " + std::string(path) + "; use GET",
                   "method_not_allowed"));
    refusal.headers.push_back({"Allow", "GET, HEAD"});
    return refusal;
  }
  std::string name;
  if (path == "/" || path == "/index.html") {
    name = "index.html";
  } else if (path == "/dashboard" || path == "/dashboard.html") {
    name = "dashboard.html";
  } else {
    auto asset = asset_name(path.substr(std::string_view("/assets/").size()));
    if (!asset) return not_found(path);
    name = "assets/" + *asset;
  }
  std::error_code error;
  if (!fs::is_directory(root_, error)) {
    if (name.starts_with("assets/")) return not_found(path);
    return error_response(make_error(
        404, "invalid_request_error",
        "the web UI was not built: " + (root_ / name).string() +
            " does not exist. Install Node.js and npm, then re-run cmake and rebuild "
            "(the 'web' target runs npm ci and node web/build.mjs), or set server.web_root "
            "in the serve file to a folder built by web/build.mjs. The API works without it.",
        "web_ui_not_built"));
  }
  auto file = load(name, 6);
  if (!file) return not_found(path);
  // HEAD keeps the body: the connection writes its Content-Length and leaves the bytes out.
  return serve(*file, name, headers);
}

std::optional<StaticFiles::Stat> StaticFiles::locate(const std::string& name,
                                                     fs::path& real) const {
  std::error_code error;
  // Only regular files whose real location stays inside the root (no symlink leads out).
  real = fs::weakly_canonical(root_ / name, error);
  fs::path real_root = fs::weakly_canonical(root_, error);
  if (error || !fs::is_regular_file(real, error)) return std::nullopt;
  auto [end, _] = std::mismatch(real_root.begin(), real_root.end(), real.begin(), real.end());
  if (end != real_root.end()) return std::nullopt;
  struct stat info {};
  if (::stat(real.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) return std::nullopt;
  return Stat{static_cast<int64_t>(info.st_mtim.tv_sec), static_cast<int64_t>(info.st_mtim.tv_nsec),
              static_cast<uint64_t>(info.st_size), static_cast<uint64_t>(info.st_ino)};
}

void StaticFiles::forget(const std::string& name) const {
  std::lock_guard lock(mutex_);
  files_.erase(name);
}

std::shared_ptr<const StaticFiles::File> StaticFiles::load(const std::string& name,
                                                           int gzip_level) const {
  fs::path real;
  auto stat = locate(name, real);
  if (!stat) {
    forget(name);
    return nullptr;
  }
  std::shared_ptr<const File> previous;
  {
    std::lock_guard lock(mutex_);
    auto cached = files_.find(name);
    if (cached != files_.end()) {
      if (cached->second->stat == *stat) return cached->second;
      previous = cached->second;
    }
  }
  // Changed or new. A writer may be at it right now: the bytes count as the file only when the
  // stat is the same before and after reading and the size matches; a few tries, then what was
  // read is served once and not kept.
  std::string body;
  bool settled = false;
  for (int attempt = 0; attempt < 3 && !settled; ++attempt) {
    std::ifstream in(real, std::ios::binary);
    if (!in) {
      forget(name);
      return nullptr;
    }
    body.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    in.close();
    auto after = locate(name, real);
    if (!after) {
      forget(name);
      return nullptr;
    }
    settled = *after == *stat && body.size() == stat->size;
    stat = after;
  }
  if (!settled) return make(name, std::move(body), *stat, nullptr, 0);
  auto file = make(name, std::move(body), *stat, previous.get(), gzip_level);
  std::lock_guard lock(mutex_);
  files_[name] = file;
  return file;
}

// `gzip_level` 0: no compression (a file served once and not kept).
std::shared_ptr<const StaticFiles::File> StaticFiles::make(const std::string& name,
                                                           std::string body, const Stat& stat,
                                                           const File* previous,
                                                           int gzip_level) const {
  auto file = std::make_shared<File>();
  file->stat = stat;
  file->content_type = static_detail::content_type_of(name);
  file->etag = "\"" + content_hash(body) + "\"";
  // Only the time moved (a touch, a rebuild that wrote the same bytes): the same ETag and the
  // gzip already made.
  if (previous && previous->etag == file->etag && previous->body == body) {
    file->gzipped = previous->gzipped;
  } else if (gzip_level > 0 && compressible(file->content_type) && body.size() > 256) {
    std::string packed = static_detail::gzip(body, gzip_level);
    if (!packed.empty() && packed.size() < body.size()) file->gzipped = std::move(packed);
  }
  file->body = std::move(body);
  return file;
}

Response StaticFiles::serve(const File& file, const std::string& name,
                            const HeaderFields& headers) const {
  bool gzipped = !file.gzipped.empty() &&
                 static_detail::accepts_gzip(header_value(headers, "accept-encoding"));
  std::string etag = gzipped ? file.etag.substr(0, file.etag.size() - 1) + "-gz\"" : file.etag;
  bool immutable = name.starts_with("assets/") && static_detail::is_hashed_name(name.substr(7));
  HeaderFields out;
  out.push_back({"Cache-Control", immutable ? "public, max-age=31536000, immutable" : "no-cache"});
  out.push_back({"ETag", etag});
  if (!file.gzipped.empty()) out.push_back({"Vary", "Accept-Encoding"});
  out.push_back({"X-Content-Type-Options", "nosniff"});
  if (name.ends_with(".html")) {
    out.push_back({"Content-Security-Policy", std::string(kContentSecurityPolicy)});
    out.push_back({"Referrer-Policy", "no-referrer"});
    out.push_back({"X-Frame-Options", "DENY"});
  }
  if (etag_matches(header_value(headers, "if-none-match"), etag)) {
    Response response(304, "", "");
    response.headers = std::move(out);
    return response;
  }
  if (gzipped) out.push_back({"Content-Encoding", "gzip"});
  Response response(200, gzipped ? file.gzipped : file.body, file.content_type);
  response.headers = std::move(out);
  return response;
}

}  // namespace chatflow::server
