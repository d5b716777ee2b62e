#include "cli/standing.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "agent/agent.h"
#include "agent/gpu_probe.h"
#include "cli/dashboard.h"
#include "cli/slurm_env.h"
#include "cli/status.h"
#include "cli/timeline.h"
#include "common/env.h"
#include "common/launch_env.h"
#include "common/private_dir.h"
#include "common/process.h"
#include "common/token.h"
#include "head/head.h"
#include "head/head_metrics.h"
#include "store/shm_object.h"
#include "transport/io_loop.h"
#include "transport/tls.h"
#include "troupe/error.h"

namespace troupe::cli {
namespace {

namespace stdfs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string run_dir() { return standing_run_dir(""); }

}  // namespace

// The first non-loopback IPv4 address of this host's name, else 127.0.0.1.
std::string primary_address() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "127.0.0.1";
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* found = nullptr;
  if (::getaddrinfo(name, nullptr, &hints, &found) != 0) return "127.0.0.1";
  std::string out = "127.0.0.1";
  for (addrinfo* a = found; a; a = a->ai_next) {
    char text[INET_ADDRSTRLEN];
    auto* in = reinterpret_cast<sockaddr_in*>(a->ai_addr);
    if (!::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text))) continue;
    if (std::strncmp(text, "127.", 4) != 0) {
      out = text;
      break;
    }
  }
  ::freeaddrinfo(found);
  return out;
}

namespace {

std::string this_host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "host";
  return name;
}

// Writes `text` to `path` (created 0600 or truncated; never through a symbolic link).
void write_private_file(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    throw Error(ErrorCode::kInvalidArgument, "cannot write " + path + ": " + std::strerror(errno));
  ssize_t n = ::write(fd, text.data(), text.size());
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size()))
    throw Error(ErrorCode::kInvalidArgument, "cannot write " + path);
}

std::string read_small_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// "pid start_time" of this process.
std::string pid_record() {
  return std::to_string(::getpid()) + " " +
         std::to_string(process::start_time(::getpid()).value_or(0)) + "\n";
}

// The file's last `lines` lines, each as "  LINE\n".
std::string log_tail(const std::string& path, size_t lines) {
  std::string out;
  for (const auto& l : last_lines(path, lines)) out += "  " + l + "\n";
  return out;
}

// Runs `body` in a daemon (a child in its own session, stdin from /dev/null, stdout and stderr
// appended to `log`), or in this process when `block`. `body` gets a descriptor to write one line
// to when it is ready, "ready[ DETAIL]" (-1 when blocking). In the parent, waits at most 15 s for
// that line, then `after_ready` (which may wait longer, e.g. for a registration) decides the exit
// code.
int launch(bool block, const std::string& log, const std::function<int(int ready_fd)>& body,
           const std::function<int(pid_t child, const std::string& detail)>& after_ready) {
  if (block) return body(-1);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw Error(ErrorCode::kInvalidArgument, "pipe failed");
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) throw Error(ErrorCode::kInvalidArgument, "fork failed");
  if (pid == 0) {
    ::close(fds[0]);
    ::setsid();
    int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (in >= 0) ::dup2(in, 0);
    if (out >= 0) {
      ::dup2(out, 1);
      ::dup2(out, 2);
    }
    ::_exit(body(fds[1]));
  }
  ::close(fds[1]);
  std::string line;
  char c;
  auto deadline = Clock::now() + std::chrono::seconds(15);
  ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
  while (Clock::now() < deadline) {
    ssize_t n = ::read(fds[0], &c, 1);
    if (n == 1 && c == '\n') break;
    if (n == 1) {
      line += c;
      continue;
    }
    if (n == 0) break;  // the daemon exited before it was ready
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::close(fds[0]);
  if (line.rfind("ready", 0) != 0) {
    std::fprintf(stderr, "troupe start: the daemon (pid %d) did not become ready; its log %s:\n%s",
                 pid, log.c_str(), log_tail(log, 20).c_str());
    return 1;
  }
  return after_ready(pid, line.size() > 6 ? line.substr(6) : "");
}

void signal_ready(int fd) {
  if (fd < 0) return;
  ssize_t n = ::write(fd, "ready\n", 6);
  (void)n;
  ::close(fd);
}

