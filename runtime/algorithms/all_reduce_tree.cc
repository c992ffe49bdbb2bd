// Tree all-reduce: a binomial-tree reduce to rank 0, then a binomial-tree broadcast from
// it: 2 ceil(log2 N) steps, each moving the whole buffer.
#include "runtime/algorithms/algorithms.h"

namespace dtsim {

void all_reduce_tree(Exchange& ex, void* data, size_t count, const Reducer& red) {
  reduce_tree(ex, data, count, 0, red);
  ex.begin_phase();
  broadcast_tree(ex, data, count, 0);
}

}  // namespace dtsim
