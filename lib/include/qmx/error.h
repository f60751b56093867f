// qmx/error.h: typed errors carrying a message a user can act on.
#pragma once
#include <stdexcept>
#include <string>
namespace qmx {
class Error : public std::runtime_error { public: using std::runtime_error::runtime_error; };
class IoError : public Error { public: using Error::Error; };
}  // namespace qmx