// Blocks SIGTERM, SIGINT and SIGHUP in this thread (and the threads it creates later), then
// returns a function that waits for one of them.
std::function<void()> block_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return [set] {
    int sig = 0;
    ::sigwait(&set, &sig);
  };
}

// Fills `c` for an agent of a Slurm job step (StartAgentOptions::slurm): given options first,
// then what Slurm says. Throws Error when this is not a Slurm step.
void apply_slurm_environment(const StartAgentOptions& o, agent::AgentConfig& c,
                             std::string& run_dir_name, std::string& gpu_source) {
  auto vars = env::current();
  auto job = vars.find("SLURM_JOB_ID");
  if (job == vars.end() || job->second.empty())
    throw Error(ErrorCode::kInvalidArgument,
                "--slurm: SLURM_JOB_ID is not set (run it in a job step, as `troupe slurm` does)");
  if (run_dir_name.empty()) run_dir_name = "standing-job" + job->second;
  std::string node = vars.count("SLURMD_NODENAME") ? vars["SLURMD_NODENAME"] : "";
  c.host_name = !o.host_name.empty() ? o.host_name : !node.empty() ? node : this_host_name();
  c.address = o.node_ip_address;
  if (c.address.empty() && !node.empty()) c.address = slurm::node_address(node);
  if (c.address.empty()) c.address = primary_address();
  c.num_cpus = o.num_cpus > 0 ? o.num_cpus : slurm::cpus_from_env(vars);
  if (c.num_cpus <= 0) c.num_cpus = std::thread::hardware_concurrency();
  if (o.num_gpus >= 0) {
    for (int g = 0; g < o.num_gpus; ++g) c.gpu_ids.push_back(g);
  } else {
    auto gpus = slurm::gpus_from_env(vars);
    c.gpu_ids = gpus.ids;
    gpu_source = gpus.source.empty() ? "no GPU variable" : gpus.source;
  }
}

}  // namespace

std::string standing_run_dir(const std::string& name) {
  std::string base = env::get_or("TMPDIR", "/tmp") + "/troupe-" + std::to_string(::getuid());
  fs::open_private_dir(base, true);
  std::string dir = base + "/" + (name.empty() ? std::string("standing") : name);
  fs::open_private_dir(dir, true);
  return dir;
}

Value standing_head_status(const head::Head& head, const std::string& address) {
  Array hosts;
  auto free = head.describe_free();
  auto records = head.hosts();
  for (size_t i = 0; i < records.size(); ++i) {
    const auto& h = records[i];
    Map host{{"name", h.host_name},
             {"address", h.address},
             {"cpus", h.num_cpus},
             {"gpus", static_cast<int64_t>(h.gpu_ids.size())},
             {"alive", h.alive},
             {"agent_pid", static_cast<int64_t>(h.agent_pid)},
             {"memory_total", h.memory_bytes},
             {"tcp_endpoint", h.tcp_endpoint}};
    if (i < free.size()) host.emplace_back("reserved", free[i]);
    hosts.push_back(std::move(host));
  }
  Map out{{"session", "standing cluster, head at " + address}, {"hosts", std::move(hosts)}};
  for (auto& section : head.placement_status()) out.push_back(std::move(section));
  Array named;
  for (const auto& e : head.name_list())
    named.push_back(Map{{"namespace", e.record.ns},
                        {"name", e.record.name},
                        {"detached", e.record.detached},
                        {"host", e.record.host},
                        {"worker", e.record.worker},
                        {"pid", e.record.pid},
                        {"owner", e.owner}});
  out.emplace_back("named_workers", std::move(named));
  out.emplace_back("workers", Array{});
  return out;
}

std::string standing_token(const std::string& token_file) {
  if (!token_file.empty()) return token::read_file(token_file);
  if (auto t = env::get(launch_env::kToken); t && !t->empty()) return *t;
  std::string path = run_dir() + "/token";
  if (!stdfs::exists(path))
    throw Error(ErrorCode::kUnauthenticated,
                "no cluster token: give --token-file (the head printed its path) or set "
                "TROUPE_TOKEN");
  return token::read_file(path);
}

