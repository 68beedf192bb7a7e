#include "framework/cache/semantic_index.h"

#include <algorithm>
#include <set>

#include "framework/embedding/vector_graph.h"
#include "framework/text/normalizer.h"

namespace chatflow::cache {

struct SemanticIndex::Partition {
  Partition(size_t dimensions, size_t capacity) : graph(dimensions, capacity, 16, 100, 64) {}
  mutable std::shared_mutex mutex;
  embedding::VectorGraph graph;
  std::map<size_t, std::shared_ptr<const SemanticEntry>> entries;  // by label, live only
  std::deque<size_t> order;  // labels, oldest first (dead ones skipped on eviction)
  std::map<std::string, size_t> labels_by_id;  // entries with an id
  size_t next_label = 0;
};

SemanticIndex::SemanticIndex(size_t dimensions, size_t max_entries)
    : dimensions_(dimensions), max_entries_(max_entries) {}

SemanticIndex::~SemanticIndex() = default;

std::shared_ptr<SemanticIndex::Partition> SemanticIndex::partition(const std::string& name,
                                                                   bool create) const {
  std::lock_guard lock(mutex_);
  auto found = partitions_.find(name);
  if (found != partitions_.end()) return found->second;
  if (!create) return nullptr;
  auto made = std::make_shared<Partition>(dimensions_, std::min<size_t>(1024, max_entries_ + 1));
  partitions_.emplace(name, made);
  return made;
}

std::vector<SemanticMatch> SemanticIndex::search(const std::string& name,
                                                 const std::vector<float>& query, size_t k) const {
  std::vector<SemanticMatch> matches;
  auto part = partition(name, false);
  if (!part || query.size() != dimensions_) return matches;
  std::shared_lock lock(part->mutex);
  if (part->entries.empty()) return matches;
  for (const auto& [label, similarity] :
       part->graph.search(query.data(), std::min(k, part->entries.size()))) {
    auto entry = part->entries.find(label);
    if (entry == part->entries.end()) continue;
    if (entry->second->answer->expires <= std::chrono::steady_clock::now()) continue;
    matches.push_back({similarity, entry->second});
  }
  std::sort(matches.begin(), matches.end(), [](const SemanticMatch& a, const SemanticMatch& b) {
    return a.similarity > b.similarity;
  });
  return matches;
}

void SemanticIndex::insert(const std::string& name, SemanticEntry entry) {
  if (entry.vector.size() != dimensions_) return;
  auto part = partition(name, true);
  std::unique_lock lock(part->mutex);
  if (!entry.id.empty() && part->labels_by_id.count(entry.id)) return;  // seen (a replica's echo)
  // Make room: the oldest entries go first.
  while (part->entries.size() >= max_entries_ && !part->order.empty()) {
    size_t oldest = part->order.front();
    part->order.pop_front();
    auto found = part->entries.find(oldest);
    if (found == part->entries.end()) continue;
    part->labels_by_id.erase(found->second->id);
    part->entries.erase(found);
    part->graph.remove(oldest);
  }

  size_t label = part->next_label++;
  if (!entry.id.empty()) part->labels_by_id.emplace(entry.id, label);
  part->graph.add(entry.vector.data(), label);
  part->entries.emplace(label, std::make_shared<const SemanticEntry>(std::move(entry)));
  part->order.push_back(label);
}

size_t SemanticIndex::forget(const std::string& prefix, const std::vector<float>* near,
                             float threshold, std::vector<std::string>* forgotten_ids) {
  std::vector<std::shared_ptr<Partition>> chosen;
  {
    std::lock_guard lock(mutex_);
    for (auto& [name, part] : partitions_) {
      if (name.compare(0, prefix.size(), prefix) == 0) chosen.push_back(part);
    }
  }
  size_t removed = 0;
  for (auto& part : chosen) {
    std::unique_lock lock(part->mutex);
    for (auto it = part->entries.begin(); it != part->entries.end();) {
      bool drop = !near || (near->size() == dimensions_ && [&] {
        float similarity = 0;
        for (size_t d = 0; d < dimensions_; ++d)
          similarity += (*near)[d] * it->second->vector[d];
        return similarity >= threshold;
      }());
      if (drop) {
        if (!it->second->id.empty()) {
          part->labels_by_id.erase(it->second->id);
          if (forgotten_ids) forgotten_ids->push_back(it->second->id);
        }
        part->graph.remove(it->first);
        it = part->entries.erase(it);
        ++removed;
      } else {
        ++it;
      }
    }
  }
  return removed;
}

size_t SemanticIndex::size(const std::string& name) const {
  auto part = partition(name, false);
  if (!part) return 0;
  std::shared_lock lock(part->mutex);
  return part->entries.size();
}

namespace {

struct Signature {
  std::multiset<std::string> numbers;
  bool negated = false;
  std::set<std::string> names;  // lower case
  std::set<std::string> words;  // every word, lower case
};

bool ascii_letter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

Signature signature(const std::string& text) {
  static const std::set<std::string> kNegations = {
      "not",       "no",       "never",  "none",   "nobody",  "nothing", "neither", "nor",
      "cannot",    "can't",    "cant",   "don't",  "dont",    "doesn't", "doesnt",  "isn't",
      "isnt",      "aren't",   "arent",  "wasn't", "weren't", "won't",   "wont",    "wouldn't",
      "shouldn't", "couldn't", "didn't", "didnt",  "without", "n't"};
  static const char* kChineseNegations[] = {"不", "没", "無", "无", "非", "别", "未", "否", "勿"};
  Signature result;
  // Numbers: runs of digits (with a decimal point inside), as written.
  for (size_t i = 0; i < text.size();) {
    if (text[i] >= '0' && text[i] <= '9') {
      size_t j = i;
      while (j < text.size() &&
             ((text[j] >= '0' && text[j] <= '9') || (text[j] == '.' && j + 1 < text.size() &&
                                                     text[j + 1] >= '0' && text[j + 1] <= '9'))) {
        ++j;
      }
      result.numbers.insert(text.substr(i, j - i));
      i = j;
    } else {
      ++i;
    }
  }
  for (const char* word : kChineseNegations)
    result.negated |= text.find(word) != std::string::npos;
  // Words: negations (any case), and names: capitalised words not starting a sentence, and
  // acronyms.
  bool sentence_start = true;
  for (size_t i = 0; i < text.size();) {
    if (!ascii_letter(text[i])) {
      if (text[i] == '.' || text[i] == '?' || text[i] == '!' || text[i] == '\n')
        sentence_start = true;
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && (ascii_letter(text[j]) || text[j] == '\''))
      ++j;
    std::string word = text.substr(i, j - i);
    std::string lower = text::normalize(word).text;
    if (kNegations.count(lower) ||
        (lower.size() > 3 && lower.compare(lower.size() - 3, 3, "n't") == 0))
      result.negated = true;
    bool capitalised = word[0] >= 'A' && word[0] <= 'Z';
    bool acronym = word.size() >= 2 && std::all_of(word.begin(), word.end(), [](char c) {
                     return (c >= 'A' && c <= 'Z') || c == '\'';
                   });
    if ((capitalised && !sentence_start) || acronym) result.names.insert(lower);
    result.words.insert(lower);
    sentence_start = false;
    i = j;
  }
  return result;
}

}  // namespace

bool same_question(const std::string& a, const std::string& b) {
  Signature x = signature(a), y = signature(b);
  if (x.numbers != y.numbers || x.negated != y.negated) return false;
  // A name one question mentions must be in the other too, however it is capitalised there.
  auto covered = [](const Signature& names, const Signature& text) {
    for (const auto& name : names.names) {
      if (!text.words.count(name)) return false;
    }
    return true;
  };
  return covered(x, y) && covered(y, x);
}

}  // namespace chatflow::cache
