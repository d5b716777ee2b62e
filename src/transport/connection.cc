#include "transport/connection.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/ssl/context.hpp>
#include <asio/ssl/error.hpp>
#include <asio/ssl/stream.hpp>
#include <asio/write.hpp>
#include <cstring>

#include "common/log.h"

namespace troupe::transport {
namespace {
constexpr size_t kHandshakeReadBufferSize = 1024;  // a header and a 512-byte handshake body
constexpr size_t kReadBufferSize = 64 * 1024;
constexpr size_t kMinPartChunk = 64 * 1024;  // first allocation of a frame part (CONN-1)
// A part with at least this much left is read straight into its own buffer; less goes through
// the read buffer (one read for many small parts).
constexpr size_t kDirectReadMin = 16 * 1024;
constexpr size_t kMaxIov = 64;
}  // namespace

Connection::Connection(Socket socket, std::string peer)
    : io_(static_cast<asio::io_context&>(socket.get_executor().context())),
      socket_(std::move(socket)),
      peer_(std::move(peer)),
      rbuf_(kHandshakeReadBufferSize),
      stall_timer_(io_) {
  asio::error_code ec;
  socket_.non_blocking(true, ec);
  ::fcntl(socket_.native_handle(), F_SETFD, FD_CLOEXEC);  // never inherited by a child
}

Connection::Connection(Socket socket, std::string peer, std::shared_ptr<asio::ssl::context> tls,
                       TlsRole role)
    : Connection(std::move(socket), std::move(peer)) {
  tls_context_ = std::move(tls);
  tls_role_ = role;
  tls_ = std::make_unique<TlsStream>(socket_, *tls_context_);
}

Connection::~Connection() {
  tls_.reset();
  asio::error_code ec;
  socket_.close(ec);
}

template <typename Handler>
void Connection::async_read_some(uint8_t* data, size_t size, Handler&& handler) {
  if (tls_)
    tls_->async_read_some(asio::buffer(data, size), std::forward<Handler>(handler));
  else
    socket_.async_read_some(asio::buffer(data, size), std::forward<Handler>(handler));
}

namespace {
bool closed_by_peer(const asio::error_code& ec) {
  // A TLS peer that closes its socket without a close_notify alert truncates the stream.
  return ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::ssl::error::stream_truncated;
}
}  // namespace

void Connection::start_tls() {
  tls_->async_handshake(
      tls_role_ == TlsRole::kServer ? asio::ssl::stream_base::server
                                    : asio::ssl::stream_base::client,
      [self = shared_from_this()](const asio::error_code& ec) {
        if (ec) {
          std::string reason = closed_by_peer(ec) ? "closed by the peer" : ec.message();
          self->fail(Error(ErrorCode::kUnauthenticated,
                           "TLS handshake with " + self->peer_ + " failed: " + reason +
                               " (both ends need TLS, with certificates of one cluster CA)"));
          return;
        }
        {
          std::lock_guard<std::mutex> lock(self->write_mu_);
          self->tls_ready_ = true;
          if (!self->queue_.empty() && !self->flushing_) {
            self->flushing_ = true;
            asio::post(self->io_, [self] { self->flush_queue(); });
          }
        }
        self->read_more();
      });
}

void Connection::set_handlers(wire::FrameLimits limits, FrameHandler on_frame,
                              CloseHandler on_close) {
  limits_ = limits;
  if (dispatching_) retired_frame_handler_ = std::move(on_frame_);  // still running
  on_frame_ = std::move(on_frame);
  on_close_ = std::move(on_close);
}

void Connection::start() {
  asio::post(io_, [self = shared_from_this()] {
    if (self->closed_) return;
    if (self->tls_)
      self->start_tls();
    else
      self->read_more();
  });
}

void Connection::read_more() {
  if (closed_) return;
  if (rbegin_ == rend_) rbegin_ = rend_ = 0;
  // The full-size buffer only once frames larger than the handshake's may come (CONN-1).
  if (rbuf_.size() < kReadBufferSize && wire::kHeaderSize + limits_.max_body > rbuf_.size())
    rbuf_.resize(kReadBufferSize);
  if (rend_ == rbuf_.size()) {
    std::memmove(rbuf_.data(), rbuf_.data() + rbegin_, rend_ - rbegin_);
    rend_ -= rbegin_;
    rbegin_ = 0;
  }
  watch_stall();
  async_read_some(
      rbuf_.data() + rend_, rbuf_.size() - rend_,
      [self = shared_from_this()](const asio::error_code& ec, size_t n) {
        if (ec) {
          if (closed_by_peer(ec))
            self->fail(Error(ErrorCode::kConnectionLost, "connection closed by " + self->peer_));
          else
            self->fail(Error(ErrorCode::kConnectionLost,
                             "read from " + self->peer_ + " failed: " + ec.message()));
          return;
        }
        self->rend_ += n;
        self->on_bytes();
        self->parse_buffer();
      });
}

void Connection::close_with(const Error& reason) {
  if (!quiet_)
    TROUPE_LOG(Warning) << "closing connection from " << peer_ << ": " << reason.message();
  fail(reason);
}

void Connection::parse_buffer() {
  try {
    while (!closed_ && parse_one()) {
    }
  } catch (const Error& e) {
    close_with(e);
    return;
  }
  continue_reading();
}

void Connection::continue_reading() {
  if (closed_) return;
  if (state_ == ReadState::kPayload && rbegin_ == rend_) {
    const Part& part = parts_[part_index_];
    if (part.size - part.filled >= kDirectReadMin) return read_part_directly();
  }
  read_more();
}

bool Connection::parse_one() {
  size_t avail = rend_ - rbegin_;
  const uint8_t* p = rbuf_.data() + rbegin_;
  if (state_ == ReadState::kHeader) {
    if (avail < wire::kHeaderSize) return false;
    header_ = wire::decode_header(p, limits_);
    rbegin_ += wire::kHeaderSize;
    state_ = ReadState::kTable;
    return true;
  }
  if (state_ == ReadState::kTable) {
    size_t table = 8ull * header_.attachment_count;
    if (avail < table) {
      if (rbegin_ + table > rbuf_.size()) {
        // Make room. The table (at most 8 * max_attachments bytes, checked in decode_header) can
        // exceed the read buffer; without growing it, reads into a full buffer spin forever.
        if (table > rbuf_.size()) rbuf_.resize(table);
        std::memmove(rbuf_.data(), rbuf_.data() + rbegin_, avail);
        rbegin_ = 0;
        rend_ = avail;
      }
      return false;
    }
    auto sizes =
        wire::decode_attachment_sizes(p, header_.attachment_count, header_.body_size, limits_);
    rbegin_ += table;
    prepare_payload(sizes);
    state_ = ReadState::kPayload;
  }
  if (!fill_payload_from_buffer()) return false;
  deliver();
  return true;
}

void Connection::prepare_payload(const std::vector<uint64_t>& sizes) {
  frame_ = wire::Frame{};
  frame_.kind = header_.kind;
  frame_.request_id = header_.request_id;
  parts_.assign(1 + sizes.size(), Part{});
  parts_[0].size = header_.body_size;
  for (size_t i = 0; i < sizes.size(); ++i) parts_[1 + i].size = sizes[i];
  attachment_buffers_.clear();
  attachment_buffers_.resize(sizes.size());
  part_index_ = 0;
}

uint8_t* Connection::reserve(size_t index, size_t need) {
  Part& part = parts_[index];
  if (part.capacity - part.filled >= need) return part.data + part.filled;
  // Geometric growth, never past the declared size: at most max(kMinPartChunk, 2 * filled).
  size_t capacity =
      std::min(part.size, std::max({part.filled + need, 2 * part.capacity, kMinPartChunk}));
  if (index == 0) {
    frame_.body.resize(capacity);
    part.data = reinterpret_cast<uint8_t*>(frame_.body.data());
  } else {
    auto& buffer = attachment_buffers_[index - 1];
    auto* grown = static_cast<uint8_t*>(std::realloc(buffer.get(), capacity));
    if (!grown)
      throw Error(ErrorCode::kResourceUnavailable, "out of memory for a frame attachment of " +
                                                       std::to_string(part.size) + " bytes");
    (void)buffer.release();
    buffer.reset(grown);
    part.data = grown;
  }
  part.capacity = capacity;
  return part.data + part.filled;
}

bool Connection::fill_payload_from_buffer() {
  while (part_index_ < parts_.size()) {
    Part& part = parts_[part_index_];
    size_t n = std::min(part.size - part.filled, rend_ - rbegin_);
    if (n) {
      std::memcpy(reserve(part_index_, n), rbuf_.data() + rbegin_, n);
      rbegin_ += n;
      part.filled += n;
    }
    if (part.filled < part.size) return false;
    ++part_index_;
  }
  return true;
}

void Connection::read_part_directly() {
  uint8_t* dst;
  size_t room;
  try {
    dst = reserve(part_index_, 1);
    const Part& part = parts_[part_index_];
    room = part.capacity - part.filled;
  } catch (const Error& e) {
    return close_with(e);
  }
  watch_stall();
  async_read_some(dst, room, [self = shared_from_this()](const asio::error_code& ec, size_t n) {
    if (ec) {
      self->fail(Error(ErrorCode::kConnectionLost,
                       "connection to " + self->peer_ + " lost in the middle of a frame"));
      return;
    }
    self->on_bytes();
    Part& part = self->parts_[self->part_index_];
    part.filled += n;
    if (part.filled == part.size) ++self->part_index_;
    self->parse_buffer();  // delivers the frame when that was its last part
  });
}

void Connection::on_bytes() { last_progress_ = std::chrono::steady_clock::now(); }

void Connection::watch_stall() {
  if (stall_timer_armed_ || stall_timeout_.count() <= 0 || !mid_frame()) return;
  stall_timer_armed_ = true;
  stall_timer_.expires_at(last_progress_ + stall_timeout_);
  stall_timer_.async_wait(
      [self = shared_from_this()](const asio::error_code& ec) { self->check_stall(ec); });
}

void Connection::check_stall(const asio::error_code& ec) {
  stall_timer_armed_ = false;
  if (ec || closed_ || !mid_frame()) return;
  if (std::chrono::steady_clock::now() < last_progress_ + stall_timeout_) {
    ++stall_checks_passed_;
    return watch_stall();
  }
  size_t received = state_ == ReadState::kPayload ? 0 : rend_ - rbegin_;
  size_t declared = 0;
  if (state_ == ReadState::kPayload) {
    for (const Part& part : parts_) received += part.filled, declared += part.size;
  }
  std::string progress =
      state_ == ReadState::kPayload
          ? std::to_string(received) + " of " + std::to_string(declared) + " payload bytes"
          : std::to_string(received) + " bytes of a frame header";
  close_with(Error(ErrorCode::kTimeout, "frame stalled: no bytes for " +
                                            std::to_string(stall_timeout_.count()) + " ms after " +
                                            progress));
}

void Connection::deliver() {
  state_ = ReadState::kHeader;
  wire::Frame frame = std::move(frame_);
  frame_ = wire::Frame{};
  frame.attachments.reserve(attachment_buffers_.size());
  for (size_t i = 0; i < attachment_buffers_.size(); ++i) {
    size_t size = parts_[1 + i].size;
    // Bytes of an empty attachment still point somewhere valid.
    if (!attachment_buffers_[i])
      attachment_buffers_[i].reset(static_cast<uint8_t*>(std::malloc(1)));
    uint8_t* data = attachment_buffers_[i].release();
    frame.attachments.emplace_back(
        std::shared_ptr<const void>(data, [](const void* p) { std::free(const_cast<void*>(p)); }),
        data, size);
  }
  attachment_buffers_.clear();
  parts_.clear();
  if (!on_frame_) return;
  dispatching_ = true;
  struct Done {
    Connection* c;
    ~Done() {
      c->dispatching_ = false;
      c->retired_frame_handler_ = nullptr;
    }
  } done{this};
  try {
    on_frame_(std::move(frame));
  } catch (const Error& e) {
    close_with(e);
  } catch (const std::exception& e) {
    close_with(Error(ErrorCode::kInternal, e.what()));
  }
}

void Connection::fail(const Error& reason) {
  std::deque<PendingWrite> unsent;
  {
    // Under write_mu_: send() on another thread must not write to the descriptor while it is
    // being closed, or after its number was reused by another socket.
    std::lock_guard<std::mutex> lock(write_mu_);
    closed_ = true;
    asio::error_code ec;
    socket_.close(ec);
    unsent.swap(queue_);  // destroyed below, after write_mu_ is released
  }
  unsent.clear();
  stall_timer_.cancel();
  if (close_reported_) return;
  close_reported_ = true;
  if (on_close_) {
    CloseHandler handler = std::move(on_close_);
    on_close_ = nullptr;
    handler(reason);
  }
  if (dispatching_) retired_frame_handler_ = std::move(on_frame_);
  on_frame_ = nullptr;
}

void Connection::close(const Error& reason) {
  closed_ = true;
  asio::post(io_, [self = shared_from_this(), reason] { self->fail(reason); });
}

namespace {
std::atomic<uint64_t> g_bytes_sent{0};
}  // namespace

uint64_t bytes_sent_total() { return g_bytes_sent.load(std::memory_order_relaxed); }

size_t Connection::write_now(PendingWrite& w) {
  size_t total_written = 0;
  for (;;) {
    iovec iov[kMaxIov];
    size_t n = 0;
    size_t skip = w.offset;
    auto add = [&](const void* data, size_t size) {
      if (n == kMaxIov || size == 0) return;
      if (skip >= size) {
        skip -= size;
        return;
      }
      iov[n].iov_base = const_cast<uint8_t*>(static_cast<const uint8_t*>(data) + skip);
      iov[n].iov_len = size - skip;
      skip = 0;
      ++n;
    };
    add(w.prefix.data(), w.prefix.size());
    add(w.body.data(), w.body.size());
    for (const auto& a : w.attachments) add(a.data(), a.size());
    if (n == 0) return total_written;
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    ssize_t r = ::sendmsg(socket_.native_handle(), &msg, MSG_NOSIGNAL);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return total_written;
      throw Error(ErrorCode::kConnectionLost,
                  "write to " + peer_ + " failed: " + std::strerror(errno));
    }
    w.offset += static_cast<size_t>(r);
    total_written += static_cast<size_t>(r);
    g_bytes_sent.fetch_add(static_cast<uint64_t>(r), std::memory_order_relaxed);
  }
}

