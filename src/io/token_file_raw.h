// The token-file readers' raw results (TokenFile::Raw: mappings, sample layout, element type),
// before any token is read; TokenFile's constructor checks and converts the tokens. Internal to io.
#pragma once

#include <string>

#include "varpack/token_files.h"

namespace varpack {

TokenFile::Raw read_npy_raw(const std::string& tokens_path, const std::string& offsets_path);
TokenFile::Raw read_megatron_raw(const std::string& prefix);
// The naming convention of is_token_file / open_token_file.
TokenFile::Raw open_token_file_raw(const std::string& input);

}  // namespace varpack
