// Splitting the comma lists that flags and specs carry ("64:4,128:8", "0,1", "m2,orthant").
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"

namespace memcap {

// The pieces of text between sep ("" -> none). An empty piece (a leading, trailing or doubled separator) is a
// UserError naming `what`, never silently dropped: "--widths 64,128," must not run a shorter grid than was typed.
inline std::vector<std::string> split_list(std::string_view text, char sep, std::string_view what) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  for (std::size_t b = 0;;) {
    const std::size_t e = text.find(sep, b);
    out.emplace_back(text.substr(b, e == std::string_view::npos ? std::string_view::npos : e - b));
    if (out.back().empty())
      throw UserError(fmt::format("{}: empty item in the list '{}' (a leading, trailing or doubled '{}')", what, text,
                                  sep));
    if (e == std::string_view::npos) return out;
    b = e + 1;
  }
}

}  // namespace memcap
