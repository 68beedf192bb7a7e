// The web UI's file serving: only files under the root, however the path is spelled; ETag and
// 304; gzip that inflates back to the file; the security headers on HTML; the not-built answer;
// the in-memory copy: kept, replaced when the file changes, dropped when it goes, and never a
// torn mix while another thread rewrites the file. One StaticFiles per test, as one server has.
#include "framework/server/static_files.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace chatflow::server {
namespace {

namespace fs = std::filesystem;

std::string header(const Response& response, std::string_view name) {
  for (const auto& [key, value] : response.headers)
    if (key == name) return value;
  return {};
}

class StaticFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ =
        fs::temp_directory_path() /
        ("chatflow-static-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(base_);
    root_ = base_ / "web";
    fs::create_directories(root_ / "assets");
    write(root_ / "index.html", "<!doctype html><title>chat</title>" + std::string(2000, ' '));
    write(root_ / "dashboard.html", "<!doctype html><title>dashboard</title>");
    script_ = "console.log('hello');\n";
    for (int i = 0; i < 200; ++i)
      script_ += "export const value" + std::to_string(i) + " = " + std::to_string(i) + ";\n";
    write(root_ / "assets" / "chat-ABCD1234.js", script_);
    write(root_ / "assets" / "plain.css", "body { color: red; }");
    write(base_ / "secret.txt", "the key is 42");
    fs::create_symlink(base_ / "secret.txt", root_ / "assets" / "link.txt");
    files_ = std::make_unique<StaticFiles>(root_.string());
  }
  void TearDown() override { fs::remove_all(base_); }

  static void write(const fs::path& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  }

  // Moves the file's modification time on by a second (a same-size edit within one clock tick
  // would otherwise look unchanged).
  static void touch_later(const fs::path& path) {
    fs::last_write_time(path, fs::last_write_time(path) + std::chrono::seconds(1));
  }

  Response get(std::string_view path, HeaderFields headers = {}) {
    auto answer = files_->answer("GET", path, headers);
    EXPECT_TRUE(answer.has_value()) << path;
    return answer ? *answer : Response(0, "");
  }

  fs::path base_;
  fs::path root_;
  std::string script_;
  std::unique_ptr<StaticFiles> files_;
};

TEST_F(StaticFilesTest, ServesThePagesAndAssetsWithTheirTypes) {
  Response index = get("/");
  EXPECT_EQ(index.status, 200);
  EXPECT_EQ(index.content_type, "text/html; charset=utf-8");
  EXPECT_NE(index.body.find("<title>chat</title>"), std::string::npos);
  EXPECT_NE(get("/dashboard").body.find("dashboard"), std::string::npos);
  Response script = get("/assets/chat-ABCD1234.js");
  EXPECT_EQ(script.status, 200);
  EXPECT_EQ(script.content_type, "application/javascript; charset=utf-8");
  EXPECT_EQ(script.body, script_);
  EXPECT_EQ(get("/assets/plain.css").content_type, "text/css; charset=utf-8");
  EXPECT_FALSE(files_->answer("GET", "/v1/models", {}).has_value());
  EXPECT_EQ(files_->answer("POST", "/", {})->status, 405);
}

TEST_F(StaticFilesTest, RefusesEveryPathOutsideTheRoot) {
  for (std::string_view path :
       {"/assets/../secret.txt", "/assets/..%2fsecret.txt", "/assets/%2e%2e%2fsecret.txt",
        "/assets/%2E%2E/secret.txt", "/assets//etc/passwd", "/assets/%2fetc%2fpasswd",
        "/assets/chat-ABCD1234.js%00.png", "/assets/..", "/assets/.hidden", "/assets/a\\b",
        "/assets/%5c..%5csecret.txt", "/assets/link.txt", "/assets/missing.js", "/assets/",
        "/assets/%zz"}) {
    Response response = get(path);
    EXPECT_EQ(response.status, 404) << path;
    EXPECT_EQ(response.content_type, "application/json") << path;
    EXPECT_NE(response.body.find("\"not_found\""), std::string::npos) << path;
    EXPECT_EQ(response.body.find("42"), std::string::npos) << path;
  }
}

