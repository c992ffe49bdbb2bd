// The --html page of `dtsim train` and `dtsim demo`: one self-contained HTML file (no
// network at view time) that embeds each run's --report object (report_object()) and our
// own small script (html/page.js), which draws from it, as inline SVG: the loss curve (and
// the reference's when --check ran), memory per rank stacked by category, a rank x rank
// traffic matrix per communicator group (bytes and messages), each rank's time in each
// collective, the mesh (which rank holds which shard) and a pipeline's timeline; the demo
// adds its comparison table. Because the page draws from the report
// object itself, the page and the JSON report cannot disagree; tests/html checks the
// rendered marks against the report in headless Chromium.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dtsim::cli {

// One run: a heading, its report_object(), and what the page draws besides (html_data.h):
// its mesh_diagram() and, for a pipeline, pipeline_p2p() (null: none).
struct HtmlPanel {
  std::string title;
  nlohmann::json report;
  nlohmann::json mesh = nullptr;
  nlohmann::json p2p = nullptr;
};

// A plain table of text cells shown above the panels; with `links`, row i's first cell
// links to panel i.
struct HtmlTable {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  bool links = false;
};

// The whole page. `table` may be null. Pure function of its arguments.
std::string html_page(const std::string& title, const std::string& subtitle,
                      const std::vector<HtmlPanel>& panels, const HtmlTable* table);

}  // namespace dtsim::cli
