// An in-memory head for unit tests of the controller (the fake beside HeadClient, see
// src/controller/head_client.h). It assigns host ids as the real head does, in the order hosts
// register (add_host), places bundles with the real head::ResourceBook (so placements are the
// head's), follows hosts that join later, and marks hosts lost or back.
//
// Threads: thread-safe (one mutex). Nothing blocks.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "controller/head_client.h"
#include "head/placement.h"

namespace troupe_test {

class FakeHeadClient : public troupe::internal::HeadClient {
 public:
  // Registers a host; returns the id the head assigns it: the next one. Unset endpoints become
  // "unix:/fake/<name>.sock" and "tcp:<address>:4000".
  size_t add_host(troupe::head::HostRecord record) {
    std::lock_guard<std::mutex> lock(mu_);
    if (record.unix_endpoint.empty())
      record.unix_endpoint = "unix:/fake/" + record.host_name + ".sock";
    if (record.tcp_endpoint.empty()) record.tcp_endpoint = "tcp:" + record.address + ":4000";
    size_t id = hosts_.size();
    book_.upsert_host(id, capacity_of(record));
    hosts_.push_back(std::move(record));
    return id;
  }
  // The host's agent stopped answering the head (alive = false: no new bundles there), or came
  // back.
  void set_alive(size_t host, bool alive) {
    std::lock_guard<std::mutex> lock(mu_);
    hosts_.at(host).alive = alive;
    book_.set_host_alive(host, alive);
  }
  // Makes every later request fail with `error` (a head that is gone), or succeed again.
  void fail_with(std::optional<troupe::Error> error) {
    std::lock_guard<std::mutex> lock(mu_);
    failure_ = std::move(error);
  }
  // Reservations held now, by group id.
  size_t reservation_count() const {
    std::lock_guard<std::mutex> lock(mu_);
    return book_.group_count();
  }
  const troupe::head::ResourceBook& book() const { return book_; }  // not under the lock

  std::vector<troupe::head::HostRecord> hosts() override {
    std::lock_guard<std::mutex> lock(mu_);
    check();
    return hosts_;
  }
  using troupe::internal::HeadClient::reserve;
  std::vector<troupe::head::BundlePlacement> reserve(
      const std::string& group_id, const std::vector<troupe::head::BundleRequest>& bundles,
      troupe::head::Strategy strategy, std::optional<size_t> only_host,
      const std::string& /*pending_as*/) override {
    std::lock_guard<std::mutex> lock(mu_);
    check();
    return book_.reserve(group_id, bundles, strategy, only_host);
  }
  void book_at(const std::string& group_id, const std::vector<troupe::head::BundleRequest>& bundles,
               const std::vector<troupe::head::BundlePlacement>& placements,
               bool overcommit) override {
    std::lock_guard<std::mutex> lock(mu_);
    check();
    book_.restore(group_id, bundles, placements, overcommit);
  }
  void tie_booking(const std::string&, size_t, const std::string&) override {}
  std::vector<troupe::wire::control::HostResources> resources() override {
    std::lock_guard<std::mutex> lock(mu_);
    check();
    std::vector<troupe::wire::control::HostResources> out;
    for (size_t i = 0; i < book_.hosts().size(); ++i) {
      troupe::wire::control::HostResources h;
      h.index = static_cast<int64_t>(i);
      h.name = book_.hosts()[i].name;
      h.cpus = book_.hosts()[i].cpus;
      h.cpus_free = book_.free_resources(i).cpus;
      out.push_back(std::move(h));
    }
    return out;
  }
  bool release(const std::string& group_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    check();
    return book_.release(group_id);
  }
  std::vector<std::string> describe_free() override {
    std::lock_guard<std::mutex> lock(mu_);
    check();
    std::vector<std::string> out;
    for (size_t i = 0; i < book_.hosts().size(); ++i) out.push_back(book_.describe_free(i));
    return out;
  }

 private:
  static troupe::head::HostCapacity capacity_of(const troupe::head::HostRecord& h) {
    return troupe::head::HostCapacity{h.host_name, h.num_cpus, h.gpu_ids, h.memory_bytes,
                                      h.labels,    {},         h.alive};
  }
  void check() const {
    if (failure_) throw *failure_;
  }

  mutable std::mutex mu_;
  std::vector<troupe::head::HostRecord> hosts_;  // index = host id
  troupe::head::ResourceBook book_{{}};
  std::optional<troupe::Error> failure_;
};

}  // namespace troupe_test
