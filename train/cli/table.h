// Plain-text tables and the number formats the dtsim commands share: columns sized to
// their widest cell, numbers right-aligned, text left-aligned.
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "model/memory.h"
#include "train/result.h"

namespace dtsim::cli {

class Table {
 public:
  // `right[i]` aligns column i to the right (numbers).
  Table(std::vector<std::string> header, std::vector<bool> right);
  void add(std::vector<std::string> row);
  // Prints the header, a rule and the rows, each line prefixed by `indent`.
  void print(std::FILE* out, const std::string& indent = "") const;

  // Streaming, for rows printed as they are made: `widths[i]` (at least the header's) fixes
  // column i; a wider cell pushes the rest of its row out of line, never truncates.
  void set_widths(std::vector<size_t> widths);
  // The header and its rule (two lines, no final newline), and one row, at the set widths.
  std::string header_text(const std::string& indent = "") const;
  std::string row_text(std::vector<std::string> row, const std::string& indent = "") const;

 private:
  std::string line(const std::vector<std::string>& cells, const std::string& indent) const;

  std::vector<std::string> header_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
  std::vector<size_t> width_;
};

// Bytes as "12.5 KiB", "3.1 MiB" (binary units), or "812 B".
std::string bytes_text(double bytes);
// Bytes in decimal gigabytes, "112 GB" / "24.5 GB", as the lesson writes them.
std::string gb_text(double bytes);
// Seconds as "850 us", "12.3 ms", "1.20 s".
std::string seconds_text(double seconds);

// Short column names of the model-state categories: weights, grads, master, adam_m,
// adam_v, activ.
std::string category_short_name(int category);

// Per category, the largest bytes any rank holds.
std::array<int64_t, model::kNumMemoryCategories> max_memory(const train::RunResult& run);

}  // namespace dtsim::cli