std::string standing_tls_dir() {
  if (auto d = env::get(launch_env::kTlsDir); d && !d->empty()) return *d;
  std::string recorded = run_dir() + "/head.tls";
  if (!stdfs::exists(recorded)) return "";
  std::string dir = read_small_file(recorded);
  while (!dir.empty() && (dir.back() == '\n' || dir.back() == ' ')) dir.pop_back();
  return dir;
}

void use_standing_tls() {
  std::string dir = standing_tls_dir();
  if (!dir.empty())
    transport::configure_tls(transport::TlsSettings{dir, env::get_or(launch_env::kTlsName, "")});
}

int run_start_head(const StartHeadOptions& o) {
  try {
    const std::string dir = standing_run_dir(o.run_dir_name);
    const std::string ip = o.node_ip_address.empty() ? primary_address() : o.node_ip_address;
    const std::string address = ip + ":" + std::to_string(o.port);
    std::string token_path = o.token_file;
    std::string token;
    if (!o.token_file.empty()) {
      token = token::read_file(o.token_file);
    } else if (auto t = env::get(launch_env::kToken); t && !t->empty()) {
      token = *t;
    } else {
      token_path = dir + "/token";
      if (stdfs::exists(token_path)) stdfs::remove(token_path);
      token = token::generate();
      token::write_file(token_path, token);
    }
    std::string tls_dir = o.tls_dir;
    if (tls_dir.empty()) tls_dir = env::get_or(launch_env::kTlsDir, "");
    if (tls_dir.empty() && o.tls) {
      tls_dir = dir + "/tls";
      transport::make_cluster_ca(tls_dir);  // kept when there: its agents' certificates stay
    }
    if (!tls_dir.empty()) {
      tls_dir = stdfs::absolute(tls_dir).string();
      transport::configure_tls(transport::TlsSettings{tls_dir, "head"});
      write_private_file(dir + "/head.tls", tls_dir + "\n");
    } else {
      ::unlink((dir + "/head.tls").c_str());  // an earlier head's
    }
    const std::string log = dir + "/head.log";
    auto body = [&](int ready_fd) -> int {
      auto wait_stop = block_stop_signals();
      transport::IoLoop loop;
      std::unique_ptr<head::HeadMetrics> metrics;  // outlives the head, which observes into it
      std::unique_ptr<head::Head> head;
      std::unique_ptr<Dashboard> dashboard;  // stops before the head it asks goes
      try {
        loop.run_sync(
            [&] { head = std::make_unique<head::Head>(loop.context(), "tcp:" + address, token); });
      } catch (const Error& e) {
        std::fprintf(stderr, "troupe head: cannot listen on %s: %s\n", address.c_str(), e.what());
        return 1;
      }
      head->set_heartbeat(std::chrono::milliseconds(o.heartbeat_ms),
                          std::chrono::milliseconds(o.host_lost_ms));
      try {
        head->set_journal(dir + "/head.journal", std::chrono::milliseconds(o.restore_grace_ms));
      } catch (const Error& e) {
        std::fprintf(stderr, "troupe head: %s\n", e.what());
        return 1;
      }
      head::Head* h = head.get();
      // The bound address (port 0 asks for any free port).
      std::string bound = head->endpoint().substr(4);  // "tcp:IP:PORT"
      head->set_status_provider([h, bound] { return standing_head_status(*h, bound); });
      std::string metrics_at;
      if (o.metrics_port >= 0) {
        try {
          metrics = std::make_unique<head::HeadMetrics>(*head);
          metrics_at = "http://" + metrics->serve(ip, o.metrics_port, token) + "/metrics";
        } catch (const Error& e) {
          std::fprintf(stderr, "troupe head: metrics: %s\n", e.what());
          return 1;
        }
        std::fprintf(stderr, "troupe head metrics at %s\n", metrics_at.c_str());
      }
      std::string dashboard_at;
      if (o.dashboard_port >= 0) {
        try {
          // The timeline is collected as `troupe timeline --address` does, through the head's
          // TCP endpoint, on the HTTP handler's thread (never the head's I/O thread).
          auto timeline = [endpoint = "tcp:" + bound, token] {
            CollectedTrace trace = collect_timeline(endpoint, token, std::chrono::seconds(5));
            if (trace.json.empty())
              throw Error(ErrorCode::kResourceUnavailable, "no running worker in the cluster");
            return trace.json;
          };
          dashboard = std::make_unique<Dashboard>(
              DashboardOptions{ip, o.dashboard_port, token,
                               [h, bound] { return standing_head_status(*h, bound); }, timeline});
          dashboard_at = "http://" + dashboard->serve() + "/";
        } catch (const Error& e) {
          std::fprintf(stderr, "troupe head: dashboard: %s\n", e.what());
          return 1;
        }
        std::fprintf(stderr, "troupe head dashboard at %s\n", dashboard_at.c_str());
        if (o.block)  // the terminal: where a user copies the login URL from
          std::fprintf(stderr, "in a browser, open once: %slogin?token=%s&next=/\n",
                       dashboard_at.c_str(), token.c_str());
      }
      write_private_file(dir + "/head.pid", pid_record());
      write_private_file(dir + "/head.address", bound + "\n");
      std::fprintf(stderr, "troupe head listening on %s (pid %d)\n", bound.c_str(), ::getpid());
      std::fflush(stderr);
      if (ready_fd >= 0) {
        std::string line = "ready " + bound + " " + (metrics_at.empty() ? "-" : metrics_at) + " " +
                           (dashboard_at.empty() ? "-" : dashboard_at) + "\n";
        ssize_t n = ::write(ready_fd, line.data(), line.size());
        (void)n;
        ::close(ready_fd);
      }
      wait_stop();
      std::fprintf(stderr, "troupe head stopping\n");
      if (dashboard) dashboard->stop();
      if (metrics) metrics->stop();
      head->close();
      loop.stop();
      head.reset();
      ::unlink((dir + "/head.pid").c_str());
      ::unlink((dir + "/head.address").c_str());
      if (!tls_dir.empty()) ::unlink((dir + "/head.tls").c_str());
      if (token_path == dir + "/token") ::unlink(token_path.c_str());  // it made the token
      return 0;
    };
    return launch(o.block, log, body, [&](pid_t pid, const std::string& detail) {
      // "IP:PORT METRICS-URL DASHBOARD-URL", "-" for a URL not served. A browser opens the login
      // URL once and gets a cookie (transport/http_server.h).
      std::istringstream fields(detail);
      std::string address, metrics_url, dashboard_url;
      fields >> address >> metrics_url >> dashboard_url;
      std::printf("troupe head started at %s (pid %d, log %s)\n", address.c_str(), pid,
                  log.c_str());
      if (!metrics_url.empty() && metrics_url != "-")
        std::printf(
            "metrics at %s (Prometheus: authorization Bearer with the cluster token)\n"
            "in a browser, open once: %s/login?token=%s&next=/metrics\n",
            metrics_url.c_str(), metrics_url.substr(0, metrics_url.rfind('/')).c_str(),
            token.c_str());
      if (!dashboard_url.empty() && dashboard_url != "-")
        std::printf("dashboard at %s\nin a browser, open once: %slogin?token=%s&next=/\n",
                    dashboard_url.c_str(), dashboard_url.c_str(), token.c_str());
      std::string tls_join = tls_dir.empty() ? "" : " --tls-dir " + tls_dir;
      std::string tls_env = tls_dir.empty() ? "" : " TROUPE_TLS_DIR=" + tls_dir;
      if (!tls_dir.empty())
        std::printf("TLS on every TCP connection, certificates of the CA in %s\n", tls_dir.c_str());
      std::printf("join a host with:\n  troupe start --address %s%s%s\n", address.c_str(),
                  token_path.empty() ? "" : (" --token-file " + token_path).c_str(),
                  (tls_join + (token_path.empty() ? "   (with TROUPE_TOKEN set)" : "")).c_str());
      std::printf(
          "run a driver against it with:\n  TROUPE_ADDRESS=%s %s%s ./your_driver\n"
          "stop with: troupe stop\n",
          address.c_str(),
          token_path.empty() ? "TROUPE_TOKEN=..." : ("TROUPE_TOKEN_FILE=" + token_path).c_str(),
          tls_env.c_str());
      return 0;
    });
  } catch (const Error& e) {
    std::fprintf(stderr, "troupe start --head: %s\n", e.what());
    return 1;
  }
}

