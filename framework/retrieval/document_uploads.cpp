#include "framework/retrieval/document_uploads.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <sys/file.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <xapian.h>

#include "framework/api/request.h"
#include "framework/text/utf8.h"

namespace chatflow::retrieval {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

[[noreturn]] void refuse(int status, const std::string& message, const std::string& code,
                         const std::string& param = {}) {
  throw RequestFailure(RequestError{
      status, status == 503 ? "server_error" : "invalid_request_error", message, code, param});
}

std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

std::string accepted_list() {
  std::string list;
  for (const auto& type : accepted_upload_types())
    list += (list.empty() ? "" : ", ") + type;
  return list;
}

std::string type_of_extension(const std::string& name) {
  std::string extension = lowercase(fs::path(name).extension().string());
  if (extension == ".txt" || extension == ".text" || extension == ".log") return "text/plain";
  if (extension == ".md" || extension == ".markdown") return "text/markdown";
  if (extension == ".csv") return "text/csv";
  if (extension == ".html" || extension == ".htm") return "text/html";
  if (extension == ".json") return "application/json";
  return {};
}

// The text of an HTML page: scripts and styles dropped, tags become spaces, the common entities
// decoded. Enough to retrieve from; not a renderer.
std::string html_text(std::string_view html) {
  std::string text;
  size_t at = 0;
  auto lower_at = [&](size_t position, std::string_view word) {
    if (position + word.size() > html.size()) return false;
    for (size_t i = 0; i < word.size(); ++i) {
      if (std::tolower(static_cast<unsigned char>(html[position + i])) != word[i]) return false;
    }
    return true;
  };
  while (at < html.size()) {
    char c = html[at];
    if (c == '<') {
      for (std::string_view element : {"script", "style"}) {
        if (lower_at(at + 1, element)) {
          std::string closing = "</" + std::string(element);
          size_t end = at;
          while (end < html.size() && !lower_at(end, closing))
            ++end;
          at = end;
        }
      }
      size_t close = html.find('>', at);
      at = close == std::string_view::npos ? html.size() : close + 1;
      text += ' ';
      continue;
    }
    if (c == '&') {
      static const std::pair<std::string_view, std::string_view> entities[] = {
          {"&amp;", "&"},   {"&lt;", "<"},  {"&gt;", ">"},
          {"&quot;", "\""}, {"&#39;", "'"}, {"&nbsp;", " "}};
      bool decoded = false;
      for (const auto& [entity, replacement] : entities) {
        if (html.substr(at, entity.size()) == entity) {
          text += replacement;
          at += entity.size();
          decoded = true;
          break;
        }
      }
      if (decoded) continue;
    }
    text += c;
    ++at;
  }
  return text;
}

std::string new_document_id() {
  static std::mutex mutex;
  static std::mt19937_64 generator{std::random_device{}()};
  std::lock_guard lock(mutex);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(generator()));
  return std::string("doc-") + hex;
}

json::object document_json(const UploadedDocument& document) {
  return {{"id", document.id},
          {"name", document.name},
          {"content_type", document.content_type},
          {"bytes", document.bytes},
          {"chunks", document.chunks},
          {"created_at", document.created_at},
          {"tenant", document.owner.tenant},
          {"owner", document.owner.owner}};
}

UploadedDocument document_of(const json::object& object) {
  UploadedDocument document;
  document.id = std::string(object.at("id").as_string());
  document.name = std::string(object.at("name").as_string());
  document.content_type = std::string(object.at("content_type").as_string());
  document.bytes = object.at("bytes").to_number<int64_t>();
  document.chunks = object.at("chunks").to_number<int64_t>();
  document.created_at = object.at("created_at").to_number<int64_t>();
  document.owner.tenant = std::string(object.at("tenant").as_string());
  document.owner.owner = std::string(object.at("owner").as_string());
  return document;
}

bool same_owner(const DocumentOwner& a, const DocumentOwner& b) {
  return a.tenant == b.tenant && a.owner == b.owner;
}

// The name as shown and cited: its last path component, trimmed.
std::string clean_name(const std::string& name) {
  std::string base = name.substr(name.find_last_of("/\\") + 1);
  size_t begin = base.find_first_not_of(" \t\r\n");
  size_t end = base.find_last_not_of(" \t\r\n");
  return begin == std::string::npos ? std::string() : base.substr(begin, end - begin + 1);
}

}  // namespace

const std::vector<std::string>& accepted_upload_types() {
  static const std::vector<std::string> types{"text/plain", "text/markdown", "text/csv",
                                              "text/html", "application/json"};
  return types;
}

