// output_moderation: checks the answer while it streams. The last `window_chars` characters are
// held back, so a phone number or a blocked phrase split over several chunks is seen whole
// before any of it leaves. Detectors: rule lists (normalised as for input moderation) and
// personal data (pii.h). Actions: `mask` replaces the match with `mask_text`; `abort` ends the
// stream there with finish_reason "content_filter" and a notice, which stops the engine.
// The cost is latency: text reaches the client `window_chars` characters later.
//
// The reasoning (Chunk::reasoning) is screened the same way in a window of its own, released
// whole once the answer's text or a tool call follows it. A structured tool call (an upstream
// engine's) is screened whole as it comes: the strings in its arguments are masked (which keeps
// them JSON), and a match to abort on ends the answer before the call.
//
// A moderation provider (moderation_provider.h) judges the answer too, without holding it back:
// every `check_every_chars` characters (at a sentence end when one comes soon) the answer so far
// is sent to it while tokens keep flowing, one check at a time, and at the end the whole answer
// once more, which the last chunk waits for (held, off the pipeline thread: held_stream.h).
// When a verdict trips after text reached the client, the stream ends with `retract_notice`,
// finish_reason "content_filter" and chatflow's retract marker (framework/openai/retract.h):
// clients remove what they showed. A non-streamed answer
// is held whole until judged, and then is the notice alone. No verdict in time: fail_open lets
// the answer be (annotation "output_moderation_error"); fail_closed retracts it (reason
// "moderation_unavailable"), or answers 503 when nothing was sent yet (not streamed).
#include <atomic>

#include <boost/json.hpp>

#include "framework/api/held_stream.h"
#include "framework/moderation/pii.h"
#include "framework/openai/retract.h"
#include "framework/text/normalizer.h"
#include "stages/moderation_lists.h"
#include "stages/moderation_provider.h"

namespace chatflow {
namespace {

struct OutputModerationConfig {
  std::map<std::string, std::string> lists;
  std::vector<std::string> pii = {"phone", "card", "email", "cn_id"};
  std::string pii_action = "mask";
  int window_chars = 32;
  std::string mask_text = "[redacted]";
  std::string notice = "\n\n[This answer was stopped by the content filter.]";
  ModerationProviderConfig provider;
  int64_t check_every_chars = 300;
  int64_t max_check_chars = 8000;
  std::string retract_notice = "\n\n[This answer was withdrawn by the content filter.]";
};

using moderation::CheckOutcome;
using moderation::PendingCheck;

struct Span {
  size_t begin;
  size_t end;
  bool abort;
  std::string what;  // "phone", or a rule list's name
};

// What the provider's verdicts came to when they stop the answer.
struct Trip {
  std::string reason;   // content_filter, moderation_unavailable
  std::string note;     // the output_moderation annotation's value
  std::string message;  // why, for a 503
};

struct HeldText : StreamState {
  std::string pending;            // the answer's text not yet released
  std::string pending_reasoning;  // the same for its reasoning
  int64_t tokens = 0;
  std::vector<std::string> masked;
  // The provider's side: the answer released so far, how much of it the last check covered,
  // the checks in flight, the categories only flagged, and (not streamed) the answer held whole.
  std::string answer;
  size_t answer_chars = 0;
  size_t checked_chars = 0;
  std::vector<std::shared_ptr<PendingCheck>> checks;
  std::vector<std::string> flagged;
  Chunk withheld;

