#include "runtime/diagnostics/trace.h"

#include <algorithm>
#include <deque>
#include <map>
#include <string>
#include <tuple>

namespace dtsim {

std::vector<TraceEvent> RankTrace::sends() const {
  std::vector<TraceEvent> out;
  for (const TraceEvent& e : events) {
    if (e.kind == TraceKind::kSend) out.push_back(e);
  }
  return out;
}

std::vector<CausalStep> causal_steps(const std::vector<const RankTrace*>& ranks) {
  const size_t n = ranks.size();
  using Key = std::tuple<uint64_t, int, int, int, int>;  // seq, phase, tag, src, dst
  std::map<Key, std::deque<int>> in_flight;              // send steps, FIFO per key
  std::vector<size_t> next(n, 0);
  std::vector<int> last_send(n, -1), last_recv(n, -1);
  // Per rank: (step, event) of each send, receive and snapshot, in program order.
  std::vector<std::vector<std::pair<int, const TraceEvent*>>> placed(n);
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t r = 0; r < n; ++r) {
      const auto& ev = ranks[r]->events;
      for (; next[r] < ev.size(); ++next[r]) {
        const TraceEvent& e = ev[next[r]];
        const Key key{e.seq, e.phase, e.tag, e.src, e.dst};
        int step = last_recv[r];
        if (e.kind == TraceKind::kSend) {
          step = std::max(last_send[r], last_recv[r]) + 1;
          last_send[r] = step;
          in_flight[key].push_back(step);
        } else if (e.kind == TraceKind::kRecv) {
          auto it = in_flight.find(key);
          if (it == in_flight.end() || it->second.empty()) break;  // its send comes later
          step = it->second.front();
          it->second.pop_front();
          last_recv[r] = std::max(last_recv[r], step);
        }
        placed[r].emplace_back(step, &e);
        progress = true;
      }
    }
  }
  for (size_t r = 0; r < n; ++r) {
    if (next[r] < ranks[r]->events.size()) {
      throw Error("trace: rank " + std::to_string(r) + "'s receive from rank " +
                  std::to_string(ranks[r]->events[next[r]].src) + " has no matching send");
    }
  }
  int steps = 0;
  for (size_t r = 0; r < n; ++r) {
    for (auto& [s, e] : placed[r]) steps = std::max(steps, s + 1);
  }
  std::vector<CausalStep> out(steps);
  for (CausalStep& st : out) {
    st.after.assign(n, nullptr);
    st.from.resize(n);
  }
  for (size_t r = 0; r < n; ++r) {
    std::vector<std::pair<int, const TraceEvent*>> snaps;  // steps never decrease
    for (auto& [s, e] : placed[r]) {
      if (e->kind == TraceKind::kSend) {
        out[s].sends.push_back(*e);
      } else if (e->kind == TraceKind::kRecv) {
        out[s].from[r].push_back(e->src);
      } else {
        snaps.emplace_back(s, e);
      }
    }
    const TraceEvent* latest = nullptr;
    size_t j = 0;
    for (int k = 0; k < steps; ++k) {
      while (j < snaps.size() && snaps[j].first <= k) latest = snaps[j++].second;
      out[k].after[r] = latest;
    }
  }
  for (CausalStep& st : out) {
    std::stable_sort(st.sends.begin(), st.sends.end(),
                     [](const TraceEvent& a, const TraceEvent& b) { return a.src < b.src; });
  }
  return out;
}

}  // namespace dtsim
