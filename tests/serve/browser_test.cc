// kiln serve's page in a real browser: headless Chromium (Debian's
// chromium) loads it with a prompt in the link, the page submits it to the
// embedded default model, follows the job's events and shows the picture.
// Chromium is driven over the DevTools protocol on a pipe
// (--remote-debugging-pipe: JSON messages ending in NUL on fds 3 and 4), so
// the test needs no WebSocket client and no network but loopback.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "serve_process.h"

namespace kiln::serve {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

class Chromium {
 public:
  Chromium() {
    int to_browser[2], from_browser[2];
    if (pipe(to_browser) != 0 || pipe(from_browser) != 0) return;
    profile_ = fs::temp_directory_path() / fmt::format("kiln-chromium-{}", getpid());
    pid_ = fork();
    if (pid_ == 0) {
      // The protocol's fds: the browser reads 3 and writes 4.
      dup2(to_browser[0], 3);
      dup2(from_browser[1], 4);
      const int null = open("/dev/null", O_WRONLY);
      dup2(null, STDERR_FILENO);
      dup2(null, STDOUT_FILENO);
      exec_in_child({"chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
                     "--no-first-run", "--user-data-dir=" + profile_.string(), "about:blank"});
    }
    close(to_browser[0]);
    close(from_browser[1]);
    in_ = to_browser[1];
    out_ = from_browser[0];
  }
  ~Chromium() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(in_);
    close(out_);
    std::error_code ignored;
    fs::remove_all(profile_, ignored);
  }

  // Sends a command and returns its result, skipping the events in between;
  // null when the browser does not answer within the timeout.
  json call(const std::string& method, const json& params, const std::string& session = "") {
    json message = {{"id", ++id_}, {"method", method}, {"params", params}};
    if (!session.empty()) message["sessionId"] = session;
    const std::string text = message.dump() + std::string(1, '\0');
    if (write(in_, text.data(), text.size()) != ssize_t(text.size())) return nullptr;
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < deadline) {
      for (size_t end; (end = buffer_.find('\0')) != std::string::npos;) {
        const json reply = json::parse(buffer_.substr(0, end), nullptr, false);
        buffer_.erase(0, end + 1);
        if (reply.is_object() && reply.value("id", 0) == id_) return reply.contains("result") ? reply["result"] : reply;
      }
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, 1000) <= 0) continue;
      char chunk[65536];
      const ssize_t n = read(out_, chunk, sizeof chunk);
      if (n <= 0) return nullptr;
      buffer_.append(chunk, size_t(n));
    }
    return nullptr;
  }

 private:
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1, id_ = 0;
  std::string buffer_;
  fs::path profile_;
};

TEST(Browser, ThePageDrawsAPictureFromAPrompt) {
  ServeProcess server({});
  ASSERT_GT(server.port(), 0);
  Chromium browser;
  const json target = browser.call(
      "Target.createTarget",
      {{"url", fmt::format("http://127.0.0.1:{}/?prompt=a+red+circle+on+a+blue+background&steps=8&seed=5&autorun=1",
                           server.port())}});
  ASSERT_TRUE(target.contains("targetId")) << "chromium did not start: " << target.dump();
  const json attached = browser.call("Target.attachToTarget", {{"targetId", target["targetId"]}, {"flatten", true}});
  const std::string session = attached.value("sessionId", "");
  ASSERT_FALSE(session.empty()) << attached.dump();
  // The page sets data-result to the picture's size once it has loaded it.
  std::string result, status;
  for (int i = 0; i < 300 && result.empty(); ++i) {
    std::this_thread::sleep_for(100ms);
    const json r = browser.call("Runtime.evaluate",
                                {{"expression",
                                  "JSON.stringify([document.body.dataset.result || '', "
                                  "document.getElementById('status').textContent])"},
                                 {"returnByValue", true}},
                                session);
    ASSERT_TRUE(r.contains("result")) << r.dump();
    const json values = json::parse(r["result"].value("value", "[\"\", \"\"]"));
    result = values[0], status = values[1];
  }
  EXPECT_EQ(result, "64x64") << "the page said: " << status;
  EXPECT_EQ(status, "done");
  // The picture came from the server: one job done there.
  const std::string metrics = server.client().Get("/metrics")->body;
  EXPECT_NE(metrics.find("kiln_outputs_total{model=\"shapes\"} 1"), std::string::npos) << metrics;
}

}  // namespace
}  // namespace kiln::serve
