// Lowering a builder's expressions into a flat Grammar, and the checks that keep matching
// finite: alternatives that can never finish are dropped, and a rule that can reach itself
// without consuming a code point (left recursion) is refused.
#include "framework/grammar/grammar.h"

#include <algorithm>
#include <deque>
#include <utility>

#include "framework/grammar/grammar_node.h"
#include "framework/grammar/json_schema.h"
#include "framework/text/utf8.h"

namespace chatflow::grammar {

SchemaError::SchemaError(std::string keyword, std::string pointer, std::string message)
    : std::runtime_error((pointer.empty() ? "" : pointer + ": ") + "'" + keyword + "': " + message),
      keyword_(std::move(keyword)),
      pointer_(std::move(pointer)),
      detail_(std::move(message)) {}

void WorkBudget::check() const {
  if (cancelled != nullptr && cancelled->load(std::memory_order_relaxed))
    throw GrammarWorkCancelled();
  if (deadline != std::chrono::steady_clock::time_point::max() &&
      std::chrono::steady_clock::now() > deadline)
    throw GrammarLimitExceeded("the grammar's work ran past its time budget");
}

std::vector<CodepointRange> normalize_ranges(std::vector<CodepointRange> ranges, bool negated) {
  std::vector<CodepointRange> merged;
  std::sort(ranges.begin(), ranges.end());
  for (CodepointRange range : ranges) {
    if (range.first > range.last || range.first > kMaxCodepoint) continue;
    range.last = std::min(range.last, kMaxCodepoint);
    if (!merged.empty() && range.first <= merged.back().last + 1)
      merged.back().last = std::max(merged.back().last, range.last);
    else
      merged.push_back(range);
  }
  if (negated) {
    std::vector<CodepointRange> complement;
    uint32_t next = 0;
    for (CodepointRange range : merged) {
      if (range.first > next) complement.push_back({next, range.first - 1});
      next = range.last + 1;
    }
    if (next <= kMaxCodepoint) complement.push_back({next, kMaxCodepoint});
    merged = std::move(complement);
  }
  std::vector<CodepointRange> out;  // without the surrogates, which UTF-8 cannot carry
  for (CodepointRange range : merged) {
    if (range.last < 0xD800 || range.first > 0xDFFF) {
      out.push_back(range);
      continue;
    }
    if (range.first < 0xD800) out.push_back({range.first, 0xD7FF});
    if (range.last > 0xDFFF) out.push_back({0xE000, range.last});
  }
  return out;
}

bool Grammar::charset_contains(uint32_t charset, uint32_t code_point) const {
  if (code_point < 128) return charset_ascii_[charset * 128 + code_point] != 0;
  auto first = charset_ranges_.begin() + charset_offsets_[charset];
  auto last = charset_ranges_.begin() + charset_offsets_[charset + 1];
  auto it = std::upper_bound(first, last, code_point,
                             [](uint32_t c, const CodepointRange& r) { return c < r.first; });
  return it != first && std::prev(it)->last >= code_point;
}

bool Grammar::charset_intersects(uint32_t charset, uint32_t first, uint32_t last) const {
  for (uint32_t i = charset_offsets_[charset]; i < charset_offsets_[charset + 1]; ++i) {
    const CodepointRange& range = charset_ranges_[i];
    if (range.first <= last && range.last >= first) return true;
  }
  return false;
}

std::vector<uint32_t> Grammar::clamped_positions(size_t budget) const {
  std::vector<uint32_t> map(symbols_.size());
  for (uint32_t i = 0; i < map.size(); ++i)
    map[i] = i;
  budget = std::max<size_t>(budget, 2);
  for (const auto& levels : repeat_levels_) {
    if (levels.size() <= budget) continue;
    auto target = rule_spans_[levels[budget - 1]];
    for (size_t level = budget; level < levels.size(); ++level) {
      auto span = rule_spans_[levels[level]];
      if (span.second - span.first != target.second - target.first) continue;
      for (uint32_t offset = 0; offset < span.second - span.first; ++offset)
        map[span.first + offset] = target.first + offset;
    }
  }
  return map;
}

namespace {

using Node = GrammarBuilder::Node;
using Symbol = Grammar::Symbol;
using Alternative = std::vector<Symbol>;

constexpr int kMaxRepeat = 1'000'000;

// Expressions to rules: choices, repeats and named rules become rules (once each, however often
// they are used); literals, sets and sequences are written inline.
class Lowering {
 public:
  Lowering(const std::vector<Node>& nodes, size_t max_symbols)
      : nodes_(nodes), node_rule_(nodes.size(), -1), max_symbols_(max_symbols) {}

