#include "framework/grammar/stack_forest.h"

#include <algorithm>

#include "framework/grammar/matcher.h"

namespace chatflow::grammar {
namespace {

using Kind = Grammar::SymbolKind;

// The code points a UTF-8 sequence of `length` bytes may carry (no overlong forms, no
// surrogates), as at most two ranges.
struct ValidRanges {
  CodepointRange ranges[2];
  int count;
};

ValidRanges valid_for_length(int length) {
  switch (length) {
    case 2:
      return {{{0x80, 0x7FF}, {0, 0}}, 1};
    case 3:
      return {{{0x800, 0xD7FF}, {0xE000, 0xFFFF}}, 2};
    default:
      return {{{0x10000, kMaxCodepoint}, {0, 0}}, 1};
  }
}

int sequence_length(uint8_t lead) {
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

}  // namespace

size_t StackForest::VectorHash::operator()(const std::vector<int32_t>& v) const {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (int32_t x : v)
    hash = (hash ^ static_cast<uint32_t>(x)) * 0x100000001b3ULL;
  return static_cast<size_t>(hash);
}

void StackForest::charge(size_t bytes) {
  bytes_ += bytes;
  size_t limit = grammar_.limits().max_work_bytes;
  if (bytes_ > limit)
    throw GrammarLimitExceeded("the grammar's parse states took more than " +
                               std::to_string(limit >> 20) + " MiB of working memory");
}

// The byte counts below are what each entry costs with its share of the hash tables.
int32_t StackForest::frame(uint32_t position, int32_t below) {
  uint64_t key = (static_cast<uint64_t>(position) << 32) | static_cast<uint32_t>(below + 1);
  auto [it, inserted] = node_index_.try_emplace(key, static_cast<int32_t>(nodes_.size()));
  if (inserted) {
    nodes_.push_back({position, below});
    charge(sizeof(Frame) + 40);
  }
  return it->second;
}

int32_t StackForest::set_of(std::vector<int32_t>& members) {
  std::sort(members.begin(), members.end());
  members.erase(std::unique(members.begin(), members.end()), members.end());
  size_t limit = grammar_.limits().max_stacks;
  if (members.size() > limit)
    throw GrammarLimitExceeded(
        "the grammar keeps more than " + std::to_string(limit) +
        " readings of the text alive at once (anyOf branches that overlap, or an unanchored "
        "pattern with a long repeat: anchor it with ^...$ or make the branches distinct)");
  auto it = set_index_.find(members);
  if (it != set_index_.end()) return it->second;
  int32_t id = static_cast<int32_t>(sets_.size());
  charge(2 * members.size() * sizeof(int32_t) + 96);
  sets_.push_back(members);
  set_index_.emplace(members, id);
  return id;
}

int32_t StackForest::walk_of(int32_t set, uint32_t pending) {
  uint64_t key = (static_cast<uint64_t>(set) << 32) | pending;
  auto [it, inserted] = walk_index_.try_emplace(key, static_cast<int32_t>(walks_.size()));
  if (inserted) {
    charge(256 * sizeof(int32_t) + sizeof(WalkState) + 40);
    walks_.push_back({set, pending});
    steps_.resize(walks_.size() * 256, kUnknown);
  }
  return it->second;
}

std::vector<uint32_t> StackForest::sample_next(int32_t walk, size_t limit) const {
  std::vector<uint32_t> code_points;
  if (walks_[walk].pending != 0) return code_points;
  auto symbols = grammar_.symbols();
  std::vector<uint32_t> seen;
  for (int32_t member : sets_[walks_[walk].set]) {
    if (member == kFinished) continue;
    uint32_t charset = symbols[nodes_[member].position].value;
    if (std::find(seen.begin(), seen.end(), charset) != seen.end()) continue;
    seen.push_back(charset);
    for (uint32_t c = 0; c < 128; ++c) {  // ASCII first: what JSON text is mostly made of
      if (grammar_.charset_contains(charset, c)) {
        code_points.push_back(c);
        break;
      }
    }
    if (code_points.size() >= limit) break;
  }
  std::sort(code_points.begin(), code_points.end());
  code_points.erase(std::unique(code_points.begin(), code_points.end()), code_points.end());
  return code_points;
}

int32_t StackForest::close(std::vector<int32_t>& seeds) {
  auto symbols = grammar_.symbols();
  ++stamp_;
  work_.assign(seeds.begin(), seeds.end());
  out_.clear();
  while (!work_.empty()) {
    int32_t node = work_.back();
    work_.pop_back();
    if (visited_.size() < nodes_.size()) visited_.resize(nodes_.size() * 2, 0);
    if (visited_[node] == stamp_) continue;
    visited_[node] = stamp_;
    Frame top = nodes_[node];
    const Grammar::Symbol& symbol = symbols[top.position];
    if (symbol.kind == Kind::charset) {
      out_.push_back(node);
    } else if (symbol.kind == Kind::end) {
      if (top.below < 0)
        out_.push_back(kFinished);
      else
        work_.push_back(top.below);
    } else {
      // A rule last in its alternative returns straight to the frame below (a tail call), so
      // repeats and right recursion keep the stacks short.
      int32_t resume = symbols[top.position + 1].kind == Kind::end
                           ? top.below
                           : frame(top.position + 1, top.below);
      for (uint32_t start : grammar_.alternatives(symbol.value))
        work_.push_back(frame(start, resume));
    }
  }
  if (out_.empty()) return kDead;
  return set_of(out_);
}

int32_t StackForest::initial() {
  std::vector<int32_t> seeds;
  for (uint32_t start : grammar_.alternatives(grammar_.root()))
    seeds.push_back(frame(start, -1));
  int32_t set = close(seeds);
  return set == kDead ? kDead : walk_of(set, 0);
}

int32_t StackForest::import(std::span<const uint32_t> state, const std::vector<uint32_t>* clamp) {
  std::vector<int32_t> members;
  size_t at = 1;
  for (uint32_t stack = 0; stack < state[0]; ++stack) {
    uint32_t length = state[at++];
    int32_t node = -1;
    for (uint32_t i = 0; i < length; ++i) {
      uint32_t position = state[at++];
      node = frame(clamp != nullptr ? (*clamp)[position] : position, node);
    }
    members.push_back(length == 0 ? kFinished : node);
  }
  return walk_of(set_of(members), state[at]);
}

std::vector<uint32_t> StackForest::export_state(int32_t walk) const {
  const WalkState& state = walks_[walk];
  std::vector<std::vector<uint32_t>> stacks;
  for (int32_t member : sets_[state.set]) {
    std::vector<uint32_t> positions;
    for (int32_t node = member; node >= 0; node = nodes_[node].below)
      positions.push_back(nodes_[node].position);
    std::reverse(positions.begin(), positions.end());
    stacks.push_back(std::move(positions));
  }
  std::sort(stacks.begin(), stacks.end());
  std::vector<uint32_t> out{static_cast<uint32_t>(stacks.size())};
  for (const auto& positions : stacks) {
    out.push_back(static_cast<uint32_t>(positions.size()));
    out.insert(out.end(), positions.begin(), positions.end());
  }
  out.push_back(state.pending);
  return out;
}

int32_t StackForest::advance_code_point(int32_t set, uint32_t code_point) {
  auto symbols = grammar_.symbols();
  std::vector<int32_t> seeds;
  for (int32_t member : sets_[set]) {
    if (member == kFinished) continue;
    Frame top = nodes_[member];
    if (grammar_.charset_contains(symbols[top.position].value, code_point))
      seeds.push_back(frame(top.position + 1, top.below));
  }
  if (seeds.empty()) return kDead;
  return close(seeds);
}

bool StackForest::any_top_intersects(int32_t set, uint32_t first, uint32_t last) const {
  auto symbols = grammar_.symbols();
  for (int32_t member : sets_[set]) {
    if (member == kFinished) continue;
    if (grammar_.charset_intersects(symbols[nodes_[member].position].value, first, last))
      return true;
  }
  return false;
}

int32_t StackForest::compute_step(int32_t walk, uint8_t byte) {
  WalkState state = walks_[walk];
  uint32_t count = state.pending >> 24;
  if (count == 0 && byte < 0x80) {
    int32_t set = advance_code_point(state.set, byte);
    return set == kDead ? kDead : walk_of(set, 0);
  }
  uint8_t bytes[4];
  for (uint32_t i = 0; i < count; ++i)
    bytes[i] = static_cast<uint8_t>(state.pending >> (16 - 8 * i));
  bytes[count] = byte;
  ++count;
  int length = sequence_length(bytes[0]);
  if (length == 0 || (count > 1 && (byte & 0xC0) != 0x80)) return kDead;
  uint32_t value = bytes[0] & (0x7F >> length);
  for (uint32_t i = 1; i < count; ++i)
    value = (value << 6) | (bytes[i] & 0x3F);
  int missing = length - static_cast<int>(count);
  uint32_t first = value << (6 * missing);
  uint32_t last = first | ((1u << (6 * missing)) - 1);
  ValidRanges valid = valid_for_length(length);
  bool possible = false;
  for (int i = 0; i < valid.count && !possible; ++i) {
    uint32_t lo = std::max(first, valid.ranges[i].first);
    uint32_t hi = std::min(last, valid.ranges[i].last);
    possible = lo <= hi && any_top_intersects(state.set, lo, hi);
  }
  if (!possible) return kDead;
  if (missing == 0) {
    int32_t set = advance_code_point(state.set, value);
    return set == kDead ? kDead : walk_of(set, 0);
  }
  uint32_t pending = count << 24;
  for (uint32_t i = 0; i < count; ++i)
    pending |= static_cast<uint32_t>(bytes[i]) << (16 - 8 * i);
  return walk_of(state.set, pending);
}

Matcher::Matcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  StackForest forest(*grammar_);
  state_ = forest.export_state(forest.initial());
}

bool Matcher::advance(std::string_view bytes) {
  if (bytes.empty()) return true;
  StackForest forest(*grammar_);
  int32_t walk = forest.import(state_);
  for (char byte : bytes) {
    walk = forest.step(walk, static_cast<uint8_t>(byte));
    if (walk == StackForest::kDead) return false;
  }
  state_ = forest.export_state(walk);
  return true;
}

bool Matcher::accepting() const {
  // Stacks are sorted, so a finished (empty) one comes first.
  return state_.back() == 0 && state_[0] > 0 && state_[1] == 0;
}

bool Matcher::can_continue() const {
  return state_.back() != 0 || state_[0] > 1 || (state_[0] == 1 && state_[1] != 0);
}

size_t Matcher::hash() const {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (uint32_t x : state_)
    hash = (hash ^ x) * 0x100000001b3ULL;
  return static_cast<size_t>(hash);
}

}  // namespace chatflow::grammar

namespace chatflow::grammar {

void probe_ambiguity(const Grammar& grammar, size_t code_points) {
  StackForest forest(grammar);
  int32_t walk = forest.initial();
  for (size_t i = 0; i < code_points && walk >= 0; ++i) {
    int32_t widest = StackForest::kDead;
    for (uint32_t code_point : forest.sample_next(walk, 16)) {
      int32_t next = forest.step(walk, static_cast<uint8_t>(code_point));
      if (next >= 0 && (widest < 0 || forest.stack_count(next) > forest.stack_count(widest)))
        widest = next;
    }
    walk = widest;
  }
}

}  // namespace chatflow::grammar
