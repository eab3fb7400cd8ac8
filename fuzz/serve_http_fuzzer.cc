// kiln serve's HTTP side on raw requests. Each input goes as bytes over a
// loopback connection to an HttpApi (serve/http_api.h) whose two models,
// an image and a video one, are stand-in workers that answer every job at
// once. httplib's parsing of the request line and headers, the API key,
// the routing and every handler see arbitrary input. Each answer must be an
// HTTP response that is not a 5xx (500 would be an exception escaping a
// handler), and the server must keep accepting.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "serve/http_api.h"

namespace {

using namespace kiln::serve;

// Every job done at once, with three bytes of output.
std::vector<PendingResult> stand_in(const std::vector<Job*>& jobs) {
  std::vector<PendingResult> results;
  for (Job* job : jobs) {
    job->step(0, 1);
    results.push_back([] { return JobResult(std::vector<JobOutput>{{"image/png", {1, 2, 3}, 7}}); });
  }
  return results;
}

struct Fixture {
  ModelWorker image{"shapes", stand_in, {.capacity = 4}};
  ModelWorker video{"wan", stand_in, {.capacity = 4}};
  HttpApi api{{{"shapes", "/models/shapes", JobKind::kImage, &image}, {"wan", "/models/wan", JobKind::kVideo, &video}},
              {.api_key = "k", .limits = {.max_body_bytes = 1 << 20, .max_steps = 4}, .grace_seconds = 1}};
  int port = 0;
  std::thread server;

  Fixture() {
    std::atomic<int> bound{0};
    server = std::thread([&] { (void)api.run("127.0.0.1", 0, [&](int p) { bound = p; }); });
    while (bound == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    port = bound;
  }
};

// A connection to the server. Thousands a second run the machine's
// ephemeral ports low, so a refused connect() is tried again for a while
// before the server counts as gone.
int connect_to(int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(uint16_t(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int error = 0;
  for (int attempt = 0; attempt < 500; ++attempt) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) return fd;
    error = errno;
    if (fd >= 0) close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::fprintf(stderr, "the server stopped accepting connections: %s\n", std::strerror(error));
  std::abort();
}

// One connection: the input as the request, the answer read to its end.
std::string exchange(int port, const uint8_t* data, size_t size) {
  const int fd = connect_to(port);
  // Closed with a reset once the answer is in: no TIME_WAIT left holding a port.
  const linger reset{.l_onoff = 1, .l_linger = 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
  const timeval timeout{.tv_sec = 10, .tv_usec = 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  for (size_t sent = 0; sent < size;) {
    const ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may answer and close before reading it all
    sent += size_t(n);
  }
  shutdown(fd, SHUT_WR);
  std::string answer;
  char buffer[4096];
  for (ssize_t n; (n = recv(fd, buffer, sizeof buffer, 0)) > 0;) answer.append(buffer, size_t(n));
  close(fd);
  return answer;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture* fixture = new Fixture();  // never destroyed: libFuzzer exits without tearing down
  const std::string answer = exchange(fixture->port, data, size);
  if (answer.empty()) return 0;  // closed without a word: a request line httplib could not read
  // Every answer on the connection (keep-alive can carry several): "HTTP/1.1 NNN".
  for (size_t at = answer.find("HTTP/1.1 "); at != std::string::npos; at = answer.find("\r\nHTTP/1.1 ", at + 1)) {
    const size_t code = answer.find("HTTP/1.1 ", at) + 9;
    if (code + 3 > answer.size()) break;
    if (answer[code] == '5') {
      std::fprintf(stderr, "a 5xx answer:\n%.*s\n", int(std::min<size_t>(answer.size() - at, 600)), answer.data() + at);
      std::abort();
    }
  }
  if (!answer.starts_with("HTTP/1.1 ")) {
    std::fprintf(stderr, "not an HTTP answer:\n%.*s\n", int(std::min<size_t>(answer.size(), 300)), answer.data());
    std::abort();
  }
  return 0;
}