TEST_F(StaticFilesTest, HtmlIsRevalidatedWithItsEtag) {
  Response first = get("/");
  EXPECT_EQ(header(first, "Cache-Control"), "no-cache");
  std::string etag = header(first, "ETag");
  ASSERT_FALSE(etag.empty());
  Response again = get("/", {{"if-none-match", etag}});
  EXPECT_EQ(again.status, 304);
  EXPECT_TRUE(again.body.empty());
  EXPECT_EQ(header(again, "ETag"), etag);
  EXPECT_EQ(get("/", {{"if-none-match", "\"other\", W/" + etag}}).status, 304);
  EXPECT_EQ(get("/", {{"if-none-match", "\"other\""}}).status, 200);
  // A changed file gets a new ETag, and the old one no longer matches.
  write(root_ / "index.html", "<!doctype html><title>new</title>");
  Response changed = get("/", {{"if-none-match", etag}});
  EXPECT_EQ(changed.status, 200);
  EXPECT_NE(header(changed, "ETag"), etag);
}

TEST_F(StaticFilesTest, EveryFileIsInMemoryFromTheStart) {
  for (const char* name :
       {"index.html", "dashboard.html", "assets/chat-ABCD1234.js", "assets/plain.css"})
    EXPECT_TRUE(files_->cached(name)) << name;
  EXPECT_FALSE(files_->cached("assets/link.txt"));  // leads out of the root
  // A hit is the same bytes and ETag, from memory.
  Response first = get("/assets/chat-ABCD1234.js");
  Response second = get("/assets/chat-ABCD1234.js");
  EXPECT_EQ(first.body, second.body);
  EXPECT_EQ(header(first, "ETag"), header(second, "ETag"));
}

TEST_F(StaticFilesTest, AChangedFileIsServedNewWithANewEtag) {
  std::string etag = header(get("/assets/plain.css"), "ETag");
  write(root_ / "assets" / "plain.css", "body { color: blue; margin: 0; }");
  Response longer = get("/assets/plain.css");
  EXPECT_EQ(longer.body, "body { color: blue; margin: 0; }");
  EXPECT_NE(header(longer, "ETag"), etag);
  // The same size, another content, a later modification time.
  std::string previous = header(longer, "ETag");
  write(root_ / "assets" / "plain.css", "body { color: gray; margin: 1; }");
  touch_later(root_ / "assets" / "plain.css");
  Response same_size = get("/assets/plain.css");
  EXPECT_EQ(same_size.body, "body { color: gray; margin: 1; }");
  EXPECT_NE(header(same_size, "ETag"), previous);
  // Only the time moved: the ETag stays (it is the content's hash).
  touch_later(root_ / "assets" / "plain.css");
  EXPECT_EQ(header(get("/assets/plain.css"), "ETag"), header(same_size, "ETag"));
  // A file added after start-up is found and kept too.
  write(root_ / "assets" / "late-1234ABCD.js", script_);
  EXPECT_EQ(get("/assets/late-1234ABCD.js").body, script_);
  EXPECT_TRUE(files_->cached("assets/late-1234ABCD.js"));
}

TEST_F(StaticFilesTest, ADeletedFileIs404AndLeavesMemory) {
  EXPECT_EQ(get("/assets/chat-ABCD1234.js").status, 200);
  fs::remove(root_ / "assets" / "chat-ABCD1234.js");
  Response gone = get("/assets/chat-ABCD1234.js");
  EXPECT_EQ(gone.status, 404);
  EXPECT_FALSE(files_->cached("assets/chat-ABCD1234.js"));
  fs::remove(root_ / "index.html");
  EXPECT_EQ(get("/").status, 404);
  EXPECT_FALSE(files_->cached("index.html"));
}

