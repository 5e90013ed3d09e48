// varpack::Error: the one exception type the library throws. Its message names the input at fault
// (file and line, sample index, parameter) and says what to do, so the CLI and Python can show it as is.
#pragma once

#include <stdexcept>
#include <string>

namespace varpack {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace varpack