  uint32_t lower_root(int32_t root) {
    uint32_t rule = new_rule();
    Alternative alternative;
    lower_into(root, alternative);
    rules_[rule].push_back(std::move(alternative));
    return rule;
  }

  std::vector<std::vector<Alternative>> rules_;
  std::vector<std::vector<CodepointRange>> charsets_;
  std::vector<std::vector<uint32_t>> repeat_levels_;

 private:
  uint32_t new_rule() {
    rules_.emplace_back();
    return static_cast<uint32_t>(rules_.size() - 1);
  }

  // Counts what lowering writes as it goes, so a schema whose grammar would be huge (counted
  // repeats nested through shared sequences) is refused before it takes the memory.
  void count(size_t symbols) {
    emitted_ += symbols;
    if (emitted_ > max_symbols_)
      throw GrammarLimitExceeded("the grammar would need more than " +
                                 std::to_string(max_symbols_) +
                                 " symbols (counted repeats and long literals add up)");
  }

  uint32_t charset(const std::vector<CodepointRange>& ranges) {
    auto [it, inserted] =
        charset_index_.try_emplace(ranges, static_cast<uint32_t>(charsets_.size()));
    if (inserted) charsets_.push_back(ranges);
    return it->second;
  }

  void lower_into(int32_t id, Alternative& out) {
    const Node& node = nodes_.at(static_cast<size_t>(id));
    switch (node.kind) {
      case Node::Kind::empty:
        return;
      case Node::Kind::literal:
        count(node.text.size());
        for (char32_t c : node.text)
          out.push_back({Grammar::SymbolKind::charset, charset({{c, c}})});
        return;
      case Node::Kind::chars:
        count(1);
        out.push_back({Grammar::SymbolKind::charset, charset(node.ranges)});
        return;
      case Node::Kind::sequence:
        for (int32_t child : node.children)
          lower_into(child, out);
        return;
      case Node::Kind::choice:
      case Node::Kind::rule:
        count(1);
        out.push_back({Grammar::SymbolKind::rule, rule_of(id)});
        return;
      case Node::Kind::repeat:
        lower_repeat(id, out);
        return;
    }
  }

  uint32_t rule_of(int32_t id) {
    if (node_rule_[id] >= 0) return static_cast<uint32_t>(node_rule_[id]);
    const Node& node = nodes_[id];
    if (node.kind == Node::Kind::rule && node.children.empty())
      throw std::invalid_argument("grammar: a rule is used but never defined");
    uint32_t rule = new_rule();
    node_rule_[id] = rule;
    std::vector<Alternative> alternatives;
    for (int32_t child : node.children) {
      Alternative alternative;
      lower_into(child, alternative);
      count(1);  // its end
      alternatives.push_back(std::move(alternative));
    }
    rules_[rule] = std::move(alternatives);
    return rule;
  }

  void lower_repeat(int32_t id, Alternative& out) {
    const Node& node = nodes_[id];
    Alternative item;
    lower_into(node.children[0], item);
    if (item.size() > 4) {  // one rule rather than many copies
      uint32_t rule = new_rule();
      rules_[rule].push_back(std::move(item));
      item = {{Grammar::SymbolKind::rule, rule}};
    }
    count(item.size() * static_cast<size_t>(node.min));
    for (int i = 0; i < node.min; ++i)
      out.insert(out.end(), item.begin(), item.end());
    if (node.max == node.min) return;
    if (node_rule_[id] < 0) node_rule_[id] = static_cast<int64_t>(repeat_tail(node, item));
    out.push_back({Grammar::SymbolKind::rule, static_cast<uint32_t>(node_rule_[id])});
  }

