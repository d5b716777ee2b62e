// Helpers shared by the test binaries.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

// Expects `part` in `text` (a std::string or a C string); prints the text when it is not there.
#define EXPECT_HAS(text, part)                               \
  EXPECT_NE(std::string(text).find(part), std::string::npos) \
      << "no '" << (part) << "' in: " << (text)

// Polls `pred` every few milliseconds until it holds or `timeout` passes; returns pred().
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return pred();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}