std::string upload_type(const std::string& name, const std::string& declared) {
  std::string type = lowercase(declared.substr(0, declared.find(';')));
  while (!type.empty() && type.back() == ' ')
    type.pop_back();
  if (type == "text/x-markdown") type = "text/markdown";
  const auto& accepted = accepted_upload_types();
  if (std::find(accepted.begin(), accepted.end(), type) != accepted.end()) return type;
  if (type.empty() || type == "application/octet-stream") {
    std::string by_name = type_of_extension(name);
    if (!by_name.empty()) return by_name;
    refuse(415,
           "cannot tell the type of '" + name + "'" +
               (type.empty() ? std::string(" (no type was given)") : " (" + type + ")") +
               "; accepted: " + accepted_list() +
               " (or a file named .txt, .md, .csv, .html or .json)",
           "unsupported_media_type", "file");
  }
  refuse(415, "'" + name + "' is " + type + "; uploads must be text: " + accepted_list(),
         "unsupported_media_type", "file");
}

std::string upload_text(const std::string& type, std::string_view body) {
  if (body.starts_with("\xEF\xBB\xBF")) body.remove_prefix(3);
  if (body.find('\0') != std::string_view::npos) {
    refuse(415,
           "the file holds binary data (a NUL byte at offset " + std::to_string(body.find('\0')) +
               "); uploads must be text: " + accepted_list(),
           "unsupported_media_type", "file");
  }
  if (auto invalid = text::first_invalid_byte(body)) {
    refuse(400,
           "the file is not UTF-8 text: byte " + std::to_string(*invalid) +
               " is not part of a valid UTF-8 sequence (save it as UTF-8 and upload it again)",
           "invalid_encoding", "file");
  }
  std::string text = type == "text/html" ? html_text(body) : std::string(body);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    refuse(400, "the document has no text", "empty_document", "file");
  return text;
}

DocumentUploads::DocumentUploads(std::string index_directory,
                                 std::shared_ptr<const embedding::Embedder> embedder,
                                 ChunkingOptions chunking, UploadLimits limits,
                                 std::function<void()> index_changed)
    : index_directory_(std::move(index_directory)),
      uploads_directory_((fs::path(index_directory_) / "uploads").string()),
      embedder_(std::move(embedder)),
      chunking_(chunking),
      limits_(limits),
      index_changed_(std::move(index_changed)) {
  fs::create_directories(uploads_directory_);
  refresh_list();
}

// Reads documents.json again when another process (a pipeline being replaced by a reload, or a
// second server on the same directory) wrote it since: changes then start from what is on disk
// and never drop the other's documents.
void DocumentUploads::refresh_list() const {
  fs::path list = fs::path(uploads_directory_) / "documents.json";
  std::error_code missing;
  auto written = fs::last_write_time(list, missing);
  if (missing || (list_read_ && written == list_time_)) return;
  std::ifstream in(list);
  std::stringstream contents;
  contents << in.rdbuf();
  boost::system::error_code error;
  json::value parsed = json::parse(contents.str(), error);
  if (error || !parsed.is_object() || !parsed.as_object().if_contains("documents"))
    throw std::runtime_error(list.string() + ": not a list of uploaded documents");
  documents_.clear();
  for (const auto& entry : parsed.at("documents").as_array())
    documents_.push_back(document_of(entry.as_object()));
  list_time_ = written;
  list_read_ = true;
}

// flock(2) on <uploads>/lock while one change (index and list) is made: processes take turns.
class DocumentUploads::ListLock {
 public:
  explicit ListLock(const std::string& directory) {
    std::string path = (fs::path(directory) / "lock").string();
    descriptor_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (descriptor_ >= 0 && ::flock(descriptor_, LOCK_EX) == 0) return;
    std::string reason = std::strerror(errno);
    if (descriptor_ >= 0) ::close(descriptor_);
    throw std::runtime_error(path + ": cannot lock the upload list: " + reason);
  }
  ~ListLock() { ::close(descriptor_); }  // closing releases the lock
  ListLock(const ListLock&) = delete;
  ListLock& operator=(const ListLock&) = delete;

 private:
  int descriptor_ = -1;
};

std::string DocumentUploads::text_path(const std::string& id) const {
  return (fs::path(uploads_directory_) / (id + ".txt")).string();
}

void DocumentUploads::save_list() const {
  json::array entries;
  for (const auto& document : documents_)
    entries.push_back(document_json(document));
  fs::path list = fs::path(uploads_directory_) / "documents.json";
  fs::path temporary = list;
  temporary += ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << json::serialize(json::object{{"documents", entries}}) << "\n";
    if (!out) throw std::runtime_error(temporary.string() + ": cannot write the upload list");
  }
  fs::rename(temporary, list);  // a crash leaves the old list or the new one, never half of one
  list_time_ = fs::last_write_time(list);
  list_read_ = true;
}

std::unique_ptr<RetrievalIndex> DocumentUploads::open_writer() const {
  try {
    return std::make_unique<RetrievalIndex>(index_directory_, embedder_, true);
  } catch (const Xapian::DatabaseLockError&) {
    refuse(503,
           "the retrieval index " + index_directory_ +
               " is being written by another process (chatflow index?); try again shortly",
           "index_busy");
  }
}