  ~HeldText() override { abandon_checks(); }
  void abandon_checks() {
    for (auto& check : checks)
      check->abandon();
    checks.clear();
  }
};

size_t count_characters(std::string_view text) {
  size_t count = 0;
  for (char c : text)
    count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return count;
}

// The byte offset that leaves the last `characters` characters of `text` after it.
size_t keep_last_characters(const std::string& text, int64_t characters) {
  size_t position = text.size();
  while (characters > 0 && position > 0) {
    --position;
    while (position > 0 && (static_cast<unsigned char>(text[position]) & 0xC0) == 0x80)
      --position;
    --characters;
  }
  return position;
}

// Whether `text` ends a sentence (or a line), trailing spaces aside.
bool ends_sentence(std::string_view text) {
  size_t end = text.find_last_not_of(" \t");
  if (end == std::string_view::npos) return false;
  std::string_view last = text.substr(0, end + 1);
  for (std::string_view mark : {".", "!", "?", ";", "\n", "。", "！", "？", "；", "…"}) {
    if (last.ends_with(mark)) return true;
  }
  return false;
}

// Whether a chunk brings the client anything to show.
bool carries_output(const Chunk& chunk) {
  return !chunk.text.empty() || !chunk.reasoning.empty() || !chunk.tool_calls.empty();
}

const Span* first_abort(const std::vector<Span>& spans) {
  for (const auto& span : spans) {
    if (span.abort) return &span;
  }
  return nullptr;
}

void append(Chunk& into, Chunk&& piece) {
  into.text += piece.text;
  into.reasoning += piece.reasoning;
  into.tool_calls.insert(into.tool_calls.end(), std::make_move_iterator(piece.tool_calls.begin()),
                         std::make_move_iterator(piece.tool_calls.end()));
  into.token_ids.insert(into.token_ids.end(), piece.token_ids.begin(), piece.token_ids.end());
  into.tokens_without_ids += piece.tokens_without_ids;
  into.logprobs.insert(into.logprobs.end(), std::make_move_iterator(piece.logprobs.begin()),
                       std::make_move_iterator(piece.logprobs.end()));
}

class OutputModerationStage final : public StreamStage {
 public:
  OutputModerationStage(const OutputModerationConfig& config, std::vector<ActionList> lists,
                        moderation::PiiDetectors detectors, bool any_pii,
                        std::shared_ptr<ModerationHook> provider)
      : config_(config),
        lists_(std::move(lists)),
        detectors_(detectors),
        any_pii_(any_pii),
        provider_(std::move(provider)) {}

  void process(StreamContext& context, Chunk chunk) override {
    auto& held = context.state<HeldText>();
    held.pending += chunk.text;
    held.pending_reasoning += chunk.reasoning;
    held.tokens += chunk.token_count();
    Screened screened{find(held.pending_reasoning), find(held.pending), {}, {}};
    for (ToolCall& call : chunk.tool_calls) {
      screened.call_abort = screen_call(call, held);
      if (screened.call_abort) break;
      screened.calls.push_back(std::move(call));
    }
    bool abort = screened.call_abort || first_abort(screened.reasoning_spans) ||
                 first_abort(screened.text_spans);
    Chunk out = abort ? aborted(context.request(), held, screened, std::move(chunk))
                      : released(context.request(), held, screened, std::move(chunk));
    if (provider_) return screen(context, held, std::move(out));
    // An aborted chunk ends the stream: the engine drops the sequence.
    if (carries_output(out) || out.is_final() || out.token_count() > 0)
      context.emit(std::move(out));
  }

 private:
  // What the rules found in what is held: matches in the reasoning and in the text, the chunk's
  // calls that passed (masked where they matched), and the call that ended the answer, if one did.
  struct Screened {
    std::vector<Span> reasoning_spans;
    std::vector<Span> text_spans;
    std::vector<ToolCall> calls;
    std::optional<std::string> call_abort;
  };

  // The stream's end at a match whose action is abort: what came before it (in the reasoning or
  // the text, each up to its first such match; the calls before the one that matched), and the
  // notice.
  Chunk aborted(Request& request, HeldText& held, Screened& screened, Chunk chunk) const {
    const Span* in_reasoning = first_abort(screened.reasoning_spans);
    const Span* in_text = first_abort(screened.text_spans);
    Chunk out;
    out.reasoning =
        masked(held.pending_reasoning, screened.reasoning_spans,
               in_reasoning ? in_reasoning->begin : held.pending_reasoning.size(), held);
    out.text = masked(held.pending, screened.text_spans,
                      in_text ? in_text->begin : held.pending.size(), held) +
               config_.notice;
    // The calls came after this chunk's text: they stay out unless a call itself matched.
    if (!in_reasoning && !in_text) out.tool_calls = std::move(screened.calls);
    out.token_ids = std::move(chunk.token_ids);
    out.tokens_without_ids = chunk.tokens_without_ids;
    out.finish = FinishReason::content_filter;
    out.usage = Usage{request.usage.prompt_tokens, held.tokens, request.usage.cached_prompt_tokens};
    std::string what = in_reasoning ? in_reasoning->what
                       : in_text    ? in_text->what
                                    : *screened.call_abort;
    request.annotate("output_moderation", "aborted:" + what);
    held.pending.clear();
    held.pending_reasoning.clear();
    return out;
  }

