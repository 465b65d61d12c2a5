#include "tools/cli/format.h"

#include <algorithm>
#include <cassert>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace lazyrt::cli {

std::string FormatBytes(uint64_t bytes) {
  if (bytes < 1024) return absl::StrFormat("%d B", bytes);
  constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  return value < 10 ? absl::StrFormat("%.2f %s", value, kUnits[unit]) : absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

std::string FormatMs(double ms) {
  if (ms == 0) return "0 ms";
  if (ms >= 1000) return absl::StrFormat("%.2f s", ms / 1000);
  if (ms >= 100) return absl::StrFormat("%.1f ms", ms);
  if (ms >= 1) return absl::StrFormat("%.2f ms", ms);
  return absl::StrFormat("%.3f ms", ms);
}

std::string FormatLocalTime(absl::Time time) {
  if (time == absl::InfinitePast()) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", time, absl::LocalTimeZone());
}

std::string FormatDims(const std::vector<int64_t>& dims) {
  if (dims.empty()) return "scalar";
  return absl::StrJoin(dims, "x");
}

void PrintFields(std::ostream& out, const std::vector<std::pair<std::string, std::string>>& fields, int indent) {
  size_t width = 0;
  for (const auto& [label, value] : fields) width = std::max(width, label.size());
  for (const auto& [label, value] : fields) {
    out << std::string(static_cast<size_t>(indent), ' ') << label << std::string(width - label.size() + 2, ' ') << value
        << '\n';
  }
}

Table::Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

void Table::AddRow(std::vector<std::string> cells) {
  assert(cells.size() == columns_.size());
  rows_.push_back(std::move(cells));
}

void Table::Print(std::ostream& out, int indent) const {
  std::vector<size_t> widths;
  for (const Column& column : columns_) widths.push_back(column.header.size());
  for (const std::vector<std::string>& row : rows_) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  auto print_line = [&](const auto& cell_text) {
    std::string line(static_cast<size_t>(indent), ' ');
    for (size_t c = 0; c < columns_.size(); ++c) {
      const std::string& text = cell_text(c);
      const std::string padding(widths[c] - text.size(), ' ');
      line += columns_[c].align == Align::kRight ? padding + text : text + padding;
      if (c + 1 < columns_.size()) line += "  ";
    }
    // Empty cells at the end of a row would otherwise leave trailing spaces.
    line.erase(line.find_last_not_of(' ') + 1);
    out << line << '\n';
  };
  print_line([&](size_t c) -> const std::string& { return columns_[c].header; });
  for (const std::vector<std::string>& row : rows_) {
    print_line([&](size_t c) -> const std::string& { return row[c]; });
  }
}

}  // namespace lazyrt::cli
