// The multipart/form-data reader of POST /v1/documents: parts as browsers and curl -F send them,
// and each malformed body refused with a 400 saying what is wrong.
#include "framework/server/document_routes.h"

#include <gtest/gtest.h>

namespace chatflow::server {
namespace {

const std::string kType = "multipart/form-data; boundary=----edge42";

std::string status_and_message(std::string_view type, std::string_view body) {
  try {
    parse_form(type, body);
  } catch (const RequestFailure& failure) {
    return std::to_string(failure.error().status) + " " + failure.error().message;
  }
  return "parsed";
}

TEST(DocumentForm, PartsKeepTheirNameFileNameTypeAndExactBytes) {
  std::string body =
      "------edge42\r\n"
      "Content-Disposition: form-data; name=\"file\"; filename=\"a; \\\"b\\\".md\"\r\n"
      "Content-Type: text/markdown\r\n\r\n"
      "# Title\r\nline two\r\n\r\n"
      "------edge42\r\n"
      "content-disposition: form-data; name=name\r\n\r\n"
      "Shown name\r\n"
      "------edge42--\r\n";
  auto parts = parse_form(kType, body);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].name, "file");
  EXPECT_EQ(parts[0].filename, "a; \"b\".md");
  EXPECT_EQ(parts[0].content_type, "text/markdown");
  EXPECT_EQ(parts[0].body, "# Title\r\nline two\r\n");
  EXPECT_EQ(parts[1].name, "name");
  EXPECT_EQ(parts[1].filename, "");
  EXPECT_EQ(parts[1].body, "Shown name");
}

TEST(DocumentForm, TheBoundaryMayBeQuoted) {
  auto parts = parse_form("multipart/form-data; boundary=\"x y\"",
                          "--x y\r\nContent-Disposition: form-data; name=\"file\"; "
                          "filename=\"t.txt\"\r\n\r\ntext\r\n--x y--");
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].body, "text");
}

TEST(DocumentForm, MalformedBodiesAreRefusedSayingWhy) {
  EXPECT_EQ(status_and_message("multipart/form-data", "--x\r\n"),
            "400 the multipart/form-data Content-Type names no boundary");
  EXPECT_EQ(status_and_message(kType, "no boundary here"),
            "400 the form body does not contain its boundary '----edge42'");
  EXPECT_EQ(status_and_message(kType,
                               "------edge42\r\nContent-Disposition: form-data; "
                               "name=\"file\"\r\n\r\nthe text, cut short"),
            "400 the form body ends before its closing boundary (was it cut short?)");
  EXPECT_EQ(status_and_message(kType, "------edge42\r\nContent-Disposition: form-data"),
            "400 a form part has no end of its headers");
  EXPECT_EQ(status_and_message(kType, "------edge42garbage"),
            "400 the form body is malformed after a boundary");
}

}  // namespace
}  // namespace chatflow::server