  // Where `pending` may be cut now: all of it with `whole`, else all but the window; never
  // inside a match, which is held back whole until it is masked.
  size_t release_point(const std::string& pending, const std::vector<Span>& spans,
                       bool whole) const {
    size_t release = whole ? pending.size() : keep_last_characters(pending, config_.window_chars);
    for (bool moved = true; moved;) {
      moved = false;
      for (const auto& span : spans) {
        if (span.begin < release && span.end > release) {
          release = span.begin;
          moved = true;
        }
      }
    }
    return release;
  }

  // pending[0, release_point) masked, taken out of `pending`.
  std::string take(std::string& pending, const std::vector<Span>& spans, bool whole,
                   HeldText& held) const {
    size_t release = release_point(pending, spans, whole);
    std::string out = masked(pending, spans, release, held);
    pending.erase(0, release);
    return out;
  }

  // What may leave now: all but the window of the reasoning and of the text (all of it at the
  // end). The text or a call that follows the reasoning ends it for now: no match spans that
  // boundary, so the reasoning's window leaves ahead of them; a call does the same to the text.
  Chunk released(Request& request, HeldText& held, Screened& screened, Chunk chunk) const {
    bool last = chunk.is_final();
    bool calls = !screened.calls.empty();
    Chunk out;
    out.reasoning = take(held.pending_reasoning, screened.reasoning_spans,
                         last || calls || !chunk.text.empty(), held);
    out.text = take(held.pending, screened.text_spans, last || calls, held);
    out.tool_calls = std::move(screened.calls);
    out.token_ids = std::move(chunk.token_ids);
    out.tokens_without_ids = chunk.tokens_without_ids;
    out.logprobs = std::move(chunk.logprobs);
    out.finish = chunk.finish;
    out.usage = chunk.usage;
    if (chunk.is_final() && !held.masked.empty())
      request.annotate("output_moderation", "masked:" + join_names(held.masked, ","));
    return out;
  }

  // The provider's part: verdicts that came back, a check when one is due, and the chunk
  // passed on (streamed) or kept (not streamed) unless a verdict ends the answer. The last
  // chunk, when verdicts are still out, waits for them off the pipeline thread (hold_end).
  void screen(StreamContext& context, HeldText& held, Chunk out) const {
    Request& request = context.request();
    std::string shown = out.reasoning + out.text;
    for (const auto& call : out.tool_calls)
      shown += call.name + call.arguments;
    held.answer += shown;
    held.answer_chars += count_characters(shown);
    bool last = out.is_final();
    std::optional<Trip> trip = collect(request, held);
    if (!trip && (last ? held.answer_chars > held.checked_chars : due(held)))
      start_check(request, held);
    if (!trip && last && !held.checks.empty()) return hold_end(context, held, std::move(out));
    if (auto chunk = conclude(request, held, trip, std::move(out))) context.emit(std::move(*chunk));
  }

  // One answer's end, waiting for its last verdicts: the runner's thread that brings the last
  // of them ends the stream. The stage outlives it (the pipeline waits for the held stream),
  // and so does the request's state (the held stream holds the request).
  struct Ending {
    Ending(const OutputModerationStage& stage, HeldStream stream, Request& request, HeldText& held,
           Chunk out)
        : stage(stage),
          stream(std::move(stream)),
          request(request),
          held(held),
          out(std::move(out)) {}

    void arrive() {
      if (waiting.fetch_sub(1) != 1) return;
      try {
        std::optional<Chunk> chunk =
            stage.conclude(request, held, stage.collect(request, held), std::move(out));
        stream.emit(std::move(*chunk));  // the final chunk: there always is one
      } catch (const RequestFailure& failure) {
        stream.fail(failure.error());
      } catch (const std::exception& error) {
        stream.fail(RequestError{500,
                                 "server_error",
                                 std::string("output moderation failed: ") + error.what(),
                                 "stage_failed",
                                 {}});
      }
    }

    const OutputModerationStage& stage;
    HeldStream stream;
    Request& request;
    HeldText& held;
    Chunk out;
    std::atomic<size_t> waiting{0};
  };

  void hold_end(StreamContext& context, HeldText& held, Chunk out) const {
    auto ending = std::make_shared<Ending>(*this, hold_stream(context), context.request(), held,
                                           std::move(out));
    std::vector<std::shared_ptr<PendingCheck>> checks = held.checks;
    ending->waiting = checks.size();
    for (const auto& check : checks)
      provider_->when_settled(check, [ending] { ending->arrive(); });
  }

