// A framed, bidirectional connection over a Unix or TCP stream socket.
//
// Threads: reading, handler calls and closing happen on the I/O thread of the socket's
// io_context. send() may be called from any thread: it writes straight to the socket when
// nothing is queued (no thread hop on the call path) and otherwise queues the frame for the I/O
// thread. Frames are sent in the order send() was called.
#pragma once

#include <asio/generic/stream_protocol.hpp>
#include <asio/io_context.hpp>
#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "troupe/error.h"
#include "wire/frame.h"

namespace troupe::transport {

using Socket = asio::generic::stream_protocol::socket;

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  using FrameHandler = std::function<void(wire::Frame&&)>;
  using CloseHandler = std::function<void(const Error& reason)>;

  // `peer` describes the other end in logs ("unix:/run/x.sock", "tcp:127.0.0.2:1400").
  Connection(Socket socket, std::string peer);
  ~Connection();

  // Sets what to do with incoming frames and the limits they are checked against. Call before
  // start() or on the I/O thread (for example from inside the current frame handler, to switch
  // from the handshake to the authenticated protocol). A frame handler that throws Error closes
  // the connection with that reason.
  void set_handlers(wire::FrameLimits limits, FrameHandler on_frame, CloseHandler on_close);
  // Starts the read loop. Call once.
  void start();

  // Sends one frame; returns false if the connection is closed. Thread-safe. The attachments
  // are written from their own buffers, which the connection keeps alive until written.
  bool send(wire::FrameKind kind, uint64_t request_id, std::string body,
            std::vector<Bytes> attachments = {});

  // Closes the socket and calls the close handler once, on the I/O thread. Thread-safe,
  // idempotent; the first reason wins.
  void close(const Error& reason);
  bool closed() const { return closed_.load(); }
  const std::string& peer() const { return peer_; }
  asio::io_context& context() { return io_; }

 private:
  struct PendingWrite {
    std::string prefix;
    std::string body;
    std::vector<Bytes> attachments;
    size_t offset = 0;  // bytes of this frame already written
  };
  enum class ReadState { kHeader, kTable, kPayload };

  void read_more();
  void parse_buffer();
  bool parse_one();  // returns false when more bytes are needed
  void prepare_payload(const std::vector<uint64_t>& sizes);
  bool fill_payload_from_buffer();
  void read_payload_directly();
  void deliver();
  void fail(const Error& reason);     // on the I/O thread
  size_t write_now(PendingWrite& w);  // returns bytes written, stops at EAGAIN; throws on error
  void flush_queue();                 // on the I/O thread

  asio::io_context& io_;
  Socket socket_;
  std::string peer_;
  std::atomic<bool> closed_{false};
  bool close_reported_ = false;

  // Read side (I/O thread only).
  wire::FrameLimits limits_;
  FrameHandler on_frame_;
  FrameHandler retired_frame_handler_;  // replaced while running; destroyed after it returns
  bool dispatching_ = false;
  CloseHandler on_close_;
  std::vector<uint8_t> rbuf_;
  size_t rbegin_ = 0, rend_ = 0;
  ReadState state_ = ReadState::kHeader;
  wire::FrameHeader header_;
  wire::Frame frame_;
  std::vector<std::pair<uint8_t*, size_t>> payload_parts_;  // destinations still to fill
  size_t part_index_ = 0, part_offset_ = 0;

  // Write side.
  std::mutex write_mu_;
  std::deque<PendingWrite> queue_;
  bool flushing_ = false;
};

}  // namespace troupe::transport
