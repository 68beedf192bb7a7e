// The retract marker on the wire: a stream whose request output moderation retracted ends with
// an ordinary chunk event (no SSE event name, which the OpenAI clients would misread) carrying
// finish_reason "content_filter" and "chatflow": {"retract": {"reason"}}, beside any other
// extension field of that event; a stream without it carries no such field.
#include "framework/openai/retract.h"

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "framework/openai/openai_protocol.h"

namespace chatflow::openai {
namespace {

namespace json = boost::json;

// The JSON objects of the `data:` lines of `events`, [DONE] left out; a named event fails.
std::vector<json::object> data_of(const std::string& events) {
  std::vector<json::object> objects;
  size_t position = 0;
  while (position < events.size()) {
    size_t end = events.find("\n\n", position);
    std::string event = events.substr(position, end - position);
    position = end + 2;
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << "not a plain data event: " << event;
    std::string data = event.substr(6);
    if (data != "[DONE]") objects.push_back(json::parse(data).as_object());
  }
  return objects;
}

TEST(Retract, TheLastChunkCarriesTheMarkerAndTheFinishReason) {
  Request request;
  request.id = "chatcmpl-1";
  request.model = "m";
  request.include_usage = true;
  SseEncoder encoder;
  std::string events = encoder.encode(request, Chunk::delta("a dragon"));
  EXPECT_EQ(events.find("retract"), std::string::npos);
  request.annotate(std::string(kRetractAnnotation), "content_filter");
  Chunk last = Chunk::delta("\n\n[withdrawn]");
  last.finish = FinishReason::content_filter;
  events += encoder.encode(request, last);
  auto objects = data_of(events);
  ASSERT_EQ(objects.size(), 5u);  // role, text, notice, finish, usage
  EXPECT_EQ(json::value_to<std::string>(objects[2].at("choices").at(0).at("delta").at("content")),
            "\n\n[withdrawn]");
  const json::object& finish = objects[3];
  EXPECT_EQ(finish.at("choices").at(0).at("finish_reason"), "content_filter");
  EXPECT_EQ(finish.at("chatflow").at("retract").at("reason"), "content_filter");
  for (size_t i : {0u, 1u, 2u, 4u})
    EXPECT_FALSE(objects[i].contains("chatflow")) << i;
  EXPECT_FALSE(finish.contains("error")) << "an error field makes the OpenAI clients throw";
}

TEST(Retract, TheMarkerJoinsTheCitationsOfTheSameEvent) {
  Request request;
  request.id = "cmpl-2";
  request.kind = RequestKind::completion;  // no role event first: the finish is the first event
  request.citations.push_back({"Dragons hoard gold.", "bestiary.md", "The Bestiary", 0, 1.0});
  request.annotate(std::string(kRetractAnnotation), "moderation_unavailable");
  SseEncoder encoder;
  Chunk only;
  only.finish = FinishReason::content_filter;
  auto objects = data_of(encoder.encode(request, only));
  ASSERT_EQ(objects.size(), 1u);
  const json::object& finish = objects[0];
  EXPECT_EQ(finish.at("choices").at(0).at("finish_reason"), "content_filter");
  EXPECT_EQ(finish.at("chatflow").at("retract").at("reason"), "moderation_unavailable");
  EXPECT_EQ(finish.at("chatflow").at("citations").as_array().size(), 1u);
}

}  // namespace
}  // namespace chatflow::openai
