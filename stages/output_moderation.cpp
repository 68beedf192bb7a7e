// output_moderation: checks the answer while it streams. The last `window_chars` characters are
// held back, so a phone number or a blocked phrase split over several chunks is seen whole
// before any of it leaves. Detectors: rule lists (normalised as for input moderation) and
// personal data (pii.h). Actions: `mask` replaces the match with `mask_text`; `abort` ends the
// stream there with finish_reason "content_filter" and a notice, which stops the engine.
// The cost is latency: text reaches the client `window_chars` characters later.
#include "framework/moderation/pii.h"
#include "framework/text/normalizer.h"
#include "stages/moderation_lists.h"

namespace chatflow {
namespace {

struct OutputModerationConfig {
  std::map<std::string, std::string> lists;
  std::vector<std::string> pii = {"phone", "card", "email", "cn_id"};
  std::string pii_action = "mask";
  int window_chars = 32;
  std::string mask_text = "[redacted]";
  std::string notice = "\n\n[This answer was stopped by the content filter.]";
};

struct Span {
  size_t begin;
  size_t end;
  bool abort;
  std::string what;  // "phone", or a rule list's name
};

struct HeldText : StreamState {
  std::string pending;
  int64_t tokens = 0;
  std::vector<std::string> masked;
};

// The byte offset that leaves the last `characters` characters of `text` after it.
size_t keep_last_characters(const std::string& text, int characters) {
  size_t position = text.size();
  while (characters > 0 && position > 0) {
    --position;
    while (position > 0 && (static_cast<unsigned char>(text[position]) & 0xC0) == 0x80)
      --position;
    --characters;
  }
  return position;
}

class OutputModerationStage final : public StreamStage {
 public:
  OutputModerationStage(const OutputModerationConfig& config, std::vector<ActionList> lists,
                        moderation::PiiDetectors detectors, bool any_pii)
      : config_(config), lists_(std::move(lists)), detectors_(detectors), any_pii_(any_pii) {}

  void process(StreamContext& context, Chunk chunk) override {
    Request& request = context.request();
    auto& held = context.state<HeldText>();
    held.pending += chunk.text;
    held.tokens += chunk.token_count();
    std::vector<Span> spans = find(held.pending);

    const Span* abort = nullptr;
    for (const auto& span : spans) {
      if (span.abort) {
        abort = &span;
        break;
      }
    }
    if (abort) {
      Chunk out;
      out.text = masked(held.pending, spans, abort->begin, held) + config_.notice;
      out.token_ids = std::move(chunk.token_ids);
      out.finish = FinishReason::content_filter;
      out.usage =
          Usage{request.usage.prompt_tokens, held.tokens, request.usage.cached_prompt_tokens};
      request.annotate("output_moderation", "aborted:" + abort->what);
      held.pending.clear();
      context.emit(std::move(out));  // ends the stream: the engine drops the sequence
      return;
    }

    size_t release = chunk.is_final() ? held.pending.size()
                                      : keep_last_characters(held.pending, config_.window_chars);
    // Never release part of a match: hold it back whole until it is masked.
    for (bool moved = true; moved;) {
      moved = false;
      for (const auto& span : spans) {
        if (span.begin < release && span.end > release) {
          release = span.begin;
          moved = true;
        }
      }
    }
    Chunk out;
    out.text = masked(held.pending, spans, release, held);
    held.pending.erase(0, release);
    out.token_ids = std::move(chunk.token_ids);
    out.tokens_without_ids = chunk.tokens_without_ids;
    out.logprobs = std::move(chunk.logprobs);
    out.finish = chunk.finish;
    out.usage = chunk.usage;
    if (chunk.is_final() && !held.masked.empty()) {
      std::string value;
      for (const auto& what : held.masked)
        value += (value.empty() ? "" : ",") + what;
      request.annotate("output_moderation", "masked:" + value);
    }
    if (!out.text.empty() || out.is_final() || out.token_count() > 0) context.emit(std::move(out));
  }

 private:
  std::vector<Span> find(const std::string& text) const {
    std::vector<Span> spans;
    if (any_pii_) {
      bool abort = config_.pii_action == "abort";
      for (const auto& match : moderation::find_pii(text, detectors_))
        spans.push_back(
            {match.begin, match.end, abort, std::string(moderation::to_string(match.kind))});
    }
    if (!lists_.empty()) {
      text::NormalizedText normalized = text::normalize(text);
      for (const auto& [list, action] : lists_) {
        for (const auto& match : list->find_all(normalized.text)) {
          auto [begin, end] = normalized.original_span(match.begin, match.end, text);
          spans.push_back({begin, end, action == "abort", list->name()});
        }
      }
    }
    std::sort(spans.begin(), spans.end(),
              [](const Span& a, const Span& b) { return a.begin < b.begin; });
    return spans;
  }

  // text[0, limit) with every span that lies inside it replaced by the mask.
  std::string masked(const std::string& text, const std::vector<Span>& spans, size_t limit,
                     HeldText& held) const {
    std::string out;
    size_t position = 0;
    for (const auto& span : spans) {
      if (span.abort || span.end > limit || span.begin < position) continue;
      out.append(text, position, span.begin - position);
      out += config_.mask_text;
      position = span.end;
      if (std::find(held.masked.begin(), held.masked.end(), span.what) == held.masked.end())
        held.masked.push_back(span.what);
    }
    if (position < limit) out.append(text, position, limit - position);
    return out;
  }

  OutputModerationConfig config_;
  std::vector<ActionList> lists_;
  moderation::PiiDetectors detectors_;
  bool any_pii_;
};

StageTypeInfo output_moderation_stage_type() {
  StageTypeBuilder<OutputModerationConfig> type(
      "output_moderation", StageKind::stream,
      "Masks or aborts on rule-list matches and personal data in the streamed answer, holding "
      "back a window of text so matches split across chunks are caught.");
  type.port("out", PortKind::stream, "the moderated stream");
  type.config().key("lists", &OutputModerationConfig::lists, "rule list file -> mask or abort");
  type.config().key("pii", &OutputModerationConfig::pii,
                    "personal-data detectors: phone, card, email, cn_id");
  type.config()
      .key("pii_action", &OutputModerationConfig::pii_action, "what personal data gets")
      .choices({"mask", "abort"});
  type.config()
      .key("window_chars", &OutputModerationConfig::window_chars,
           "characters held back so matches across chunks are seen whole")
      .range(0, 4096);
  type.config().key("mask_text", &OutputModerationConfig::mask_text, "what a masked match becomes");
  type.config().key("notice", &OutputModerationConfig::notice,
                    "text sent when the answer is stopped");
  type.create([](const OutputModerationConfig& config, StageContext&) {
    moderation::PiiDetectors detectors{false, false, false, false};
    for (const auto& name : config.pii) {
      if (name == "phone") {
        detectors.phone = true;
      } else if (name == "card") {
        detectors.card = true;
      } else if (name == "email") {
        detectors.email = true;
      } else if (name == "cn_id") {
        detectors.cn_id = true;
      } else {
        throw ConfigError("pii: unknown detector '" + name + "' (phone, card, email, cn_id)");
      }
    }
    return std::make_unique<OutputModerationStage>(
        config, load_action_lists(config.lists, {"mask", "abort"}), detectors, !config.pii.empty());
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(output_moderation_stage_type);

}  // namespace
}  // namespace chatflow