  bool due(const HeldText& held) const {
    if (!held.checks.empty()) return false;  // one at a time: the next covers what came meanwhile
    auto fresh = static_cast<int64_t>(held.answer_chars - held.checked_chars);
    if (fresh < config_.check_every_chars) return false;
    return fresh >= 2 * config_.check_every_chars || ends_sentence(held.answer);
  }

  void start_check(const Request& request, HeldText& held) const {
    std::string text =
        held.answer.substr(keep_last_characters(held.answer, config_.max_check_chars));
    std::string question =
        request.kind == RequestKind::completion ? request.prompt : request.last_user_message();
    held.checks.push_back(
        provider_->start(request, std::move(text), moderation::Speaker::assistant, question));
    held.checked_chars = held.answer_chars;
  }

  // The checks that ended: the first that stops the answer, if one does.
  std::optional<Trip> collect(Request& request, HeldText& held) const {
    std::optional<Trip> trip;
    std::erase_if(held.checks, [&](const std::shared_ptr<PendingCheck>& check) {
      if (trip) return false;
      std::optional<CheckOutcome> outcome = check->poll();
      if (!outcome) return false;
      if (outcome->kind != CheckOutcome::Kind::verdict) {
        request.annotate("output_moderation_error", provider_->error_note(*outcome));
        if (provider_->on_error() == moderation::OnError::fail_closed) {
          trip = Trip{"moderation_unavailable", "retracted:moderation_unavailable",
                      "the content filter could not check the answer: " + provider_->describe() +
                          " " + provider_->failure_text(*outcome) + "; retry later"};
        }
        return true;
      }
      Judgement judgement = provider_->judge(outcome->verdict);
      for (const auto& category : judgement.noted) {
        if (std::find(held.flagged.begin(), held.flagged.end(), category) == held.flagged.end())
          held.flagged.push_back(category);
      }
      if (!judgement.acted.empty())
        trip = Trip{"content_filter", "retracted:" + join_names(judgement.acted, ","), {}};
      return true;
    });
    return trip;
  }

  // What leaves after `out` given the verdicts so far: the retracted end, `out` itself
  // (streamed), or at the end the whole answer held back (not streamed); nothing while a
  // non-streamed answer is still being kept. Throws RequestFailure (503) for a non-streamed
  // answer no verdict could be had for under fail_closed.
  std::optional<Chunk> conclude(Request& request, HeldText& held, const std::optional<Trip>& trip,
                                Chunk out) const {
    if (trip) return retracted(request, held, *trip, std::move(out));
    bool last = out.is_final();
    if (last && !held.flagged.empty()) {
      std::string noted = "flagged:" + join_names(held.flagged, ",");
      auto earlier = request.annotation("output_moderation");
      request.annotate("output_moderation", earlier ? *earlier + ";" + noted : noted);
    }
    if (!request.stream) {
      // Nothing leaves before the verdict on the whole answer.
      append(held.withheld, std::move(out));
      if (!last) return std::nullopt;
      out.text = std::move(held.withheld.text);
      out.reasoning = std::move(held.withheld.reasoning);
      out.tool_calls = std::move(held.withheld.tool_calls);
      out.token_ids = std::move(held.withheld.token_ids);
      out.tokens_without_ids = held.withheld.tokens_without_ids;
      out.logprobs = std::move(held.withheld.logprobs);
    }
    if (!carries_output(out) && !out.is_final() && out.token_count() == 0) return std::nullopt;
    return out;
  }

  // The answer's end: a streamed one with the notice and the retract marker, a held one with
  // the notice in its place (or a 503 when no verdict could be had).
  Chunk retracted(Request& request, HeldText& held, const Trip& trip, Chunk out) const {
    held.abandon_checks();
    held.withheld = Chunk{};
    request.annotate("output_moderation", trip.note);
    if (!request.stream && trip.reason == "moderation_unavailable")
      throw RequestFailure(503, "server_error", trip.message, "moderation_unavailable");
    Chunk last;
    if (request.stream) {
      request.annotate(std::string(openai::kRetractAnnotation), trip.reason);
      last.text = config_.retract_notice;
    } else {
      size_t begin = config_.retract_notice.find_first_not_of(" \t\r\n");
      last.text = begin == std::string::npos ? "" : config_.retract_notice.substr(begin);
    }
    last.token_ids = std::move(out.token_ids);
    last.tokens_without_ids = out.tokens_without_ids;
    last.finish = FinishReason::content_filter;
    last.usage =
        Usage{request.usage.prompt_tokens, held.tokens, request.usage.cached_prompt_tokens};
    return last;  // ends the stream: the engine drops the sequence
  }

