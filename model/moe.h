// The pieces of a top-k mixture-of-experts layer, exposed separately so an expert-parallel
// strategy can put all_to_all between them:
//
//   router_forward -> dispatch_forward -> [all_to_all] -> expert_forward (per expert)
//                  -> [all_to_all] -> combine_forward
//
// and back: combine_backward -> expert_backward -> dispatch_backward, plus gate_backward,
// aux_loss_backward and router_backward for the router. The layer is residual:
//
//   y_t = h_t + sum_{j < k, slot (t, j) kept} gate_tj * expert_{e_tj}(h_t)
//
// so a token whose slots are all dropped at capacity passes through unchanged. Gates are the
// router's softmax probabilities of the chosen experts (not renormalised over the top k).
// Each expert is Linear(D, F) - GELU - Linear(F, D).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/hidden_sharding.h"
#include "model/param_layout.h"

namespace dtsim::model {

struct MoeConfig {
  int d_model = 16;              // D
  int d_ff = 32;                 // F: hidden width of each expert
  int num_experts = 4;           // E
  int top_k = 1;                 // k, 1..E (k = E: every expert, the dense mixture)
  float capacity_factor = 1.25;  // capacity = ceil(factor * T * k / E); <= 0 means no limit
  float aux_alpha = 0.01f;       // weight of the load-balancing loss
};

// Parameters of one MoE layer in one contiguous block: router (E, D), then expert e's
// block at router_size + e * expert_size: w1 (F, D), b1 (F), w2 (D, F), b2 (D).
size_t moe_router_size(const MoeConfig& c);
size_t moe_expert_size(const MoeConfig& c);
size_t moe_layer_size(const MoeConfig& c);

// Megatron's expert tensor parallelism (HiddenSharding, model/hidden_sharding.h): each
// expert's hidden width F is split over the ranks, its output summed by `reduce` (g), and so
// is the dispatched tokens' gradient in backward (f's backward). b2 is added by rank 0 only.
using ExpertSharding = HiddenSharding;

// How an MoE layer's dispatched rows reach the ranks that hold their experts and come back
// (GShard's all_to_all over an expert-parallel group), injected so the layer never learns of
// ranks: train/expert_parallel implements it on a communicator. Rank r of N holds experts
// [r E / N, (r + 1) E / N). A layer without one holds every expert and moves no row.
// Thread safety: none; used by one rank thread, every rank of the group calling in step.
class ExpertExchange {
 public:
  virtual ~ExpertExchange() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Given this rank's rows per expert counts (E): recv_rows (N, E / N) the rows each source
  // rank sends to each of this rank's experts.
  virtual void exchange_counts(std::span<const int32_t> counts, std::span<int32_t> recv_rows) = 0;
  // all_to_all of rows: send_counts[j] floats of `send` (in rank order) to rank j, and
  // recv_counts[i] floats from rank i into `recv` (in rank order).
  virtual void exchange_rows(std::span<const float> send, std::span<const size_t> send_counts,
                             std::span<float> recv, std::span<const size_t> recv_counts) = 0;
};

// Views of one expert's contiguous parameter block.
struct ExpertWeights {
  std::span<const float> w1;  // (F, D)
  std::span<const float> b1;  // (F)
  std::span<const float> w2;  // (D, F)
  std::span<const float> b2;  // (D)
};
struct ExpertGrads {
  std::span<float> w1;  // (F, D)
  std::span<float> b1;  // (F)
  std::span<float> w2;  // (D, F)
  std::span<float> b2;  // (D)
};
// Splits an expert's block (moe_expert_size elements) into its tensors.
ExpertWeights expert_weights(std::span<const float> block, const MoeConfig& c);
ExpertGrads expert_grads(std::span<float> block, const MoeConfig& c);

// The router's decisions for T tokens.
struct Routing {
  int tokens = 0;            // T
  int num_experts = 0;       // E
  int top_k = 0;             // k
  int capacity = 0;          // max tokens kept per expert
  std::vector<float> probs;  // (T, E) softmax of the router logits
  std::vector<int> expert;   // (T, k) chosen experts, highest probability first
  std::vector<float> gate;   // (T, k) probs of the chosen experts
  std::vector<int> row;      // (T, k) row in the dispatched buffer, -1 if dropped
  std::vector<int> routed;   // (E) slots assigned to each expert before capacity
  std::vector<int> counts;   // (E) slots kept per expert
  std::vector<int> offsets;  // (E + 1) expert e owns dispatched rows [offsets[e], offsets[e+1])
  std::vector<int> token_of_row;  // (rows) source token of each dispatched row
  int rows() const { return offsets.empty() ? 0 : offsets.back(); }
};

// Routes h (T, D) with router weights wr (E, D): softmax probabilities, top-k (ties to the
// lower index), then capacity in slot-major order (all first choices in token order, then
// all second choices), so the decision is deterministic.
Routing router_forward(std::span<const float> h, std::span<const float> wr, int tokens,
                       const MoeConfig& c);
// d_probs (T, E) += the gate gradient d_gate (T, k) scattered to the chosen experts' columns.
void gate_backward(const Routing& r, std::span<const float> d_gate, std::span<float> d_probs);
// Given d_probs (T, E): dwr (E, D) += and dh (T, D) += through the softmax and the router.
void router_backward(std::span<const float> h, std::span<const float> wr, const Routing& r,
                     std::span<const float> d_probs, std::span<float> dwr, std::span<float> dh,
                     int d_model);
// router_backward split for ZB-H1: router_backward_input WRITES the logits' gradient
// d_logits (T, E) and adds dh (T, D) +=; router_backward_weight then dwr (E, D) += from
// d_logits. Input then weight is bitwise router_backward.
void router_backward_input(std::span<const float> h, std::span<const float> wr, const Routing& r,
                           std::span<const float> d_probs, std::span<float> d_logits,
                           std::span<float> dh, int d_model);
void router_backward_weight(std::span<const float> h, const Routing& r,
                            std::span<const float> d_logits, std::span<float> dwr, int d_model);

// Switch load-balancing loss alpha * E * sum_i f_i * P_i, f_i = routed[i] / (T * k) (before
// capacity), P_i = mean over tokens of probs[:, i].
float aux_loss_forward(const Routing& r, float alpha);
// d_probs (T, E) += scale * d(aux)/d(probs) = scale * alpha * E * f_i / T (f is a constant).
void aux_loss_backward(const Routing& r, float alpha, float scale, std::span<float> d_probs);

// grouped (rows, D): row routing.row[t, j] = h[t] for each kept slot, grouped by expert.
void dispatch_forward(std::span<const float> h, const Routing& r, int d_model,
                      std::span<float> grouped);
// dh (T, D) += d_grouped (rows, D) gathered back to the source tokens.
void dispatch_backward(std::span<const float> d_grouped, const Routing& r, int d_model,
                       std::span<float> dh);

// Activations one expert saves for backward on n tokens.
struct ExpertActivations {
  std::vector<float> pre;  // (n, F) w1 x + b1
  std::vector<float> hid;  // (n, F) gelu(pre)
};
// y (n, D) = w2 gelu(w1 x + b1) + b2 for x (n, D) tokens of one expert; fills act.
void expert_forward(const ExpertWeights& w, std::span<const float> x, int n, const MoeConfig& c,
                    ExpertActivations& act, std::span<float> y);
// Given dy (n, D): grads += and dx (n, D) += (dx may be empty).
void expert_backward(const ExpertWeights& w, std::span<const float> x, const ExpertActivations& act,
                     std::span<const float> dy, int n, const MoeConfig& c, const ExpertGrads& g,
                     std::span<float> dx);
// expert_backward split for ZB-H1: expert_backward_input WRITES the pre-activation gradient
// d_pre (n, F) and adds dx (n, D) += (dx may be empty), with d_hid (n, F) as scratch;
// expert_backward_weight then grads += from dy and d_pre. Input then weight is bitwise
// expert_backward.
void expert_backward_input(const ExpertWeights& w, std::span<const float> x,
                           const ExpertActivations& act, std::span<const float> dy, int n,
                           const MoeConfig& c, std::span<float> d_hid, std::span<float> d_pre,
                           std::span<float> dx);
void expert_backward_weight(std::span<const float> x, const ExpertActivations& act,
                            std::span<const float> dy, std::span<const float> d_pre, int n,
                            const MoeConfig& c, const ExpertGrads& g);

// y (T, D) = h + gate-weighted sum of each token's kept expert outputs from the dispatched
// buffer expert_out (rows, D), summed over j = 0..k-1 in order.
void combine_forward(std::span<const float> h, std::span<const float> expert_out, const Routing& r,
                     int d_model, std::span<float> y);
// Given dy (T, D): dh (T, D) += dy (residual), d_expert_out (rows, D) += gate * dy,
// d_gate (T, k) += dy . expert_out (kept slots only).
void combine_backward(std::span<const float> dy, std::span<const float> expert_out,
                      const Routing& r, int d_model, std::span<float> dh,
                      std::span<float> d_expert_out, std::span<float> d_gate);

}  // namespace dtsim::model
