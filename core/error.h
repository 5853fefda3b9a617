// Errors callers can act on (exceptions) and invariants that must hold (ZR_CHECK, always on).
//
// Contract: an Error's message names the thing and the place involved (file and line of a config,
// JSON path, host:port, rank, key). ZR_CHECK is for broken invariants — bugs, not bad input — and
// aborts with file:line in every build type. Never assert on a system call: throw IoError/CommError.
#pragma once

#include <stdexcept>
#include <string>

#include "zerorun/core/format.h"

namespace zerorun {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Bad or inconsistent arguments to an API call.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};
// A config file or value is malformed or unsupported (messages start with the JSON path).
class ConfigError : public Error {
 public:
  using Error::Error;
};
// A peer, rendezvous or collective failed (messages name the rank and host, or host:port).
class CommError : public Error {
 public:
  using Error::Error;
};
// A wait ran past its deadline. A CommError, so code that handles peer failures handles this too.
class TimeoutError : public CommError {
 public:
  using CommError::CommError;
};
// A file, disk or I/O engine failed (messages name the path and the errno text).
class IoError : public Error {
 public:
  using Error::Error;
};
// A checkpoint is missing, corrupt, or does not fit the model.
class CheckpointError : public Error {
 public:
  using Error::Error;
};
// Data files and samples (missing file, bad header, token id out of range).
class DataError : public Error {
 public:
  using Error::Error;
};
// Memory could not be allocated (names the category and size).
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

// "message: strerror(errno)" for system-call failures.
std::string ErrnoMessage(const std::string& what, int err);

namespace detail {
[[noreturn]] void CheckFailed(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace detail

}  // namespace zerorun

// ZR_CHECK(cond) or ZR_CHECK(cond, "fmt {}", args...): aborts with file:line and the message when
// `cond` is false. Active in every build type.
#define ZR_CHECK(cond, ...)                                                                          \
  do {                                                                                               \
    if (!(cond)) [[unlikely]] {                                                                      \
      ::zerorun::detail::CheckFailed(__FILE__, __LINE__, #cond, ::zerorun::Format("" __VA_ARGS__)); \
    }                                                                                                \
  } while (0)

// ZR_THROW(ErrorType, "fmt {}", args...)
#define ZR_THROW(Type, ...) throw Type(::zerorun::Format(__VA_ARGS__))
