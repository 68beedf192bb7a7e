#include "framework/retrieval/documents.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <boost/json.hpp>

#include "framework/text/utf8.h"

namespace chatflow::retrieval {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

std::string read_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error(file.string() + ": cannot read the file");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string trim(std::string_view text) {
  size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return {};
  size_t end = text.find_last_not_of(" \t\r\n");
  return std::string(text.substr(begin, end - begin + 1));
}

bool is_smart(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    std::string first = trim(line);
    if (first.empty()) continue;
    return first.rfind(".I", 0) == 0 && (first.size() == 2 || first[2] == ' ');
  }
  return false;
}

// The first Markdown heading, else the file name without its extension.
std::string title_of(const std::string& text, const fs::path& file) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("# ", 0) == 0) return trim(line.substr(2));
    if (!trim(line).empty()) break;
  }
  return file.stem().string();
}

// Han, kana, Hangul: each character is a token of its own.
bool is_cjk(std::string_view text, size_t at, size_t length) {
  if (length != 3) return false;
  uint32_t code = ((static_cast<unsigned char>(text[at]) & 0x0F) << 12) |
                  ((static_cast<unsigned char>(text[at + 1]) & 0x3F) << 6) |
                  (static_cast<unsigned char>(text[at + 2]) & 0x3F);
  return (code >= 0x3040 && code <= 0x30FF) || (code >= 0x3400 && code <= 0x9FFF) ||
         (code >= 0xAC00 && code <= 0xD7AF) || (code >= 0xF900 && code <= 0xFAFF);
}

}  // namespace

std::vector<SourceDocument> load_smart(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error(file + ": cannot read the file");
  std::vector<SourceDocument> documents;
  std::string line;
  char field = 0;
  size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.size() >= 2 && line[0] == '.' && (line.size() == 2 || line[2] == ' ') &&
        std::string_view("ITABW").find(line[1]) != std::string_view::npos) {
      field = line[1];
      if (field == 'I') {
        std::string id = trim(line.substr(2));
        if (id.empty()) {
          throw std::runtime_error(file + ":" + std::to_string(number) +
                                   ":1: expected a document number after .I");
        }
        documents.push_back({});
        documents.back().id = id;
      }
      continue;
    }
    if (documents.empty()) {
      if (trim(line).empty()) continue;
      throw std::runtime_error(file + ":" + std::to_string(number) +
                               ":1: expected '.I <number>' before any text");
    }
    SourceDocument& document = documents.back();
    std::string* target = field == 'T' ? &document.title : field == 'W' ? &document.text : nullptr;
    if (target) {
      if (!target->empty()) *target += '\n';
      *target += line;
    }
  }
  for (auto& document : documents) {
    document.title = trim(document.title);
    document.text = trim(document.text);
  }
  return documents;
}

std::vector<SourceDocument> load_jsonl(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error(file + ": cannot read the file");
  std::vector<SourceDocument> documents;
  std::string line;
  size_t number = 0;
  auto fail = [&](const std::string& what) {
    throw std::runtime_error(file + ":" + std::to_string(number) + ":1: " + what);
  };
  while (std::getline(in, line)) {
    ++number;
    if (trim(line).empty()) continue;
    boost::system::error_code error;
    json::value value = json::parse(line, error);
    if (error || !value.is_object()) fail("expected one JSON object per line");
    const json::object& object = value.get_object();
    auto string_field = [&](const char* name, bool required) -> std::string {
      const json::value* field = object.if_contains(name);
      if (!field) {
        if (required) fail(std::string("expected a string field '") + name + "'");
        return {};
      }
      if (field->is_string()) return std::string(field->get_string());
      if (field->is_int64()) return std::to_string(field->get_int64());
      fail(std::string("field '") + name + "' must be a string");
      return {};
    };
    SourceDocument document;
    document.id = string_field("id", true);
    document.text = string_field("text", true);
    document.title = string_field("title", false);
    document.version = string_field("version", false);
    if (const json::value* acl = object.if_contains("acl")) {
      if (acl->is_string()) {
        document.acl.push_back(std::string(acl->get_string()));
      } else if (acl->is_array()) {
        for (const auto& label : acl->get_array()) {
          if (!label.is_string()) fail("'acl' must be a list of strings");
          document.acl.push_back(std::string(label.get_string()));
        }
      } else {
        fail("'acl' must be a string or a list of strings");
      }
    }
    if (document.id.empty()) fail("'id' must not be empty");
    documents.push_back(std::move(document));
  }
  return documents;
}

std::vector<SourceDocument> load_documents(const std::string& path) {
  fs::path root(path);
  std::error_code error;
  if (fs::is_directory(root, error)) {
    std::vector<fs::path> files;
    for (const auto& entry : fs::recursive_directory_iterator(root)) {
      auto extension = entry.path().extension().string();
      if (entry.is_regular_file() && (extension == ".txt" || extension == ".md"))
        files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    std::vector<SourceDocument> documents;
    for (const auto& file : files) {
      SourceDocument document;
      document.id = fs::relative(file, root).generic_string();
      document.text = read_file(file);
      document.title = title_of(document.text, file);
      documents.push_back(std::move(document));
    }
    return documents;
  }
  if (!fs::exists(root, error)) throw std::runtime_error(path + ": no such file or directory");
  if (root.extension() == ".jsonl") return load_jsonl(path);
  if (is_smart(root)) return load_smart(path);
  throw std::runtime_error(path +
                           ": expected a directory of .txt/.md files, a .jsonl file or a SMART "
                           "collection (starting with '.I')");
}

std::vector<std::pair<size_t, size_t>> chunk_spans(std::string_view text, size_t tokens,
                                                   size_t overlap) {
  if (tokens == 0) throw std::invalid_argument("chunk size must be positive");
  if (overlap >= tokens) overlap = tokens - 1;
  // Where each token starts and ends.
  std::vector<std::pair<size_t, size_t>> spans;
  for (size_t i = 0; i < text.size();) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++i;
      continue;
    }
    size_t length = std::min(text::sequence_length(c), text.size() - i);
    if (is_cjk(text, i, length)) {
      spans.push_back({i, i + length});
      i += length;
      continue;
    }
    size_t j = i;
    while (j < text.size()) {
      unsigned char d = static_cast<unsigned char>(text[j]);
      if (d == ' ' || d == '\t' || d == '\n' || d == '\r') break;
      size_t step = std::min(text::sequence_length(d), text.size() - j);
      if (is_cjk(text, j, step)) break;
      j += step;
    }
    spans.push_back({i, j});
    i = j;
  }
  std::vector<std::pair<size_t, size_t>> chunks;
  if (spans.empty()) return chunks;
  size_t step = tokens - overlap;
  for (size_t first = 0;; first += step) {
    size_t last = std::min(first + tokens, spans.size()) - 1;
    chunks.emplace_back(spans[first].first, spans[last].second);
    if (last + 1 >= spans.size()) break;
  }
  return chunks;
}

std::vector<std::string> chunk_text(std::string_view text, size_t tokens, size_t overlap) {
  std::vector<std::string> chunks;
  for (const auto& [start, end] : chunk_spans(text, tokens, overlap))
    chunks.emplace_back(text.substr(start, end - start));
  return chunks;
}

}  // namespace chatflow::retrieval