UploadedDocument DocumentUploads::upload(const DocumentOwner& owner, const std::string& name,
                                         const std::string& content_type, const std::string& body) {
  UploadedDocument document;
  document.name = clean_name(name);
  if (document.name.empty())
    refuse(400, "the document needs a name (the file's name, or 'name')", "missing_name", "name");
  if (document.name.size() > 255 || text::first_invalid_byte(document.name)) {
    refuse(400, "the document's name must be UTF-8 of at most 255 bytes", "invalid_name", "name");
  }
  document.content_type = upload_type(document.name, content_type);
  document.bytes = static_cast<int64_t>(body.size());
  if (document.bytes > limits_.max_bytes) {
    refuse(413,
           "'" + document.name + "' is " + std::to_string(document.bytes) +
               " bytes; a document may have at most " + std::to_string(limits_.max_bytes),
           "document_too_large", "file");
  }
  std::string text = upload_text(document.content_type, body);
  {
    std::lock_guard lock(mutex_);
    refresh_list();
    check_room(owner, document);  // before the work of embedding it
  }
  // Embedded with no lock held: a large upload does not hold up the other owners' document
  // routes, nor another server's uploads, for as long as its chunks take to embed.
  SourceDocument source{"", document.name, text, "", {owner_label(owner)}};
  ChunkVectors vectors = embed_chunks(source, chunking_, *embedder_);

  std::lock_guard lock(mutex_);
  ListLock list_lock(uploads_directory_);
  refresh_list();
  check_room(owner, document);  // again: the owner may have uploaded meanwhile
  document.id = new_document_id();
  document.owner = owner;
  document.created_at = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  {
    std::ofstream out(text_path(document.id), std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) throw std::runtime_error(text_path(document.id) + ": cannot write the document");
  }
  source.id = document.id;
  {
    auto writer = open_writer();
    document.chunks =
        static_cast<int64_t>(writer->add({source}, chunking_, nullptr, {vectors}).chunks_added);
  }
  documents_.push_back(document);
  save_list();
  if (index_changed_) index_changed_();
  return document;
}

void DocumentUploads::check_room(const DocumentOwner& owner,
                                 const UploadedDocument& document) const {
  int64_t owned = 0;
  int64_t owned_bytes = 0;
  for (const auto& existing : documents_) {
    if (!same_owner(existing.owner, owner)) continue;
    ++owned;
    owned_bytes += existing.bytes;
  }
  if (owned >= limits_.max_documents_per_owner) {
    refuse(413,
           "you have " + std::to_string(owned) + " documents, the most kept for one user (" +
               std::to_string(limits_.max_documents_per_owner) + "); delete one first",
           "too_many_documents");
  }
  if (owned_bytes + document.bytes > limits_.max_bytes_per_owner) {
    refuse(413,
           "your documents hold " + std::to_string(owned_bytes) + " bytes; with '" + document.name +
               "' (" + std::to_string(document.bytes) + ") they would pass the " +
               std::to_string(limits_.max_bytes_per_owner) + " bytes kept for one user",
           "documents_storage_full");
  }
}

std::vector<UploadedDocument> DocumentUploads::documents_of(const DocumentOwner& owner) const {
  std::lock_guard lock(mutex_);
  refresh_list();
  std::vector<UploadedDocument> found;
  for (auto it = documents_.rbegin(); it != documents_.rend(); ++it) {
    if (same_owner(it->owner, owner)) found.push_back(*it);
  }
  return found;
}

std::optional<UploadedDocument> DocumentUploads::document(const DocumentOwner& owner,
                                                          const std::string& id, std::string* text,
                                                          std::vector<ChunkSpan>* chunks) const {
  std::lock_guard lock(mutex_);
  refresh_list();
  for (const auto& candidate : documents_) {
    if (candidate.id != id || !same_owner(candidate.owner, owner)) continue;
    if (text || chunks) {
      std::ifstream in(text_path(id), std::ios::binary);
      std::stringstream contents;
      contents << in.rdbuf();
      std::string stored = contents.str();
      if (chunks) {
        chunks->clear();
        uint32_t number = 0;
        for (const auto& [start, end] : chunk_spans(stored, chunking_.tokens, chunking_.overlap))
          chunks->push_back({number++, start, end});
      }
      if (text) *text = std::move(stored);
    }
    return candidate;
  }
  return std::nullopt;
}

bool DocumentUploads::remove(const DocumentOwner& owner, const std::string& id) {
  std::lock_guard lock(mutex_);
  ListLock list_lock(uploads_directory_);
  refresh_list();
  auto found = std::find_if(documents_.begin(), documents_.end(), [&](const auto& candidate) {
    return candidate.id == id && same_owner(candidate.owner, owner);
  });
  if (found == documents_.end()) return false;
  {
    auto writer = open_writer();
    writer->erase(id);
  }
  documents_.erase(found);
  save_list();
  std::error_code ignored;  // the list no longer names it; a leftover file is only disk space
  fs::remove(text_path(id), ignored);
  if (index_changed_) index_changed_();
  return true;
}

}  // namespace chatflow::retrieval