int run_start_agent(const StartAgentOptions& o) {
  try {
    agent::AgentConfig c;
    std::string run_dir_name = o.run_dir_name;
    std::string gpu_source = "--num-gpus";
    if (o.slurm) {
      apply_slurm_environment(o, c, run_dir_name, gpu_source);
    } else {
      c.host_name = o.host_name.empty() ? this_host_name() : o.host_name;
      c.address = o.node_ip_address.empty() ? primary_address() : o.node_ip_address;
      c.num_cpus = o.num_cpus > 0 ? o.num_cpus : std::thread::hardware_concurrency();
      // --num-gpus; else CUDA_VISIBLE_DEVICES when set (a launcher gave this host only those,
      // where NVML would count every GPU of the machine); else NVML's count.
      auto visible = env::get("CUDA_VISIBLE_DEVICES");
      if (o.num_gpus >= 0) {
        for (int g = 0; g < o.num_gpus; ++g) c.gpu_ids.push_back(g);
      } else if (visible && !visible->empty()) {
        gpu_source = "CUDA_VISIBLE_DEVICES";
        std::stringstream ss(*visible);
        for (std::string id; std::getline(ss, id, ',');) {
          try {
            c.gpu_ids.push_back(std::stoi(id));
          } catch (const std::exception&) {
            throw Error(ErrorCode::kInvalidArgument,
                        "CUDA_VISIBLE_DEVICES='" + *visible +
                            "' is not a list of GPU indexes; give --num-gpus");
          }
        }
      } else if (auto count = agent::nvml_gpu_count()) {
        gpu_source = "NVML";
        for (int g = 0; g < *count; ++g) c.gpu_ids.push_back(g);
      }
    }
    if (!fs::valid_component(c.host_name))
      throw Error(ErrorCode::kInvalidArgument, "bad host name '" + c.host_name + "'");
    const std::string dir = standing_run_dir(run_dir_name);
    c.labels = o.labels;
    c.head_endpoint = "tcp:" + o.address;
    c.token = standing_token(o.token_file);
    if (std::string tls = o.tls_dir.empty() ? standing_tls_dir() : o.tls_dir; !tls.empty()) {
      tls = stdfs::absolute(tls).string();
      transport::configure_tls(transport::TlsSettings{tls, c.host_name});
      // Its workers get the same (agent/worker_table.cc), and so do its fork servers, which
      // set up the TLS context once for the workers they fork.
      ::setenv(launch_env::kTlsDir, tls.c_str(), 1);
      ::setenv(launch_env::kTlsName, c.host_name.c_str(), 1);
    }
    c.session_dir = dir + "/agent-" + c.host_name;
    fs::open_private_dir(c.session_dir, true);
    c.socket_dir = c.session_dir + "/sockets";
    c.log_to_terminal = false;
    c.standing = true;
    c.heartbeat_interval = std::chrono::milliseconds(o.heartbeat_ms);
    c.heartbeat_timeout = std::chrono::milliseconds(o.host_lost_ms);
    c.exit_without_head = o.slurm;
    c.object_store_memory = o.object_store_memory;
    c.metrics_port = o.metrics_port;
    // Fork servers of drivers' binaries (fork_server_choice.h) unless the environment turns
    // them off.
    c.fork_server = env::get_or(agent_env::kForkServer, "1") != "0";
    c.python_preload = env::split_list(
        o.python_preload.empty() ? env::get_or(launch_env::kPythonPreload, "") : o.python_preload,
        ',');
    for (const auto& m : c.python_preload)
      if (!env::valid_module_name(m))
        throw Error(ErrorCode::kInvalidArgument,
                    "--python-preload: '" + m + "' is not a Python module name (a.b.c)");
    const std::string log = dir + "/agent-" + c.host_name + ".log";
    const std::string pidfile = dir + "/agent-" + c.host_name + ".pid";
    auto body = [&](int ready_fd) -> int {
      write_private_file(pidfile, pid_record());
      signal_ready(ready_fd);
      if (o.slurm) {
        std::string gpus;
        for (int g : c.gpu_ids) gpus += (gpus.empty() ? "" : ",") + std::to_string(g);
        std::fprintf(stderr,
                     "troupe agent of %s at %s: %.0f CPUs, GPUs [%s] (from %s); joining %s\n",
                     c.host_name.c_str(), c.address.c_str(), c.num_cpus, gpus.c_str(),
                     gpu_source.c_str(), o.address.c_str());
        std::fflush(stderr);
      }
      int rc = agent::run_agent(c);
      ::unlink(pidfile.c_str());
      if (o.slurm) {  // this job's files on this node go with its agent
        std::error_code ec;
        stdfs::remove_all(c.session_dir, ec);
        ::unlink(log.c_str());
        ::rmdir(dir.c_str());  // the last one out (the head's node keeps it until the end)
      }
      return rc;
    };
    return launch(o.block, log, body, [&](pid_t pid, const std::string&) {
      // Ready once the head lists this host as alive.
      auto deadline = Clock::now() + std::chrono::seconds(15);
      std::string last;
      while (Clock::now() < deadline) {
        int status = 0;
        if (::waitpid(pid, &status, WNOHANG) == pid) break;
        try {
          Value s = ask_head_status(c.head_endpoint, c.token);
          if (const Value* hosts = s.find("hosts"); hosts && hosts->is_array())
            for (const auto& h : hosts->as_array()) {
              const Value* name = h.find("name");
              const Value* alive = h.find("alive");
              if (name && name->is_string() && name->as_string() == c.host_name && alive &&
                  alive->is_bool() && alive->as_bool()) {
                std::printf("troupe agent of %s (%s, %.0f CPUs, %zu GPUs) joined %s (pid %d)\n",
                            c.host_name.c_str(), c.address.c_str(), c.num_cpus, c.gpu_ids.size(),
                            o.address.c_str(), pid);
                return 0;
              }
            }
        } catch (const Error& e) {
          last = e.message();
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      std::fprintf(
          stderr, "troupe start: the agent of %s did not register with %s%s; its log %s:\n%s",
          c.host_name.c_str(), o.address.c_str(), last.empty() ? "" : (" (" + last + ")").c_str(),
          log.c_str(), log_tail(log, 20).c_str());
      return 1;
    });
  } catch (const Error& e) {
    std::fprintf(stderr, "troupe start --address: %s\n", e.what());
    return 1;
  }
}

int run_stop() {
  try {
    const std::string dir = run_dir();
    std::vector<std::string> agents, heads;
    for (const auto& e : stdfs::directory_iterator(dir)) {
      std::string name = e.path().filename().string();
      if (name.size() < 5 || name.substr(name.size() - 4) != ".pid") continue;
      (name.rfind("agent-", 0) == 0 ? agents : heads).push_back(e.path().string());
    }
    int stopped = 0;
    for (const auto* list : {&agents, &heads}) {
      std::vector<std::pair<pid_t, uint64_t>> waiting;
      for (const auto& path : *list) {
        pid_t pid = 0;
        uint64_t start = 0;
        std::istringstream(read_small_file(path)) >> pid >> start;
        auto now = pid > 0 ? process::start_time(pid) : std::nullopt;
        if (!now || *now != start) {  // gone, or the pid belongs to another process now
          ::unlink(path.c_str());
          continue;
        }
        ::kill(pid, SIGTERM);
        waiting.emplace_back(pid, start);
        std::printf("stopping %s (pid %d)\n", stdfs::path(path).stem().c_str(), pid);
      }
      auto deadline = Clock::now() + std::chrono::seconds(10);
      for (auto [pid, start] : waiting) {
        while (process::start_time(pid) == start && Clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        if (process::start_time(pid) == start) ::kill(pid, SIGKILL);
        ++stopped;
      }
      for (const auto& path : *list) ::unlink(path.c_str());
    }
    std::printf("%d troupe daemon(s) stopped\n", stopped);
    // Store objects of agents that are gone (killed with SIGKILL before this stop).
    if (size_t n = store::sweep_stale(store::store_dir()))
      std::printf("removed %zu stale object store file(s)\n", n);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "troupe stop: %s\n", e.what());
    return 1;
  }
}

std::vector<std::string> last_lines(const std::string& path, size_t count) {
  std::ifstream in(path);
  std::vector<std::string> all;
  for (std::string l; std::getline(in, l);) all.push_back(l);
  if (all.size() > count) all.erase(all.begin(), all.end() - static_cast<std::ptrdiff_t>(count));
  return all;
}

}  // namespace troupe::cli
