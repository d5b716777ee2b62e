// A framed, bidirectional connection over a Unix or TCP stream socket.
//
// Threads: reading, handler calls and closing happen on the I/O thread of the socket's
// io_context. send() may be called from any thread: it writes straight to the socket when
// nothing is queued (no thread hop on the call path) and otherwise queues the frame for the I/O
// thread. Frames are sent in the order send() was called.
//
// Memory (CONN-1): a new connection holds a read buffer of 1 KiB, enough for the handshake
// frames; the 64 KiB buffer comes once the limits allow larger frames. A frame's body and
// attachments are allocated as their bytes arrive, never at the size the header declares: the
// buffers of a frame in progress hold at most max(64 KiB, twice the bytes received) per part.
// CONN-2: a frame that makes no progress for the stall timeout (no byte arrives while it is
// incomplete) closes the connection with kTimeout and a logged reason.
// CONN-3 (TLS, transport/tls.h): a connection made with a TLS context runs the TLS handshake
// first (start()), then reads and writes through the TLS stream. Its frames are always written
// by the I/O thread (send() queues them), since a TLS stream is not thread-safe; a handshake
// failure closes it with kUnauthenticated and the TLS reason.
#pragma once

#include <asio/generic/stream_protocol.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "troupe/error.h"
#include "wire/frame.h"

namespace asio::ssl {
class context;
template <typename Stream>
class stream;
}  // namespace asio::ssl

namespace troupe::transport {

using Socket = asio::generic::stream_protocol::socket;

// The read buffer's allocator: growing the buffer leaves the new bytes unwritten, so its pages
// are touched only as the socket fills them (a worker's start touches a few, not 64 KiB).
template <typename T>
struct UninitializedAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <typename U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;  // default-initialization: no write for bytes
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// How long a frame may go without a byte arriving once it has started (CONN-2).
constexpr std::chrono::milliseconds kDefaultFrameStallTimeout{30000};

// Bytes written to the sockets of every Connection of this process so far (frames of all
// kinds, authentication included). Thread-safe; one relaxed atomic add per write.
uint64_t bytes_sent_total();

enum class TlsRole { kClient, kServer };

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  using FrameHandler = std::function<void(wire::Frame&&)>;
  using CloseHandler = std::function<void(const Error& reason)>;

  // `peer` describes the other end in logs ("unix:/run/x.sock", "tcp:127.0.0.2:1400").
  Connection(Socket socket, std::string peer);
  // A TLS connection (CONN-3) in `role`, with `tls` (shared: it outlives the connection).
  Connection(Socket socket, std::string peer, std::shared_ptr<asio::ssl::context> tls,
             TlsRole role);
  ~Connection();

  // Sets what to do with incoming frames and the limits they are checked against. Call before
  // start() or on the I/O thread (for example from inside the current frame handler, to switch
  // from the handshake to the authenticated protocol). A frame handler that throws Error closes
  // the connection with that reason.
  void set_handlers(wire::FrameLimits limits, FrameHandler on_frame, CloseHandler on_close);
  // Sets the stall timeout of CONN-2 (zero: none). Call before start() or on the I/O thread.
  void set_stall_timeout(std::chrono::milliseconds timeout) { stall_timeout_ = timeout; }
  // While `quiet` is set, the connection does not log why it closes (the handshake logs its
  // failures through a rate limit instead). Call before start() or on the I/O thread.
  void set_quiet(bool quiet) { quiet_ = quiet; }
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
  bool encrypted() const { return tls_ != nullptr; }
  asio::io_context& context() { return io_; }
  // When bytes last arrived from the peer (epoch before any). I/O thread only.
  std::chrono::steady_clock::time_point last_bytes_received() const { return last_progress_; }
  // CONN-2's decisions, for tests: whether the stall deadline is being watched (only inside a
  // frame; I/O thread only), and how many times it came due and found the frame had made
  // progress (thread-safe).
  bool watching_for_stall() const { return stall_timer_armed_; }
  uint64_t stall_checks_passed() const { return stall_checks_passed_.load(); }

 private:
  // A frame queued for writing. Its attachments are never destroyed under write_mu_ (their
  // release may take other locks: a Python buffer's takes the GIL).
  struct PendingWrite {
    std::string prefix;
    std::string body;
    std::vector<Bytes> attachments;
    size_t offset = 0;  // bytes of this frame already written
  };
  enum class ReadState { kHeader, kTable, kPayload };
  // The body (index 0) or one attachment of the frame being read, allocated as bytes arrive.
  struct Part {
    size_t size = 0;      // declared
    size_t filled = 0;    // received
    size_t capacity = 0;  // allocated
    uint8_t* data = nullptr;
  };
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };

  using TlsStream = asio::ssl::stream<Socket&>;
  template <typename Handler>
  void async_read_some(uint8_t* data, size_t size, Handler&& handler);
  void start_tls();  // CONN-3: the TLS handshake, then the read loop
  void flush_tls();  // on the I/O thread: writes the queue's frames through the TLS stream
  void read_more();
  void parse_buffer();
  void continue_reading();
  bool parse_one();  // returns false when more bytes are needed
  void prepare_payload(const std::vector<uint64_t>& sizes);
  uint8_t* reserve(size_t index, size_t need);  // room for `need` more bytes of part `index`
  bool fill_payload_from_buffer();
  void read_part_directly();
  void on_bytes();  // a read made progress
  void watch_stall();
  void check_stall(const asio::error_code& ec);
  bool mid_frame() const { return state_ != ReadState::kHeader || rend_ > rbegin_; }
  void close_with(const Error& reason);  // logs (unless quiet) and fails
  void deliver();
  void fail(const Error& reason);     // on the I/O thread
  size_t write_now(PendingWrite& w);  // returns bytes written, stops at EAGAIN; throws on error
  void flush_queue();                 // on the I/O thread

  asio::io_context& io_;
  Socket socket_;
  std::shared_ptr<asio::ssl::context> tls_context_;
  std::unique_ptr<TlsStream> tls_;  // over socket_; null: plaintext
  TlsRole tls_role_ = TlsRole::kClient;
  std::string peer_;
  std::atomic<bool> closed_{false};
  bool close_reported_ = false;

  // Read side (I/O thread only).
  wire::FrameLimits limits_;
  FrameHandler on_frame_;
  FrameHandler retired_frame_handler_;  // replaced while running; destroyed after it returns
  bool dispatching_ = false;
  CloseHandler on_close_;
  std::vector<uint8_t, UninitializedAllocator<uint8_t>> rbuf_;
  size_t rbegin_ = 0, rend_ = 0;
  ReadState state_ = ReadState::kHeader;
  wire::FrameHeader header_;
  wire::Frame frame_;
  std::vector<Part> parts_;  // body, then attachments
  std::vector<std::unique_ptr<uint8_t, Free>> attachment_buffers_;
  size_t part_index_ = 0;
  bool quiet_ = false;
  std::chrono::milliseconds stall_timeout_ = kDefaultFrameStallTimeout;
  asio::steady_timer stall_timer_;
  bool stall_timer_armed_ = false;
  std::atomic<uint64_t> stall_checks_passed_{0};
  std::chrono::steady_clock::time_point last_progress_{};

  // Write side.
  std::mutex write_mu_;
  std::deque<PendingWrite> queue_;
  bool flushing_ = false;
  bool tls_ready_ = false;  // CONN-3: the TLS handshake is done (under write_mu_)
};

}  // namespace troupe::transport
