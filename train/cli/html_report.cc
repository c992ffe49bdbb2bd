#include "train/cli/html_report.h"

#include "train/cli/html_assets.h"
#include "train/cli/output_file.h"

namespace dtsim::cli {
namespace {

std::string escape_html(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

// JSON inside <script>: '<' only occurs in strings, where \u003c means the same, so no
// "</script>" or "<!--" can end the element early.
std::string script_safe(const std::string& json) {
  std::string out;
  out.reserve(json.size());
  for (char c : json) {
    if (c == '<') {
      out += "\\u003c";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

std::string html_page(const std::string& title, const std::string& subtitle,
                      const std::vector<HtmlPanel>& panels, const HtmlTable* table) {
  nlohmann::json data = {{"title", title}, {"panels", nlohmann::json::array()}};
  for (const HtmlPanel& p : panels) {
    data["panels"].push_back(
        {{"title", p.title}, {"report", p.report}, {"mesh", p.mesh}, {"p2p", p.p2p}});
  }
  if (table != nullptr) {
    data["table"] = {{"header", table->header}, {"rows", table->rows}, {"links", table->links}};
  }
  std::string page = "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  page += html_generator_meta(escape_html(title));  // "dtsim train", "dtsim demo"
  page += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  page += "<title>" + escape_html(title) + "</title>\n<style>\n";
  page += kHtmlStyle;
  page += "</style>\n</head>\n<body>\n<h1>" + escape_html(title) + "</h1>\n";
  page += "<p class=\"sub\">" + escape_html(subtitle) + "</p>\n<div id=\"app\"></div>\n";
  page += "<script type=\"application/json\" id=\"dtsim-data\">";
  page += script_safe(data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  page += "</script>\n<script>\n";
  page += kHtmlScript;
  page += "</script>\n</body>\n</html>\n";
  return page;
}

}  // namespace dtsim::cli
