#include "cluster_resources.h"

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <cmath>

#include "gil.h"
#include "troupe/resources.h"

namespace troupe::py {
namespace {

ResourceRequest to_request(const pyb::dict& amounts) {
  ResourceRequest r;
  for (const auto& [key, value] : amounts) {
    std::string name = pyb::cast<std::string>(key);
    double amount = pyb::cast<double>(value);
    if (name == "CPU")
      r.num_cpus = amount;
    else if (name == "GPU")
      r.num_gpus = amount;
    else if (name == "memory")
      r.memory_bytes = static_cast<int64_t>(std::llround(amount));
    else
      r.resources[name] = amount;
  }
  return r;
}

std::vector<ResourceRequest> to_requests(const pyb::list& bundles) {
  std::vector<ResourceRequest> out;
  for (const auto& b : bundles) out.push_back(to_request(pyb::cast<pyb::dict>(b)));
  return out;
}

pyb::dict amounts(double cpus, size_t gpus, int64_t memory,
                  const std::map<std::string, double>& named) {
  pyb::dict d;
  d["CPU"] = cpus;
  d["GPU"] = static_cast<double>(gpus);
  d["memory"] = static_cast<double>(memory);
  for (const auto& [name, amount] : named) d[pyb::str(name)] = amount;
  return d;
}

}  // namespace

void bind_cluster_resources(pyb::module_& m) {
  m.def(
      "try_book",
      [](Cluster& c, const std::string& id, const pyb::list& bundles, const std::string& strategy,
         std::optional<size_t> only_host, const std::string& waiting_as) -> pyb::object {
        auto requests = to_requests(bundles);
        std::optional<std::vector<BookedBundle>> got;
        {
          pyb::gil_scoped_release nogil;
          got = try_book(c, id, requests, strategy, only_host, waiting_as);
        }
        if (!got) return pyb::none();
        pyb::list out;
        for (const auto& b : *got) out.append(pyb::make_tuple(b.host, b.gpu_ids, b.gpu_share));
        return out;
      },
      "Books bundles (dicts of amounts) at the head: [(host, gpu_ids, gpu_share)] per bundle, "
      "or None when they do not fit now (troupe/resources.h try_book).");
  m.def(
      "book_at",
      [](Cluster& c, const std::string& id, const pyb::list& bundles, const pyb::list& placements,
         bool overcommit) {
        auto requests = to_requests(bundles);
        std::vector<BookedBundle> at;
        for (const auto& p : placements) {
          auto t = pyb::cast<pyb::tuple>(p);
          at.push_back(BookedBundle{pyb::cast<size_t>(t[0]), pyb::cast<std::vector<int>>(t[1]),
                                    pyb::cast<double>(t[2])});
        }
        pyb::gil_scoped_release nogil;
        book_at(c, id, requests, at, overcommit);
      },
      "Books bundles exactly at [(host, gpu_ids, gpu_share)] (troupe/resources.h book_at).");
  m.def(
      "tie_booking",
      [](Cluster& c, const std::string& id, const Worker& worker) {
        pyb::gil_scoped_release nogil;
        tie_booking_to_worker(c, id, worker);
      },
      "Ties a booking to a worker: it outlives this driver and goes with the worker.");
  m.def(
      "unbook",
      [](Cluster& c, const std::string& id) {
        pyb::gil_scoped_release nogil;
        return unbook(c, id);
      },
      "Frees a booking; idempotent.");
  m.def(
      "host_resources",
      [](Cluster& c) {
        std::vector<HostResources> hosts;
        {
          pyb::gil_scoped_release nogil;
          hosts = host_resources(c);
        }
        pyb::list out;
        for (const auto& h : hosts) {
          pyb::dict d, gpus_free;
          d["index"] = h.host;
          d["name"] = h.name;
          d["alive"] = h.alive;
          d["total"] = amounts(h.num_cpus, h.gpu_ids.size(), h.memory_bytes, h.resources);
          double gpus = 0;
          for (size_t i = 0; i < h.gpu_ids.size(); ++i) {
            gpus_free[pyb::int_(h.gpu_ids[i])] = h.gpus_free[i];
            gpus += h.gpus_free[i];
          }
          pyb::dict free = amounts(h.cpus_free, 0, h.memory_free, h.resources_free);
          free["GPU"] = gpus;
          d["free"] = free;
          d["gpus_free"] = gpus_free;
          out.append(d);
        }
        return out;
      },
      "Every host's {index, name, alive, total, free, gpus_free}, every driver's bookings "
      "counted.");
  m.def(
      "on_resources_freed",
      [](Cluster& c, std::function<void()> listener) {
        // Runs on a troupe thread: takes the GIL, unless the interpreter is finalizing (then the
        // call is skipped and the callable leaked, as futures' callbacks are).
        auto held = std::shared_ptr<std::function<void()>>(
            new std::function<void()>(std::move(listener)), [](std::function<void()>* fn) {
              if (!python_usable()) return;
              pyb::gil_scoped_acquire gil;
              delete fn;
            });
        return on_resources_freed(c, [held] {
          if (!python_usable()) return;
          pyb::gil_scoped_acquire gil;
          try {
            (*held)();
          } catch (pyb::error_already_set& e) {
            e.discard_as_unraisable("troupe resources-freed listener");
          }
        });
      },
      "Calls listener() (on a troupe thread; it must not block) when a booking this driver "
      "waits for may fit now; returns an id for remove_resources_freed_listener.");
  m.def(
      "remove_resources_freed_listener",
      [](Cluster& c, uint64_t id) {
        pyb::gil_scoped_release nogil;
        remove_resources_freed_listener(c, id);
      },
      "Stops calling a listener of on_resources_freed.");
}

}  // namespace troupe::py