  // A structured call, screened whole: each string in its arguments is masked where it matches,
  // so the arguments stay the JSON they were (arguments that are not JSON are screened as text).
  // Returns what matched when a match's action is abort.
  std::optional<std::string> screen_call(ToolCall& call, HeldText& held) const {
    boost::system::error_code error;
    boost::json::value arguments = boost::json::parse(call.arguments, error);
    if (error) {
      std::vector<Span> spans = find(call.arguments);
      if (const Span* abort = first_abort(spans)) return abort->what;
      call.arguments = masked(call.arguments, spans, call.arguments.size(), held);
      return std::nullopt;
    }
    bool changed = false;
    std::optional<std::string> abort = screen_strings(arguments, held, changed);
    if (!abort && changed) call.arguments = boost::json::serialize(arguments);
    return abort;
  }

  std::optional<std::string> screen_strings(boost::json::value& value, HeldText& held,
                                            bool& changed) const {
    if (value.is_string()) {
      std::string text(value.as_string());
      std::vector<Span> spans = find(text);
      if (const Span* abort = first_abort(spans)) return abort->what;
      if (!spans.empty()) {
        value = masked(text, spans, text.size(), held);
        changed = true;
      }
    } else if (value.is_object()) {
      for (auto& member : value.as_object()) {
        if (auto abort = screen_strings(member.value(), held, changed)) return abort;
      }
    } else if (value.is_array()) {
      for (auto& item : value.as_array()) {
        if (auto abort = screen_strings(item, held, changed)) return abort;
      }
    }
    return std::nullopt;
  }

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
  std::shared_ptr<ModerationHook> provider_;
};

moderation::PiiDetectors pii_detectors(const std::vector<std::string>& names) {
  moderation::PiiDetectors detectors{false, false, false, false};
  for (const auto& name : names) {
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
  return detectors;
}

StageTypeInfo output_moderation_stage_type() {
  using Config = OutputModerationConfig;
  StageTypeBuilder<Config> type(
      "output_moderation", StageKind::stream,
      "Masks or aborts on rule-list matches and personal data in the streamed answer, holding "
      "back a window of text so matches split across chunks are caught; a moderation provider "
      "judges the answer as it streams and retracts it when it trips.");
  type.port("out", PortKind::stream, "the moderated stream");
  type.config().key("lists", &Config::lists, "rule list file -> mask or abort");
  type.config().key("pii", &Config::pii, "personal-data detectors: phone, card, email, cn_id");
  type.config()
      .key("pii_action", &Config::pii_action, "what personal data gets")
      .choices({"mask", "abort"});
  type.config()
      .key("window_chars", &Config::window_chars,
           "characters held back so matches across chunks are seen whole")
      .range(0, 4096);
  type.config().key("mask_text", &Config::mask_text, "what a masked match becomes");
  type.config().key("notice", &Config::notice, "text sent when the answer is stopped");
  type.config().object("provider", &Config::provider,
                       moderation_provider_schema("category -> retract (the default), flag or "
                                                  "ignore"),
                       "a moderation service or classifier model judging the answer as it "
                       "streams");
  type.config()
      .key("check_every_chars", &Config::check_every_chars,
           "provider: new characters of answer between two checks (at a sentence end within "
           "twice as many)")
      .range(1, 1'000'000);
  type.config()
      .key("max_check_chars", &Config::max_check_chars,
           "provider: each check sends at most the answer's last this many characters")
      .range(1, 10'000'000);
  type.config().key("retract_notice", &Config::retract_notice,
                    "provider: the text that ends a retracted answer (a non-streamed answer is "
                    "this alone)");
  type.create([](const Config& config, StageContext& context) {
    moderation::PiiDetectors detectors = pii_detectors(config.pii);
    return std::make_unique<OutputModerationStage>(
        config, load_action_lists(config.lists, {"mask", "abort"}), detectors, !config.pii.empty(),
        make_moderation_hook(config.provider, context, {"retract", "flag", "ignore"}, "retract"));
  });
  return type.build();
}

CHATFLOW_REGISTER_TYPE(output_moderation_stage_type);

}  // namespace
}  // namespace chatflow
