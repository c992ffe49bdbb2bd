#include "train/cli/table.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace dtsim::cli {

Table::Table(std::vector<std::string> header, std::vector<bool> right)
    : header_(std::move(header)), right_(std::move(right)) {
  right_.resize(header_.size(), false);
}

void Table::add(std::vector<std::string> row) {
  row.resize(header_.size());
  rows_.push_back(std::move(row));
}

void Table::set_widths(std::vector<size_t> widths) {
  widths.resize(header_.size(), 0);
  for (size_t i = 0; i < header_.size(); ++i) widths[i] = std::max(widths[i], header_[i].size());
  width_ = std::move(widths);
}

std::string Table::line(const std::vector<std::string>& cells, const std::string& indent) const {
  std::string s = indent;
  for (size_t i = 0; i < cells.size(); ++i) {
    const std::string pad(width_[i] - std::min(width_[i], cells[i].size()), ' ');
    s += i ? "  " : "";
    s += right_[i] ? pad + cells[i] : cells[i] + (i + 1 < cells.size() ? pad : "");
  }
  return s;
}

std::string Table::header_text(const std::string& indent) const {
  size_t total = 0;
  for (size_t w : width_) total += w + 2;
  return line(header_, indent) + "\n" + indent + std::string(total - 2, '-');
}

std::string Table::row_text(std::vector<std::string> row, const std::string& indent) const {
  row.resize(header_.size());
  return line(row, indent);
}

void Table::print(std::FILE* out, const std::string& indent) const {
  std::vector<size_t> width(header_.size());
  for (const auto& row : rows_) {
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  Table sized = *this;
  sized.set_widths(width);
  std::fprintf(out, "%s\n", sized.header_text(indent).c_str());
  for (const auto& row : rows_) std::fprintf(out, "%s\n", sized.line(row, indent).c_str());
}

std::string bytes_text(double bytes) {
  if (bytes < 1024) return fmt::format("{:.0f} B", bytes);
  if (bytes < 1024.0 * 1024) return fmt::format("{:.1f} KiB", bytes / 1024);
  if (bytes < 1024.0 * 1024 * 1024) return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024));
  return fmt::format("{:.1f} GiB", bytes / (1024.0 * 1024 * 1024));
}

std::string gb_text(double bytes) { return fmt::format("{:.3g} GB", bytes / 1e9); }

std::string seconds_text(double seconds) {
  if (seconds < 1e-3) return fmt::format("{:.0f} us", seconds * 1e6);
  if (seconds < 1) return fmt::format("{:.2f} ms", seconds * 1e3);
  return fmt::format("{:.2f} s", seconds);
}

std::string category_short_name(int category) {
  static const char* kNames[model::kNumMemoryCategories] = {"weights", "grads",  "master",
                                                            "adam_m",  "adam_v", "activ"};
  return category >= 0 && category < model::kNumMemoryCategories ? kNames[category] : "?";
}

std::array<int64_t, model::kNumMemoryCategories> max_memory(const train::RunResult& run) {
  std::array<int64_t, model::kNumMemoryCategories> m{};
  for (const train::RankReport& r : run.ranks) {
    for (int c = 0; c < model::kNumMemoryCategories; ++c) m[c] = std::max(m[c], r.memory[c]);
  }
  return m;
}

}  // namespace dtsim::cli
