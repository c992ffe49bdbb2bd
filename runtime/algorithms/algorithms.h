// The collective algorithms, one file each (all_reduce_ring.cc, broadcast_tree.cc, ...):
// each is a function of an Exchange (exchange.h) and buffers. Counts are elements of the
// exchange's type; chunking follows split.h. The registry (registry.h) names them and says
// which collective runs which; nothing else calls them.
//
// Thread safety: an algorithm runs on one rank thread, on that rank's Exchange.
#pragma once

#include <cstddef>

#include "runtime/exchange.h"
#include "runtime/reduce_kernels.h"

namespace dtsim {

void all_reduce_ring(Exchange& ex, void* data, size_t count, const Reducer& r);
void all_reduce_recursive_doubling(Exchange& ex, void* data, size_t count, const Reducer& r);
void all_reduce_tree(Exchange& ex, void* data, size_t count, const Reducer& r);
void all_reduce_direct(Exchange& ex, void* data, size_t count, const Reducer& r);
void all_reduce_deterministic(Exchange& ex, void* data, size_t count, const Reducer& r);
void all_reduce_shared(Exchange& ex, void* data, size_t count, const Reducer& r);
void reduce_scatter_ring(Exchange& ex, const void* in, size_t count, void* out, const Reducer& r);
// Every rank sends chunk j to rank j, which sums the N contributions in rank order.
void reduce_scatter_ordered(Exchange& ex, const void* in, size_t count, void* out,
                            const Reducer& r);
// `in` is chunk rank() of `out` (total elements); in == at(out, offset) is allowed.
void all_gather_ring(Exchange& ex, const void* in, void* out, size_t total);
void all_gather_direct(Exchange& ex, const void* in, void* out, size_t total);
void broadcast_tree(Exchange& ex, void* data, size_t count, int root);
void broadcast_direct(Exchange& ex, void* data, size_t count, int root);
void reduce_tree(Exchange& ex, void* data, size_t count, int root, const Reducer& r);
void reduce_ordered(Exchange& ex, void* data, size_t count, int root, const Reducer& r);
void all_to_all_pairwise(Exchange& ex, const void* in, const size_t* send_counts, void* out,
                         const size_t* recv_counts);
void barrier_dissemination(Exchange& ex);

}  // namespace dtsim
