#include "head/journal.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "troupe/error.h"

namespace troupe::head {
namespace {

using json = nlohmann::json;

json to_json(const std::string& id, const Journal::Booking& b) {
  json bundles = json::array(), placed = json::array();
  for (size_t i = 0; i < b.bundles.size(); ++i) {
    const auto& r = b.bundles[i];
    bundles.push_back({{"cpus", r.cpus},
                       {"gpus", r.gpus},
                       {"memory", r.memory_bytes},
                       {"labels", r.labels},
                       {"resources", r.resources}});
    const auto& p = b.placements.at(i);
    placed.push_back({{"host", b.hosts.at(i)}, {"gpus", p.gpu_ids}, {"share", p.gpu_share}});
  }
  json j{{"op", "book"}, {"id", id}, {"bundles", bundles}, {"placed", placed}};
  if (!b.tied_worker.empty()) {
    j["tied_host"] = b.tied_host;
    j["tied_worker"] = b.tied_worker;
  }
  return j;
}

Journal::Booking from_json(const json& j) {
  Journal::Booking b;
  for (const auto& r : j.at("bundles"))
    b.bundles.push_back(BundleRequest{r.at("cpus").get<double>(), r.at("gpus").get<double>(),
                                      r.at("memory").get<int64_t>(),
                                      r.at("labels").get<std::map<std::string, std::string>>(),
                                      r.at("resources").get<std::map<std::string, double>>()});
  for (const auto& p : j.at("placed")) {
    b.hosts.push_back(p.at("host").get<std::string>());
    b.placements.push_back(
        BundlePlacement{0, p.at("gpus").get<std::vector<int>>(), p.at("share").get<double>()});
  }
  if (b.bundles.size() != b.placements.size())
    throw std::runtime_error("bundles and placements differ in number");
  b.tied_host = j.value("tied_host", "");
  b.tied_worker = j.value("tied_worker", "");
  return b;
}

// `info` is opaque bytes (not always UTF-8, which JSON strings must be): hex.
std::string to_hex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

std::string from_hex(const std::string& hex) {
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw std::runtime_error("info_hex holds a character that is not a hex digit");
  };
  if (hex.size() % 2) throw std::runtime_error("info_hex has an odd number of digits");
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<char>(digit(hex[2 * i]) << 4 | digit(hex[2 * i + 1]));
  return out;
}

json name_to_json(const wire::control::NamedWorkerRecord& r) {
  return json{{"op", "name"},           {"ns", r.ns},     {"name", r.name},
              {"detached", r.detached}, {"host", r.host}, {"worker", r.worker},
              {"tcp", r.tcp_endpoint},  {"pid", r.pid},   {"info_hex", to_hex(r.info)}};
}

wire::control::NamedWorkerRecord name_from_json(const json& j) {
  wire::control::NamedWorkerRecord r;
  r.ns = j.at("ns").get<std::string>();
  r.name = j.at("name").get<std::string>();
  r.detached = j.at("detached").get<bool>();
  r.host = j.at("host").get<std::string>();
  r.worker = j.at("worker").get<std::string>();
  r.tcp_endpoint = j.at("tcp").get<std::string>();
  r.pid = j.at("pid").get<int64_t>();
  r.info = from_hex(j.at("info_hex").get<std::string>());
  return r;
}

}  // namespace

Journal::Journal(std::string path) : path_(std::move(path)) {
  std::ifstream in(path_);
  std::string line;
  size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    try {
      json j = json::parse(line);
      const std::string op = j.at("op").get<std::string>();
      if (op == "name") {
        auto r = name_from_json(j);
        NameKey key{r.ns, r.name};
        recovered_names_[key] = std::move(r);
        continue;
      }
      if (op == "unname") {
        recovered_names_.erase({j.at("ns").get<std::string>(), j.at("name").get<std::string>()});
        continue;
      }
      const std::string id = j.at("id").get<std::string>();
      if (op == "book") {
        recovered_[id] = from_json(j);
      } else if (op == "tie") {
        if (auto it = recovered_.find(id); it != recovered_.end()) {
          it->second.tied_host = j.at("host").get<std::string>();
          it->second.tied_worker = j.at("worker").get<std::string>();
        }
      } else if (op == "free") {
        recovered_.erase(id);
      }
    } catch (const std::exception& e) {
      TROUPE_LOG(Warning) << path_ << " line " << number << " is not a record (" << e.what()
                          << "): skipped (a head killed while writing it)";
    }
  }
  live_ = recovered_;
  live_names_ = recovered_names_;
  rewrite();
}

Journal::~Journal() {
  if (file_) std::fclose(file_);
}

void Journal::book(const std::string& id, const Booking& booking) {
  live_[id] = booking;
  append(to_json(id, booking).dump());
}

void Journal::tie(const std::string& id, const std::string& host, const std::string& worker) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  it->second.tied_host = host;
  it->second.tied_worker = worker;
  append(json{{"op", "tie"}, {"id", id}, {"host", host}, {"worker", worker}}.dump());
}

void Journal::free(const std::string& id) {
  if (live_.erase(id) == 0) return;
  append(json{{"op", "free"}, {"id", id}}.dump());
}

void Journal::name(const wire::control::NamedWorkerRecord& record) {
  live_names_[{record.ns, record.name}] = record;
  append(name_to_json(record).dump());
}

void Journal::unname(const std::string& ns, const std::string& name) {
  if (live_names_.erase({ns, name}) == 0) return;
  append(json{{"op", "unname"}, {"ns", ns}, {"name", name}}.dump());
}

void Journal::append(const std::string& line) {
  if (records_ >= 1024 && records_ > 4 * (live_.size() + live_names_.size())) {
    try {
      return rewrite();
    } catch (const Error& e) {
      TROUPE_LOG(Warning) << e.message() << "; records go on being appended";
    }
  }
  std::string out = line + "\n";
  if (std::fwrite(out.data(), 1, out.size(), file_) != out.size() || std::fflush(file_) != 0)
    TROUPE_LOG(Warning) << "cannot write to " << path_ << ": " << std::strerror(errno)
                        << " (a restarted head may not book this again)";
  ++records_;
}

void Journal::rewrite() {
  const std::string tmp = path_ + ".new";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f)
    throw Error(ErrorCode::kInvalidArgument,
                "cannot write the head's journal " + tmp + ": " + std::strerror(errno));
  for (const auto& [id, b] : live_) {
    std::string line = to_json(id, b).dump() + "\n";
    std::fwrite(line.data(), 1, line.size(), f);
  }
  for (const auto& [key, r] : live_names_) {
    std::string line = name_to_json(r).dump() + "\n";
    std::fwrite(line.data(), 1, line.size(), f);
  }
  bool ok = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  std::fclose(f);
  if (!ok || std::rename(tmp.c_str(), path_.c_str()) != 0)
    throw Error(ErrorCode::kInvalidArgument,
                "cannot write the head's journal " + path_ + ": " + std::strerror(errno));
  if (file_) std::fclose(file_);
  file_ = std::fopen(path_.c_str(), "a");
  if (!file_)
    throw Error(ErrorCode::kInvalidArgument,
                "cannot open the head's journal " + path_ + ": " + std::strerror(errno));
  records_ = live_.size() + live_names_.size();
}

}  // namespace troupe::head
