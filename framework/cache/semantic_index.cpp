#include "framework/cache/semantic_index.h"

#include <algorithm>

#include "framework/embedding/vector_graph.h"

namespace chatflow::cache {

struct SemanticIndex::Partition {
  mutable std::shared_mutex mutex;
  // First questions only; made with the first of them (a partition of follow-ups needs none).
  std::unique_ptr<embedding::VectorGraph> graph;
  std::map<size_t, std::shared_ptr<const SemanticEntry>> entries;  // by label, live only
  std::deque<size_t> order;  // labels, oldest first (dead ones skipped on eviction)
  std::map<std::string, size_t> labels_by_id;  // entries with an id
  // Later questions, by context: few per context, compared one by one.
  std::map<std::string, std::vector<size_t>> labels_by_context;
  size_t next_label = 0;

  // Takes the entry at `label` out of the graph or its context's list.
  void unlink(size_t label, const SemanticEntry& entry) {
    if (entry.context.empty()) {
      graph->remove(label);
      return;
    }
    auto found = labels_by_context.find(entry.context);
    if (found == labels_by_context.end()) return;
    std::erase(found->second, label);
    if (found->second.empty()) labels_by_context.erase(found);
  }
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
  auto made = std::make_shared<Partition>();
  partitions_.emplace(name, made);
  return made;
}

namespace {
float cosine(const std::vector<float>& a, const std::vector<float>& b) {
  float similarity = 0;
  for (size_t d = 0; d < a.size() && d < b.size(); ++d)
    similarity += a[d] * b[d];
  return similarity;
}
}  // namespace

std::vector<SemanticMatch> SemanticIndex::search(const std::string& name,
                                                 const std::string& context,
                                                 const std::vector<float>& query, size_t k) const {
  std::vector<SemanticMatch> matches;
  auto part = partition(name, false);
  if (!part || query.size() != dimensions_) return matches;
  std::shared_lock lock(part->mutex);
  auto now = std::chrono::steady_clock::now();
  auto live = [&](size_t label, float similarity) {
    auto entry = part->entries.find(label);
    if (entry == part->entries.end() || entry->second->answer->expires <= now) return;
    matches.push_back({similarity, entry->second});
  };
  if (context.empty()) {
    if (!part->graph || part->entries.empty()) return matches;
    for (const auto& [label, similarity] :
         part->graph->search(query.data(), std::min(k, part->entries.size())))
      live(label, similarity);
  } else {
    auto labels = part->labels_by_context.find(context);
    if (labels == part->labels_by_context.end()) return matches;
    for (size_t label : labels->second) {
      auto entry = part->entries.find(label);
      if (entry != part->entries.end()) live(label, cosine(query, entry->second->vector));
    }
  }
  std::sort(matches.begin(), matches.end(), [](const SemanticMatch& a, const SemanticMatch& b) {
    return a.similarity > b.similarity;
  });
  if (matches.size() > k) matches.resize(k);
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
    part->unlink(oldest, *found->second);
    part->entries.erase(found);
  }

  size_t label = part->next_label++;
  if (!entry.id.empty()) part->labels_by_id.emplace(entry.id, label);
  if (entry.context.empty()) {
    if (!part->graph) {
      part->graph = std::make_unique<embedding::VectorGraph>(
          dimensions_, std::min<size_t>(1024, max_entries_ + 1), 16, 100, 64);
    }
    part->graph->add(entry.vector.data(), label);
  } else {
    part->labels_by_context[entry.context].push_back(label);
  }
  part->entries.emplace(label, std::make_shared<const SemanticEntry>(std::move(entry)));
  part->order.push_back(label);
}

size_t SemanticIndex::forget(const std::string& prefix, const std::string& context,
                             const std::vector<float>* near, float threshold,
                             std::vector<std::string>* forgotten_ids) {
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
      bool drop = !near || (near->size() == dimensions_ && it->second->context == context &&
                            cosine(*near, it->second->vector) >= threshold);
      if (drop) {
        if (!it->second->id.empty()) {
          part->labels_by_id.erase(it->second->id);
          if (forgotten_ids) forgotten_ids->push_back(it->second->id);
        }
        part->unlink(it->first, *it->second);
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

}  // namespace chatflow::cache
