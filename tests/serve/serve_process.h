// A real `kiln serve` for the tests: started as a child process on a free
// loopback port, killed at the end if it is still running.
#pragma once

#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace kiln::serve {

using namespace std::chrono_literals;

// In a forked child: runs argv[0] (looked up in PATH when it has no slash), or exits 127.
[[noreturn]] inline void exec_in_child(std::vector<std::string> argv) {
  std::vector<char*> c;
  for (auto& a : argv) c.push_back(a.data());
  c.push_back(nullptr);
  execvp(c[0], c.data());
  _exit(127);
}

// `kiln serve --port 0 ARGS...` as a child process: its port read from the
// line it prints, killed at the end if still running.
class ServeProcess {
 public:
  explicit ServeProcess(std::vector<std::string> args) {
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      std::vector<std::string> argv = {KILN_BINARY, "serve", "--port", "0", "--quiet"};
      argv.insert(argv.end(), args.begin(), args.end());
      exec_in_child(argv);
    }
    close(out[1]);
    // The first line: "kiln: serving on http://127.0.0.1:PORT/ ...", within 60 s.
    std::string line;
    pollfd p{out[0], POLLIN, 0};
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline &&
           poll(&p, 1, 1000) >= 0) {
      char buffer[256];
      const ssize_t n = (p.revents & (POLLIN | POLLHUP)) ? read(out[0], buffer, sizeof buffer) : 0;
      if (n < 0 || ((p.revents & POLLHUP) && n == 0)) break;
      line.append(buffer, size_t(n));
    }
    close(out[0]);
    std::smatch m;
    if (std::regex_search(line, m, std::regex(R"(127\.0\.0\.1:(\d+)/)"))) port_ = std::stoi(m[1]);
  }
  ~ServeProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    return c;
  }
  // Sends `signal` and waits (up to `timeout`) for the exit status; -1 when it did not exit.
  int stop(int signal, std::chrono::seconds timeout) {
    kill(pid_, signal);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (int status = 0; std::chrono::steady_clock::now() < deadline; std::this_thread::sleep_for(20ms))
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  bool exited_ = false;
};

}  // namespace kiln::serve
