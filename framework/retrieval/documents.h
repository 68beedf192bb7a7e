// Documents to index, as the user has them: a folder of .txt/.md files, a JSONL file (id, text,
// optional title, acl, version), or a classic IR collection in SMART format (.I/.T/.A/.B/.W).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace chatflow::retrieval {

struct SourceDocument {
  std::string id;
  std::string title;
  std::string text;
  std::string version;           // empty: the text's digest decides whether it changed
  std::vector<std::string> acl;  // labels one of which a reader needs; empty: public
};

// Loads `path` by its kind: a directory (every .txt/.md below it; the id is the relative path,
// the title the first Markdown heading or the file name), `*.jsonl`, or a SMART file (its first
// non-blank line starts with `.I`). Errors name the file and line: std::runtime_error.
std::vector<SourceDocument> load_documents(const std::string& path);
std::vector<SourceDocument> load_smart(const std::string& file);
std::vector<SourceDocument> load_jsonl(const std::string& file);

// Splits `text` into pieces of at most `tokens` tokens (a word, or one CJK character), each
// starting `tokens - overlap` tokens after the previous one; the pieces are exact substrings.
std::vector<std::string> chunk_text(std::string_view text, size_t tokens, size_t overlap);
// The same pieces as byte ranges of `text`: [first, second).
std::vector<std::pair<size_t, size_t>> chunk_spans(std::string_view text, size_t tokens,
                                                   size_t overlap);

}  // namespace chatflow::retrieval
