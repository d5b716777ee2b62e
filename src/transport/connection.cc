#include "transport/connection.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <cstring>

#include "common/log.h"

namespace troupe::transport {
namespace {
constexpr size_t kReadBufferSize = 64 * 1024;
constexpr size_t kMaxIov = 64;
}  // namespace

Connection::Connection(Socket socket, std::string peer)
    : io_(static_cast<asio::io_context&>(socket.get_executor().context())),
      socket_(std::move(socket)),
      peer_(std::move(peer)),
      rbuf_(kReadBufferSize) {
  asio::error_code ec;
  socket_.non_blocking(true, ec);
  ::fcntl(socket_.native_handle(), F_SETFD, FD_CLOEXEC);  // never inherited by a child
}

Connection::~Connection() {
  asio::error_code ec;
  socket_.close(ec);
}

void Connection::set_handlers(wire::FrameLimits limits, FrameHandler on_frame,
                              CloseHandler on_close) {
  limits_ = limits;
  if (dispatching_) retired_frame_handler_ = std::move(on_frame_);  // still running
  on_frame_ = std::move(on_frame);
  on_close_ = std::move(on_close);
}

void Connection::start() {
  asio::post(io_, [self = shared_from_this()] { self->read_more(); });
}

void Connection::read_more() {
  if (closed_) return;
  if (rbegin_ == rend_) rbegin_ = rend_ = 0;
  if (rend_ == rbuf_.size()) {
    std::memmove(rbuf_.data(), rbuf_.data() + rbegin_, rend_ - rbegin_);
    rend_ -= rbegin_;
    rbegin_ = 0;
  }
  socket_.async_read_some(
      asio::buffer(rbuf_.data() + rend_, rbuf_.size() - rend_),
      [self = shared_from_this()](const asio::error_code& ec, size_t n) {
        if (ec) {
          if (ec == asio::error::eof || ec == asio::error::connection_reset)
            self->fail(Error(ErrorCode::kConnectionLost, "connection closed by " + self->peer_));
          else
            self->fail(Error(ErrorCode::kConnectionLost,
                             "read from " + self->peer_ + " failed: " + ec.message()));
          return;
        }
        self->rend_ += n;
        self->parse_buffer();
      });
}

void Connection::parse_buffer() {
  try {
    while (!closed_ && parse_one()) {
    }
  } catch (const Error& e) {
    TROUPE_LOG(Warning) << "closing connection from " << peer_ << ": " << e.message();
    fail(e);
    return;
  }
  if (closed_ || state_ == ReadState::kPayload) return;  // payload reads are in flight
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
    if (fill_payload_from_buffer()) {
      deliver();
      return true;
    }
    read_payload_directly();
    return false;
  }
  return false;
}

void Connection::prepare_payload(const std::vector<uint64_t>& sizes) {
  frame_ = wire::Frame{};
  frame_.kind = header_.kind;
  frame_.request_id = header_.request_id;
  frame_.body.resize(header_.body_size);
  payload_parts_.clear();
  if (header_.body_size)
    payload_parts_.emplace_back(reinterpret_cast<uint8_t*>(frame_.body.data()), header_.body_size);
  frame_.attachments.reserve(sizes.size());
  for (uint64_t size : sizes) {
    std::shared_ptr<uint8_t[]> buf(new uint8_t[size ? size : 1]);
    uint8_t* data = buf.get();
    frame_.attachments.emplace_back(std::shared_ptr<const void>(buf, data), data, size);
    if (size) payload_parts_.emplace_back(data, size);
  }
  part_index_ = part_offset_ = 0;
}

bool Connection::fill_payload_from_buffer() {
  while (part_index_ < payload_parts_.size()) {
    auto [dst, size] = payload_parts_[part_index_];
    size_t n = std::min(size - part_offset_, rend_ - rbegin_);
    std::memcpy(dst + part_offset_, rbuf_.data() + rbegin_, n);
    rbegin_ += n;
    part_offset_ += n;
    if (part_offset_ < size) return false;
    ++part_index_;
    part_offset_ = 0;
  }
  return true;
}

void Connection::read_payload_directly() {
  std::vector<asio::mutable_buffer> bufs;
  for (size_t i = part_index_; i < payload_parts_.size(); ++i) {
    size_t skip = i == part_index_ ? part_offset_ : 0;
    bufs.emplace_back(payload_parts_[i].first + skip, payload_parts_[i].second - skip);
  }
  asio::async_read(socket_, bufs, [self = shared_from_this()](const asio::error_code& ec, size_t) {
    if (ec) {
      self->fail(Error(ErrorCode::kConnectionLost,
                       "connection to " + self->peer_ + " lost in the middle of a frame"));
      return;
    }
    self->part_index_ = self->payload_parts_.size();
    self->deliver();
    self->parse_buffer();
  });
}

void Connection::deliver() {
  state_ = ReadState::kHeader;
  wire::Frame frame = std::move(frame_);
  frame_ = wire::Frame{};
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
    TROUPE_LOG(Warning) << "closing connection from " << peer_ << ": " << e.message();
    fail(e);
  } catch (const std::exception& e) {
    TROUPE_LOG(Warning) << "closing connection from " << peer_ << ": " << e.what();
    fail(Error(ErrorCode::kInternal, e.what()));
  }
}

void Connection::fail(const Error& reason) {
  {
    // Under write_mu_: send() on another thread must not write to the descriptor while it is
    // being closed, or after its number was reused by another socket.
    std::lock_guard<std::mutex> lock(write_mu_);
    closed_ = true;
    asio::error_code ec;
    socket_.close(ec);
    queue_.clear();
  }
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
  if (queue_.empty() && !flushing_) {
    try {
      write_now(w);
    } catch (const Error& e) {
      close(e);
      return false;
    }
    if (w.offset == frame_size) return true;
  }
  queue_.push_back(std::move(w));
  if (!flushing_) {
    flushing_ = true;
    asio::post(io_, [self = shared_from_this()] { self->flush_queue(); });
  }
  return true;
}

void Connection::flush_queue() {
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
    queue_.pop_front();
  }
  flushing_ = false;
}

}  // namespace troupe::transport
