// The local launcher: fork/exec of N ranks of this very binary with torchrun's environment, a
// watch on their exits, signals passed on, and stragglers stopped once a rank has failed.
#include "launch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "commands.h"

namespace ht::cli {
namespace {

std::vector<pid_t> g_children;
volatile std::sig_atomic_t g_forwarded = 0;

// The ranks share the terminal's process group, so a Ctrl-C reaches them directly; a SIGTERM
// sent to the launcher alone (a job scheduler) must be passed on. A rank ignores the duplicate.
void forward(int sig) {
  g_forwarded = sig;
  for (pid_t pid : g_children)
    if (pid > 0) ::kill(pid, sig);
}

// A port the kernel just handed out for 127.0.0.1: free now, and rank 0 binds it a moment later.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(std::string("launcher: socket(): ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error(std::string("launcher: cannot find a free port on 127.0.0.1: ") + std::strerror(errno));
  }
  const int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "ended with status " + std::to_string(status);
}

}  // namespace

int launch_local(int nproc, const std::vector<std::string>& train_args, double grace_seconds) {
  if (nproc < 1) throw std::invalid_argument("--nproc must be at least 1");
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) throw std::runtime_error("launcher: cannot find this program's path (/proc/self/exe)");
  self[n] = '\0';
  const std::string port = std::to_string(free_port());
  std::fflush(nullptr);  // nothing buffered may be written twice by the children

  std::vector<std::string> argv_s = {self, "train"};
  argv_s.insert(argv_s.end(), train_args.begin(), train_args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);

  g_children.assign(static_cast<size_t>(nproc), 0);
  std::signal(SIGINT, forward);
  std::signal(SIGTERM, forward);
  for (int r = 0; r < nproc; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      forward(SIGTERM);
      throw std::runtime_error(std::string("launcher: fork(): ") + std::strerror(errno));
    }
    if (pid == 0) {
      std::signal(SIGINT, SIG_DFL);
      std::signal(SIGTERM, SIG_DFL);
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", port.c_str(), 1);
      ::execv(self, argv.data());
      std::fprintf(stderr, "launcher: cannot run %s: %s\n", self, std::strerror(errno));
      ::_exit(127);
    }
    g_children[static_cast<size_t>(r)] = pid;
  }

  using Clock = std::chrono::steady_clock;
  int running = nproc, first_failed = -1, first_code = kOk;
  Clock::time_point deadline{};
  bool terminated = false;
  while (running > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid == 0 || (pid < 0 && errno == EINTR)) {
      if (first_failed >= 0 && Clock::now() > deadline) {
        // The others should have noticed within dist.timeout; stop whoever is left.
        for (int r = 0; r < nproc; ++r)
          if (g_children[static_cast<size_t>(r)] > 0) {
            std::fprintf(stderr, "launcher: rank %d still runs %.0f s after rank %d failed: stopping it\n", r,
                         grace_seconds, first_failed);
            ::kill(g_children[static_cast<size_t>(r)], terminated ? SIGKILL : SIGTERM);
          }
        terminated = true;
        deadline = Clock::now() + std::chrono::seconds(5);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    if (pid < 0) break;  // no children left
    int rank = -1;
    for (int r = 0; r < nproc; ++r)
      if (g_children[static_cast<size_t>(r)] == pid) rank = r;
    if (rank < 0) continue;
    g_children[static_cast<size_t>(rank)] = 0;
    --running;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : kDistributedFailure;
    if (code != kOk) {
      std::fprintf(stderr, "launcher: rank %d (pid %d) %s\n", rank, static_cast<int>(pid), describe(status).c_str());
      if (first_failed < 0) {
        first_failed = rank;
        first_code = code;
        deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(grace_seconds * 1000));
      }
    }
  }
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  // The first failure is the cause; the others' (kDistributedFailure: "rank r stopped
  // responding") follow from it. Ranks that all stop alike (130 on Ctrl-C, 2 on a bad config)
  // give that code.
  return first_failed < 0 ? kOk : first_code;
}

}  // namespace ht::cli