// 8 threads ask while another replaces the file again and again (as web/build.mjs does: a
// temporary file renamed over it). Every answer is one whole version with its own ETag.
TEST_F(StaticFilesTest, ConcurrentRequestsWhileTheFileIsRewrittenSeeWholeVersions) {
  std::vector<std::string> versions;
  for (int i = 0; i < 4; ++i)
    versions.push_back("<!doctype html><title>v" + std::to_string(i) + "</title>" +
                       std::string(1000 + 700 * i, static_cast<char>('a' + i)));
  const std::set<std::string> whole(versions.begin(), versions.end());
  // Each version's ETag, asked one at a time: under load a body must come with its own.
  std::map<std::string, std::string> etag_of;
  for (const auto& version : versions) {
    write(root_ / "index.html", version);
    etag_of[version] = header(get("/"), "ETag");
  }
  write(root_ / "index.html", versions[0]);
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int round = 0; !done; ++round) {
      fs::path temporary = root_ / ("index.html.tmp" + std::to_string(round % 2));
      write(temporary, versions[round % versions.size()]);
      fs::rename(temporary, root_ / "index.html");
    }
  });
  std::atomic<int> torn{0};
  std::atomic<int> answered{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 8; ++t) {
    readers.emplace_back([&, t] {
      HeaderFields headers;
      if (t % 2) headers.push_back({"accept-encoding", "gzip"});
      for (int i = 0; i < 200; ++i) {
        auto response = files_->answer("GET", "/", headers);
        if (!response || response->status != 200) {
          torn++;
          continue;
        }
        bool packed = header(*response, "Content-Encoding") == "gzip";
        std::string body = packed ? static_detail::gunzip(response->body) : response->body;
        std::string etag = header(*response, "ETag");
        if (packed && etag.ends_with("-gz\"")) etag = etag.substr(0, etag.size() - 4) + "\"";
        if (!whole.contains(body) || etag_of.at(body) != etag) torn++;
        answered++;
      }
    });
  }
  for (auto& reader : readers)
    reader.join();
  done = true;
  writer.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(answered.load(), 8 * 200);
  // Afterwards the copy in memory is the file as it was left.
  std::ifstream in(root_ / "index.html", std::ios::binary);
  std::string last((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(get("/").body, last);
}

TEST_F(StaticFilesTest, HashedAssetsAreImmutableOthersRevalidate) {
  EXPECT_EQ(header(get("/assets/chat-ABCD1234.js"), "Cache-Control"),
            "public, max-age=31536000, immutable");
  EXPECT_EQ(header(get("/assets/plain.css"), "Cache-Control"), "no-cache");
  EXPECT_TRUE(static_detail::is_hashed_name("dashboard-YVFKKCAP.css"));
  EXPECT_FALSE(static_detail::is_hashed_name("chat.js"));
  EXPECT_FALSE(static_detail::is_hashed_name("my-app.js"));
}

TEST_F(StaticFilesTest, GzipWhenAcceptedAndItInflatesToTheFile) {
  Response packed = get("/assets/chat-ABCD1234.js", {{"accept-encoding", "gzip, deflate, br"}});
  EXPECT_EQ(header(packed, "Content-Encoding"), "gzip");
  EXPECT_EQ(header(packed, "Vary"), "Accept-Encoding");
  EXPECT_LT(packed.body.size(), script_.size());
  EXPECT_EQ(static_detail::gunzip(packed.body), script_);
  Response plain = get("/assets/chat-ABCD1234.js");
  EXPECT_EQ(header(plain, "Content-Encoding"), "");
  EXPECT_EQ(header(plain, "Vary"), "Accept-Encoding");
  EXPECT_NE(header(plain, "ETag"), header(packed, "ETag"));
  EXPECT_EQ(header(get("/assets/chat-ABCD1234.js", {{"accept-encoding", "gzip;q=0"}}),
                   "Content-Encoding"),
            "");
  EXPECT_TRUE(static_detail::accepts_gzip("*"));
  EXPECT_FALSE(static_detail::accepts_gzip("*, gzip;q=0"));
  EXPECT_FALSE(static_detail::accepts_gzip("br"));
  std::string big(100000, 'x');
  EXPECT_EQ(static_detail::gunzip(static_detail::gzip(big)), big);
}

TEST_F(StaticFilesTest, HtmlCarriesTheSecurityHeaders) {
  for (std::string_view path : {"/", "/dashboard"}) {
    Response page = get(path);
    std::string policy = header(page, "Content-Security-Policy");
    EXPECT_NE(policy.find("default-src 'self'"), std::string::npos) << path;
    EXPECT_NE(policy.find("script-src 'self'"), std::string::npos);
    EXPECT_NE(policy.find("object-src 'none'"), std::string::npos);
    EXPECT_NE(policy.find("frame-ancestors 'none'"), std::string::npos);
    EXPECT_EQ(policy.find("unsafe-inline"), std::string::npos);
    EXPECT_EQ(header(page, "X-Content-Type-Options"), "nosniff");
    EXPECT_EQ(header(page, "Referrer-Policy"), "no-referrer");
  }
  EXPECT_EQ(header(get("/assets/plain.css"), "X-Content-Type-Options"), "nosniff");
}

TEST_F(StaticFilesTest, AMissingRootSaysHowToBuildIt) {
  StaticFiles files((base_ / "nowhere").string());  // a second server, on a missing root
  auto page = files.answer("GET", "/", {});
  ASSERT_TRUE(page.has_value());
  EXPECT_EQ(page->status, 404);
  EXPECT_NE(page->body.find("web_ui_not_built"), std::string::npos);
  EXPECT_NE(page->body.find("Node.js"), std::string::npos);
  EXPECT_EQ(files.answer("GET", "/assets/chat-ABCD1234.js", {})->status, 404);
}

}  // namespace
}  // namespace chatflow::server
