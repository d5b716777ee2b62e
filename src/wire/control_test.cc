// Every control message survives the trip through a real request, response or event frame, and
// decoding names the message and the field for every kind of bad input.
#include "wire/control.h"

#include <gtest/gtest.h>

#include "wire/wire_test_util.h"

namespace troupe::wire::control {
namespace {

using codec_test::error_of;
using codec_test::through_request;
using codec_test::through_response;

TEST(ControlMessages, AgentRequestsRoundTrip) {
  StartWorker start;
  start.name = "policy-0-1";
  start.gpus = {1, 3};
  start.num_gpus = 2;
  start.wrapper = {"nsys", "profile"};
  start.take_ports = {1400, 1401};
  start.log_to_terminal = false;
  start.start_timeout_ms = 1234;
  start.executable = "/usr/bin/python3";
  start.args = {"-m", "troupe._worker"};
  start.env = {{"RANK", "1"}, {"PATH", "/usr/bin"}};
  start.shared_env_id = "env-3";
  start.shared_env = {{"AVAILABLE_PORT_LIST", "[1400, 1401]"}};
  start.fork_server = true;
  start.python_fork = true;
  start.python_preload = {"numpy", "torch"};
  EXPECT_EQ(StartWorker::from(through_request(start)), start);
  // Named by id only: the same start without the variables.
  StartWorker by_id = StartWorker::from(Value(start.to_map(/*with_shared_env=*/false)));
  EXPECT_EQ(by_id.shared_env_id, "env-3");
  EXPECT_TRUE(by_id.shared_env.empty());
  by_id.shared_env = start.shared_env;
  EXPECT_EQ(by_id, start);
  EXPECT_EQ(StopWorker::from(through_request(StopWorker{"w", 250})), (StopWorker{"w", 250}));
  ReservePorts ports{"group-a", 3, 1500, 1600};
  EXPECT_EQ(ReservePorts::from(through_request(ports)), ports);
  EXPECT_EQ(ReleasePorts::from(through_request(ReleasePorts{"group-a"})), ReleasePorts{"group-a"});
  EXPECT_EQ(GpuState::from(through_request(GpuState{{0, 1}})), (GpuState{{0, 1}}));
  RegisterAgent reg;
  reg.host_name = "host-1";
  reg.address = "10.77.0.2";
  reg.num_cpus = 3.5;
  reg.gpu_ids = {0, 1};
  reg.labels = {{"topology", "rack-1"}};
  reg.unix_endpoint = "unix:/run/a.sock";
  reg.tcp_endpoint = "tcp:10.77.0.2:4000";
  reg.pid = 77;
  reg.machine_id = "boot-1";
  reg.memory_bytes = int64_t{1} << 34;
  EXPECT_EQ(RegisterAgent::from(through_request(reg)), reg);
  EXPECT_FALSE(RegisterAgent::from(through_request(reg)).workers.has_value());  // not said
  reg.workers = std::vector<std::string>{};                                     // said: none
  EXPECT_EQ(RegisterAgent::from(through_request(reg)), reg);
  reg.workers = std::vector<std::string>{"d.w0", "d.w1"};
  EXPECT_EQ(RegisterAgent::from(through_request(reg)), reg);
}

TEST(ControlMessages, RepliesAndEventsRoundTrip) {
  StartWorkerReply started{4242, 123456, "unix:/s/w0.sock", "tcp:127.0.0.2:5000", {0}};
  EXPECT_EQ(StartWorkerReply::from(through_response(started.to_value())), started);
  EXPECT_EQ(StopWorkerReply::from(through_response(StopWorkerReply{"exit code 0"}.to_value())),
            StopWorkerReply{"exit code 0"});
  MemoryReply mem{1000, 600, {{"w0", 100}, {"w1", 200}}};
  EXPECT_EQ(MemoryReply::from(through_response(mem.to_value())), mem);
  EXPECT_EQ(RegisterAgentReply::from(through_response(RegisterAgentReply{3}.to_value())),
            RegisterAgentReply{3});
  WorkerExited killed{"w0", 99, "signal 9 (Killed)", std::nullopt, 9, {"last words"}};
  EXPECT_EQ(WorkerExited::from(through_response(killed.to_value())), killed);
  WorkerExited exited{"w1", 98, "exit code 3", 3, std::nullopt, {}};
  EXPECT_EQ(WorkerExited::from(through_response(exited.to_value())), exited);
}

TEST(ControlMessages, BareRepliesRoundTrip) {
  EXPECT_EQ(ReservePorts::reply_from(through_response(ReservePorts::reply({1400, 1401}))),
            (std::vector<int>{1400, 1401}));
  EXPECT_EQ(ReleasePorts::reply_from(through_response(ReleasePorts::reply(2))), 2);
  std::vector<std::string> lines = {"GPU 0: 10% util", "GPU 1: idle"};
  EXPECT_EQ(GpuState::reply_from(through_response(GpuState::reply(lines))), lines);
  EXPECT_STREQ(Memory::kMethod, "memory");
  EXPECT_STREQ(Shutdown::kMethod, "shutdown");
  EXPECT_EQ(error_of([] { ReservePorts::reply_from(Value("1400")); }),
            "reserve_ports reply: expected list<int>, got string \"1400\"");
  EXPECT_EQ(error_of([] { ReleasePorts::reply_from(Value(Array{})); }),
            "release_ports reply: expected int, got list");
  EXPECT_EQ(error_of([] { GpuState::reply_from(Value(Array{3})); }),
            "gpu_state reply: expected string, got int 3");
}

TEST(ControlMessages, ReadLogRoundTripsAndRefusesUnboundedRequests) {
  ReadLog tail{"talker-0-1", 0, 2, 4096};
  EXPECT_EQ(ReadLog::from(through_request(tail)), tail);
  ReadLog from_offset{"talker-0-1", 1234, 0, ReadLog::kMaxBytes};
  EXPECT_EQ(ReadLog::from(through_request(from_offset)), from_offset);
  EXPECT_EQ(ReadLog::from(Map{{"name", "w"}}), (ReadLog{"w", 0, 0, 256 * 1024}));
  ReadLogReply reply{"talker-0-1", 4242, false, 10, 22, 22, "second\nthird\n"};
  EXPECT_EQ(ReadLogReply::from(through_response(reply.to_value())), reply);

  EXPECT_EQ(error_of([] {
              ReadLog::from(Map{{"offset", 0}});
            }),
            "read_log: field 'name' is missing");
  EXPECT_EQ(error_of([] {
              ReadLog::from(Map{{"name", "w"}, {"max_bytes", int64_t{1} << 40}});
            }),
            "read_log: field 'max_bytes': must be in 1..1048576, got 1099511627776");
  EXPECT_EQ(error_of([] {
              ReadLog::from(Map{{"name", "w"}, {"max_bytes", 0}});
            }),
            "read_log: field 'max_bytes': must be in 1..1048576, got 0");
  EXPECT_EQ(error_of([] {
              ReadLog::from(Map{{"name", "w"}, {"offset", -5}});
            }),
            "read_log: field 'offset': must not be negative, got -5");
  EXPECT_EQ(error_of([] {
              ReadLog::from(Map{{"name", "w"}, {"tail_lines", -1}});
            }),
            "read_log: field 'tail_lines': must not be negative, got -1");
  EXPECT_EQ(error_of([] {
              ReadLog::from(Map{{"name", "w"}, {"tail_lines", "2"}});
            }),
            "read_log: field 'tail_lines': expected int, got string \"2\"");
  EXPECT_EQ(error_of([] {
              ReadLogReply::from(Map{{"name", "w"}, {"pid", 1}});
            }),
            "read_log reply: field 'alive' is missing");
}

TEST(ControlMessages, OptionalFieldsTakeTheirDefaults) {
  StartWorker s = StartWorker::from(Map{{"name", "w"}});
  EXPECT_EQ(s.name, "w");
  EXPECT_TRUE(s.gpus.empty());
  EXPECT_EQ(s.num_gpus, 0);
  EXPECT_TRUE(s.log_to_terminal);
  EXPECT_EQ(s.start_timeout_ms, 60000);
  EXPECT_EQ(s.executable, "");
  EXPECT_FALSE(s.fork_server);  // an older driver's request: exec
  EXPECT_FALSE(s.python_fork);
  EXPECT_TRUE(s.python_preload.empty());
  ReservePorts p = ReservePorts::from(Map{{"owner", "o"}});
  EXPECT_EQ(p, (ReservePorts{"o", 1, 1400, 5400}));
  // Unknown fields are ignored.
  EXPECT_EQ(StopWorker::from(Map{{"name", "w"}, {"from_the_future", 1}}), (StopWorker{"w", 3000}));
}

TEST(ControlMessages, BadInputNamesTheMessageAndTheField) {
  EXPECT_EQ(error_of([] {
              StartWorker::from(Map{{"gpus", Array{0}}});
            }),
            "start_worker: field 'name' is missing");
  EXPECT_EQ(error_of([] {
              StartWorker::from(Map{{"name", "w"}, {"gpus", "0,1"}});
            }),
            "start_worker: field 'gpus': expected list<int>, got string \"0,1\"");
  EXPECT_EQ(error_of([] {
              StartWorker::from(Map{{"name", "w"}, {"env", Map{{"A", 1}}}});
            }),
            "start_worker: field 'env': expected string, got int 1");
  EXPECT_EQ(error_of([] {
              ReservePorts::from(Map{{"owner", "o"}, {"count", int64_t{1} << 40}});
            }),
            "reserve_ports: field 'count': integer 1099511627776 out of range");
  EXPECT_EQ(error_of([] { StopWorker::from(Value("w")); }),
            "stop_worker: expected a map of fields, got string");
  EXPECT_EQ(error_of([] {
              StartWorkerReply::from(Map{{"unix", "u"}});
            }),
            "start_worker reply: field 'pid' is missing");
  EXPECT_EQ(error_of([] {
              RegisterAgent::from(Map{{"host_name", "h"}, {"address", 5}});
            }),
            "register_agent: field 'address': expected string, got int 5");
}

}  // namespace
}  // namespace troupe::wire::control