bool Connection::send(wire::FrameKind kind, uint64_t request_id, std::string body,
                      std::vector<Bytes> attachments) {
  if (closed_) return false;
  PendingWrite w;
  w.prefix = wire::encode_prefix(kind, request_id, body.size(), attachments);
  w.body = std::move(body);
  w.attachments = std::move(attachments);
  size_t frame_size = w.prefix.size() + w.body.size();
  for (const auto& a : w.attachments) frame_size += a.size();

  std::lock_guard<std::mutex> lock(write_mu_);
  if (closed_) return false;  // closed while the frame was being encoded
  if (queue_.empty() && !flushing_ && !tls_) {
    try {
      write_now(w);
    } catch (const Error& e) {
      close(e);
      return false;
    }
    if (w.offset == frame_size) return true;
  }
  queue_.push_back(std::move(w));
  if (!flushing_ && (!tls_ || tls_ready_)) {
    flushing_ = true;
    asio::post(io_, [self = shared_from_this()] { self->flush_queue(); });
  }
  return true;
}

void Connection::flush_tls() {
  std::unique_lock<std::mutex> lock(write_mu_);
  if (queue_.empty() || closed_) {
    flushing_ = false;
    return;
  }
  // Held by the write's handler: the TLS stream reads the buffers until the handler runs.
  auto w = std::make_shared<PendingWrite>(std::move(queue_.front()));
  queue_.pop_front();
  lock.unlock();
  std::vector<asio::const_buffer> buffers;
  buffers.reserve(2 + w->attachments.size());
  buffers.emplace_back(w->prefix.data(), w->prefix.size());
  if (!w->body.empty()) buffers.emplace_back(w->body.data(), w->body.size());
  for (const auto& a : w->attachments)
    if (a.size()) buffers.emplace_back(a.data(), a.size());
  asio::async_write(*tls_, buffers,
                    [self = shared_from_this(), w](const asio::error_code& ec, size_t n) {
                      if (ec) {
                        self->fail(Error(ErrorCode::kConnectionLost,
                                         "write to " + self->peer_ + " failed: " + ec.message()));
                        return;
                      }
                      g_bytes_sent.fetch_add(n, std::memory_order_relaxed);
                      self->flush_tls();
                    });
}