  // item* as `tail ::= item tail | ε`; item{0,n} as n levels `level_k ::= item level_k-1 | ε`.
  uint32_t repeat_tail(const Node& node, const Alternative& item) {
    if (node.max < 0) {
      uint32_t rule = new_rule();
      Alternative again = item;
      again.push_back({Grammar::SymbolKind::rule, rule});
      rules_[rule] = {std::move(again), {}};
      return rule;
    }
    std::vector<uint32_t> levels;
    for (int level = 1; level <= node.max - node.min; ++level) {
      count(item.size() + 3);
      uint32_t rule = new_rule();
      Alternative more = item;
      if (!levels.empty()) more.push_back({Grammar::SymbolKind::rule, levels.back()});
      rules_[rule] = {std::move(more), {}};
      levels.push_back(rule);
    }
    uint32_t top = levels.back();
    repeat_levels_.push_back(std::move(levels));
    return top;
  }

  const std::vector<Node>& nodes_;
  std::vector<int64_t> node_rule_;
  std::map<std::vector<CodepointRange>, uint32_t> charset_index_;
  size_t max_symbols_;
  size_t emitted_ = 0;
};

// Rules with at least one alternative that finishes; alternatives using any other are dropped.
std::vector<bool> prune_unproductive(std::vector<std::vector<Alternative>>& rules,
                                     const std::vector<std::vector<CodepointRange>>& charsets) {
  struct Pending {
    uint32_t rule;
    size_t waiting;  // rule symbols not yet known productive
  };
  std::vector<Pending> pending;
  std::vector<std::vector<size_t>> used_by(rules.size());
  std::vector<bool> productive(rules.size(), false);
  std::deque<size_t> ready;
  for (uint32_t rule = 0; rule < rules.size(); ++rule) {
    for (const Alternative& alternative : rules[rule]) {
      bool dead = false;
      size_t waiting = 0;
      for (const Symbol& symbol : alternative) {
        if (symbol.kind == Grammar::SymbolKind::charset) {
          dead = dead || charsets[symbol.value].empty();
        } else {
          used_by[symbol.value].push_back(pending.size());
          ++waiting;
        }
      }
      pending.push_back({rule, dead ? SIZE_MAX : waiting});
      if (waiting == 0 && !dead) ready.push_back(pending.size() - 1);
    }
  }
  while (!ready.empty()) {
    uint32_t rule = pending[ready.front()].rule;
    ready.pop_front();
    if (productive[rule]) continue;
    productive[rule] = true;
    for (size_t user : used_by[rule])
      if (pending[user].waiting != SIZE_MAX && --pending[user].waiting == 0) ready.push_back(user);
  }
  for (auto& alternatives : rules) {
    std::erase_if(alternatives, [&](const Alternative& alternative) {
      for (const Symbol& symbol : alternative) {
        if (symbol.kind == Grammar::SymbolKind::charset ? charsets[symbol.value].empty()
                                                        : !productive[symbol.value])
          return true;
      }
      return false;
    });
  }
  return productive;
}

std::vector<bool> nullable_rules(const std::vector<std::vector<Alternative>>& rules) {
  std::vector<bool> nullable(rules.size(), false);
  for (bool changed = true; changed;) {  // converges in a few rounds: chains nest by rules
    changed = false;
    for (uint32_t rule = rules.size(); rule-- > 0;) {
      if (nullable[rule]) continue;
      for (const Alternative& alternative : rules[rule]) {
        bool all = std::all_of(alternative.begin(), alternative.end(), [&](const Symbol& s) {
          return s.kind == Grammar::SymbolKind::rule && nullable[s.value];
        });
        if (all) {
          nullable[rule] = true;
          changed = true;
          break;
        }
      }
    }
  }
  return nullable;
}

// A rule that reaches itself through leading (possibly empty) rules would expand forever.
void refuse_left_recursion(const std::vector<std::vector<Alternative>>& rules,
                           const std::vector<bool>& nullable) {
  std::vector<std::vector<uint32_t>> leads(rules.size());
  std::vector<size_t> incoming(rules.size(), 0);
  for (uint32_t rule = 0; rule < rules.size(); ++rule) {
    for (const Alternative& alternative : rules[rule]) {
      for (const Symbol& symbol : alternative) {
        if (symbol.kind != Grammar::SymbolKind::rule) break;
        leads[rule].push_back(symbol.value);
        ++incoming[symbol.value];
        if (!nullable[symbol.value]) break;
      }
    }
  }
  std::vector<uint32_t> ready;
  for (uint32_t rule = 0; rule < rules.size(); ++rule)
    if (incoming[rule] == 0) ready.push_back(rule);
  size_t done = 0;
  while (!ready.empty()) {
    uint32_t rule = ready.back();
    ready.pop_back();
    ++done;
    for (uint32_t next : leads[rule])
      if (--incoming[next] == 0) ready.push_back(next);
  }
  if (done != rules.size())
    throw std::invalid_argument(
        "grammar: a rule refers to itself without consuming input (left recursion)");
}

}  // namespace

GrammarBuilder::GrammarBuilder() = default;
GrammarBuilder::~GrammarBuilder() = default;

GrammarBuilder::Expr GrammarBuilder::add(Node node) {
  for (int32_t child : node.children)
    if (child < 0 || static_cast<size_t>(child) >= nodes_.size())
      throw std::invalid_argument("grammar: an expression from another builder");
  nodes_.push_back(std::move(node));
  return {static_cast<int32_t>(nodes_.size() - 1)};
}

GrammarBuilder::Expr GrammarBuilder::empty() {
  return add({});
}

GrammarBuilder::Expr GrammarBuilder::literal(std::string_view utf8) {
  if (auto bad = text::first_invalid_byte(utf8))
    throw std::invalid_argument("grammar: literal is not UTF-8 at byte " + std::to_string(*bad));
  Node node;
  node.kind = Node::Kind::literal;
  node.text = text::to_code_points(utf8);
  return add(std::move(node));
}

GrammarBuilder::Expr GrammarBuilder::chars(std::vector<CodepointRange> ranges, bool negated) {
  Node node;
  node.kind = Node::Kind::chars;
  node.ranges = normalize_ranges(std::move(ranges), negated);
  return add(std::move(node));
}

GrammarBuilder::Expr GrammarBuilder::sequence(std::vector<Expr> items) {
  Node node;
  node.kind = Node::Kind::sequence;
  for (Expr item : items)
    node.children.push_back(item.id);
  return add(std::move(node));
}

GrammarBuilder::Expr GrammarBuilder::choice(std::vector<Expr> alternatives) {
  // The same expression twice is one reading kept twice over (an anyOf of one $ref repeated),
  // which only multiplies the matcher's work.
  std::vector<Expr> distinct;
  for (Expr alternative : alternatives) {
    bool seen = std::any_of(distinct.begin(), distinct.end(),
                            [&](Expr earlier) { return earlier.id == alternative.id; });
    if (!seen) distinct.push_back(alternative);
  }
  if (distinct.size() == 1) return distinct[0];
  Node node;
  node.kind = Node::Kind::choice;
  for (Expr alternative : distinct)
    node.children.push_back(alternative.id);
  if (node.children.empty()) return chars({});  // no alternative: nothing matches
  return add(std::move(node));
}

GrammarBuilder::Expr GrammarBuilder::repeat(Expr item, int min, int max) {
  if (min < 0 || (max >= 0 && max < min) || max > kMaxRepeat || min > kMaxRepeat)
    throw std::invalid_argument("grammar: repeat bounds {" + std::to_string(min) + "," +
                                std::to_string(max) + "} are out of order or too large");
  if (min == 1 && max == 1) return item;
  if (max == 0) return empty();
  Node node;
  node.kind = Node::Kind::repeat;
  node.children = {item.id};
  node.min = min;
  node.max = max;
  return add(std::move(node));
}

GrammarBuilder::Expr GrammarBuilder::rule() {
  Node node;
  node.kind = Node::Kind::rule;
  return add(std::move(node));
}

void GrammarBuilder::define(Expr rule, Expr body) {
  Node& node = nodes_.at(static_cast<size_t>(rule.id));
  if (node.kind != Node::Kind::rule || !node.children.empty())
    throw std::invalid_argument("grammar: define() needs a rule() not yet defined");
  if (body.id < 0 || static_cast<size_t>(body.id) >= nodes_.size())
    throw std::invalid_argument("grammar: an expression from another builder");
  node.children = {body.id};
}

std::shared_ptr<const Grammar> GrammarBuilder::build(Expr root, const GrammarLimits& limits) {
  if (root.id < 0 || static_cast<size_t>(root.id) >= nodes_.size())
    throw std::invalid_argument("grammar: an expression from another builder");
  Lowering lowering(nodes_, limits.max_symbols);
  uint32_t root_rule = lowering.lower_root(root.id);
  auto& rules = lowering.rules_;
  std::vector<bool> productive = prune_unproductive(rules, lowering.charsets_);
  if (!productive[root_rule]) throw std::invalid_argument("grammar: accepts no sentence at all");
  refuse_left_recursion(rules, nullable_rules(rules));

  auto grammar = std::make_shared<Grammar>();
  grammar->root_ = root_rule;
  grammar->limits_ = limits;
  for (const auto& alternatives : rules) {
    grammar->rule_alternatives_.push_back(
        static_cast<uint32_t>(grammar->alternative_starts_.size()));
    uint32_t first = static_cast<uint32_t>(grammar->symbols_.size());
    for (const Alternative& alternative : alternatives) {
      grammar->alternative_starts_.push_back(static_cast<uint32_t>(grammar->symbols_.size()));
      grammar->symbols_.insert(grammar->symbols_.end(), alternative.begin(), alternative.end());
      grammar->symbols_.push_back({Grammar::SymbolKind::end, 0});
    }
    grammar->rule_spans_.emplace_back(first, static_cast<uint32_t>(grammar->symbols_.size()));
  }
  grammar->rule_alternatives_.push_back(static_cast<uint32_t>(grammar->alternative_starts_.size()));
  for (const auto& ranges : lowering.charsets_) {
    grammar->charset_offsets_.push_back(static_cast<uint32_t>(grammar->charset_ranges_.size()));
    grammar->charset_ranges_.insert(grammar->charset_ranges_.end(), ranges.begin(), ranges.end());
    size_t base = grammar->charset_ascii_.size();
    grammar->charset_ascii_.resize(base + 128, 0);
    for (const CodepointRange& range : ranges)
      for (uint32_t c = range.first; c <= std::min<uint32_t>(range.last, 127); ++c)
        grammar->charset_ascii_[base + c] = 1;
  }
  grammar->charset_offsets_.push_back(static_cast<uint32_t>(grammar->charset_ranges_.size()));
  grammar->repeat_levels_ = std::move(lowering.repeat_levels_);
  return grammar;
}

GrammarBuilder::Expr GrammarBuilder::json_schema(const boost::json::value& schema) {
  if (!json_) json_ = std::make_unique<JsonGrammar>(*this);
  return json_->schema(schema);
}

GrammarBuilder::Expr GrammarBuilder::any_json_object() {
  if (!json_) json_ = std::make_unique<JsonGrammar>(*this);
  return json_->any_object();
}

GrammarBuilder::Expr GrammarBuilder::any_json_value() {
  if (!json_) json_ = std::make_unique<JsonGrammar>(*this);
  return json_->any_value();
}

std::shared_ptr<const Grammar> compile_json_schema(const boost::json::value& schema,
                                                   const GrammarLimits& limits) {
  GrammarBuilder builder;
  GrammarBuilder::Expr root = builder.json_schema(schema);
  try {
    return builder.build(root, limits);
  } catch (const std::invalid_argument& error) {
    // The schema compiler refuses $ref cycles itself; this is the grammar's own safety net.
    bool empty = std::string_view(error.what()).find("no sentence") != std::string_view::npos;
    throw SchemaError(empty ? "false" : "$ref", "",
                      empty ? "no instance can satisfy the schema"
                            : std::string("the schema cannot be enforced: ") + error.what());
  }
}

}  // namespace chatflow::grammar