void Connection::flush_queue() {
  if (tls_) return flush_tls();
  // Frames written are destroyed after write_mu_ is released (declared before the lock):
  // an attachment's release may take another lock (a Python buffer's takes the GIL), which a
  // thread holding it and waiting in send() for write_mu_ would never give up.
  std::vector<PendingWrite> written;
  std::unique_lock<std::mutex> lock(write_mu_);
  while (!queue_.empty() && !closed_) {
    PendingWrite& w = queue_.front();
    size_t frame_size = w.prefix.size() + w.body.size();
    for (const auto& a : w.attachments) frame_size += a.size();
    try {
      write_now(w);
    } catch (const Error& e) {
      lock.unlock();
      fail(e);
      return;
    }
    if (w.offset < frame_size) {
      // Socket full: wait until writable, then continue.
      lock.unlock();
      socket_.async_wait(Socket::wait_write, [self =
                                                  shared_from_this()](const asio::error_code& ec) {
        if (ec) {
          self->fail(Error(ErrorCode::kConnectionLost, "connection to " + self->peer_ + " lost"));
          return;
        }
        self->flush_queue();
      });
      return;
    }
    written.push_back(std::move(w));
    queue_.pop_front();
  }
  flushing_ = false;
  lock.unlock();
}

}  // namespace troupe::transport
