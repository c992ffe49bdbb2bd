#include "model/layer_stack.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "model/check.h"
#include "model/kernels.h"

namespace dtsim::model {

namespace {

// The scale layer `l` runs with on `grads`: under write_grads, a layer that cannot
// overwrite its gradients gets them zero-filled and accumulates into them instead.
BackwardScale layer_scale(const Layer& l, const BackwardScale& scale, std::span<float> grads) {
  if (!scale.write_grads || l.writes_grads()) return scale;
  std::fill(grads.begin(), grads.end(), 0.0f);
  BackwardScale s = scale;
  s.write_grads = false;
  return s;
}

}  // namespace

ParamLayout layout_of(const Layers& layers) {
  ParamLayout layout;
  for (const std::unique_ptr<Layer>& l : layers) l->add_params(layout);
  DTSIM_CHECK(layout.num_layers() == static_cast<int>(layers.size()));
  return layout;
}

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
  }
  return "unknown";
}

LayerStack::LayerStack(Layers layers, Precision precision, bool copy_input, Recompute recompute)
    : layers_(std::move(layers)),
      store_(layout_of(layers_), precision, &ledger_),
      copy_input_(copy_input),
      recompute_(recompute),
      ws_(&ledger_),
      grad_ws_(&ledger_),
      redo_ws_(&ledger_) {
  DTSIM_CHECK(!layers_.empty());
  for (size_t i = 1; i < layers_.size(); ++i) {
    DTSIM_CHECK(layers_[i]->in_dim() == layers_[i - 1]->out_dim());
  }
}

LayerStack::Pass& LayerStack::pass(int p, int batch) {
  DTSIM_CHECK(p >= 0 && batch > 0);
  while (passes_.size() <= size_t(p)) passes_.push_back(std::make_unique<Pass>());
  Pass& s = *passes_[p];
  if (s.states.empty()) {
    s.states.resize(layers_.size());
    for (int i = 0; i < num_layers(); ++i) fresh_state(s, i);
  }
  if (batch != s.capacity) {
    s.capacity = batch;
    const size_t b = batch;
    auto make = [&](size_t n) {
      return TrackedBuffer<float>(&ledger_, MemoryCategory::kActivations, n);
    };
    s.input_copy.release();  // old buffers go before the new ones come
    s.outs.clear();
    if (copy_input_) s.input_copy = make(b * in_dim());
    for (const std::unique_ptr<Layer>& l : layers_) s.outs.push_back(make(b * l->out_dim()));
  }
  s.batch = batch;
  return s;
}

std::span<const float> LayerStack::forward(int p, std::span<const float> x, int batch,
                                           LayerHooks* hooks) {
  DTSIM_CHECK(x.size() == size_t(batch) * in_dim());
  Pass& s = pass(p, batch);
  s.in_flight = true;
  if (batch != ws_batch_) {  // workspaces follow the batch
    ws_.clear();
    grad_ws_.clear();
    ws_batch_ = batch;
  }
  if (copy_input_) {
    // Copied so every kernel reads stack-owned buffers with the same alignment.
    std::copy(x.begin(), x.end(), s.input_copy.data());
    s.input = s.input_copy.span();
  } else {
    s.input = x;
  }
  std::span<const float> in = s.input;
  for (int i = 0; i < num_layers(); ++i) {
    if (hooks) hooks->before_forward(i);
    std::span<float> out = s.outs[i].span();
    layers_[i]->forward(store_.layer_params(i), in, batch, out, *s.states[i], ws_);
    if (recompute_ == Recompute::kFull) fresh_state(s, i);
    if (hooks) hooks->after_forward(i);
    in = out;
  }
  return in;
}

void LayerStack::fresh_state(Pass& s, int i) {
  s.states[i] = layers_[i]->make_state(&ledger_);
  s.states[i]->selective =
      recompute_ == Recompute::kSelective && layers_[i]->recomputes_selectively();
}

std::span<const float> LayerStack::input_of(Pass& s, int i) {
  return i > 0 ? std::span<const float>(s.outs[i - 1].span()) : s.input;
}

void LayerStack::rebuild(Pass& s, int i) {
  if (recompute_ == Recompute::kFull) {
    const size_t n = size_t(s.batch) * layers_[i]->out_dim();
    layers_[i]->forward(store_.layer_params(i), input_of(s, i), s.batch, redo_ws_.take(0, n),
                        *s.states[i], ws_);
  } else if (s.states[i]->selective) {
    layers_[i]->rebuild_state(store_.layer_params(i), input_of(s, i), s.batch, *s.states[i]);
  }
}

void LayerStack::release(Pass& s, int i) {
  if (recompute_ == Recompute::kFull) {
    fresh_state(s, i);
  } else if (s.states[i]->selective) {
    layers_[i]->release_rebuilt(*s.states[i]);
  }
}

std::span<float> LayerStack::loss_grad(int batch) {
  return grad_ws_.take(2, size_t(batch) * out_dim());
}

std::span<const float> LayerStack::backward(int p, std::span<float> dy, const BackwardScale& scale,
                                            LayerHooks* hooks, bool input_grad) {
  return run_backward(*passes_.at(p), dy, scale, hooks, input_grad, false);
}

bool LayerStack::splits_backward() const {
  return std::all_of(layers_.begin(), layers_.end(),
                     [](const std::unique_ptr<Layer>& l) { return l->splits_backward(); });
}

bool LayerStack::fuses_sgd() const {
  return store_.precision() == Precision::kFp32 &&
         std::all_of(layers_.begin(), layers_.end(),
                     [](const std::unique_ptr<Layer>& l) { return l->fuses_sgd(); });
}

std::span<const float> LayerStack::backward_sgd(int p, std::span<float> dy,
                                                const BackwardScale& scale, const SgdUpdate& u,
                                                LayerHooks* hooks, bool input_grad) {
  DTSIM_CHECK(fuses_sgd());
  if (recompute_ == Recompute::kFull) {
    for (size_t q = 0; q < passes_.size(); ++q) {
      if (q != size_t(p) && passes_[q]->in_flight) {
        throw std::logic_error(
            "backward_sgd with --recompute full needs one pass in flight: pass " +
            std::to_string(q) + " would recompute its forward from updated parameters");
      }
    }
  }
  BackwardScale s = scale;
  s.write_grads = true;
  return run_backward(*passes_.at(p), dy, s, hooks, input_grad, false, &u);
}

std::span<const float> LayerStack::backward_input(int p, std::span<float> dy,
                                                  const BackwardScale& scale, bool input_grad,
                                                  LayerHooks* hooks) {
  DTSIM_CHECK(splits_backward());
  return run_backward(*passes_.at(p), dy, scale, hooks, input_grad, true);
}

void LayerStack::backward_weight(int p, const BackwardScale& scale, LayerHooks* hooks) {
  Pass& s = *passes_.at(p);
  for (int i = num_layers() - 1; i >= 0; --i) {
    std::span<float> grads = store_.begin_layer_grads(i, scale.write_grads);
    layers_[i]->backward_weight(input_of(s, i), layer_scale(*layers_[i], scale, grads), grads,
                                *s.states[i], ws_);
    store_.end_layer_grads(i);
    release(s, i);
    if (hooks) hooks->after_backward(i);
  }
  s.in_flight = false;
}

std::span<const float> LayerStack::run_backward(Pass& s, std::span<float> dy,
                                                const BackwardScale& scale, LayerHooks* hooks,
                                                bool input_grad, bool split, const SgdUpdate* sgd) {
  const int batch = s.batch;
  DTSIM_CHECK(dy.size() == size_t(batch) * out_dim());
  std::span<float> cur = dy;
  int cur_slot = -1;  // the gradient buffer `cur` is (-1: the caller's)
  for (int i = num_layers() - 1; i >= 0; --i) {
    Layer& layer = *layers_[i];
    std::span<float> dx;
    if (i > 0 || input_grad) {
      const size_t n = size_t(batch) * layer.in_dim();
      if (layer.backward_in_place()) {
        dx = cur;  // in_dim == out_dim
      } else {
        cur_slot = cur_slot == 0 ? 1 : 0;
        dx = grad_ws_.take(cur_slot, n);
      }
    }
    std::span<const float> x = input_of(s, i);
    if (hooks) hooks->before_backward(i);
    rebuild(s, i);  // reads the layer's parameters, after the hook has made them ready
    std::span<const float> params = store_.layer_params(i);
    if (sgd != nullptr) {
      const ParamRange r = layout().layer_range(i);
      layer.backward_sgd(store_.params().subspan(r.begin, r.size()), x, cur, scale, *sgd, dx,
                         *s.states[i], ws_);
    } else if (split) {
      layer.backward_input(params, x, cur, scale, dx, *s.states[i], ws_);
    } else {
      std::span<float> grads = store_.begin_layer_grads(i, scale.write_grads);
      layer.backward(params, x, cur, layer_scale(layer, scale, grads), grads, dx, *s.states[i],
                     ws_);
      store_.end_layer_grads(i);
    }
    if (!split) release(s, i);  // the split keeps the state until backward_weight
    if (hooks) split ? hooks->after_backward_input(i) : hooks->after_backward(i);
    cur = dx;
  }
  if (!split) s.in_flight = false;
  return cur;
}

float MseLoss::forward_backward(std::span<const float> y, const Targets& t, int batch,
                                float grad_scale, std::span<float> dy) {
  DTSIM_CHECK(t.values.size() == size_t(batch) * cols_);
  const float loss = mse_loss_forward(y, t.values, batch, cols_);
  std::fill(dy.begin(), dy.end(), 0.0f);
  mse_loss_backward(y, t.values, batch, cols_, grad_scale, dy);
  return loss;
}

float CrossEntropyLoss::forward_backward(std::span<const float> y, const Targets& t, int batch,
                                         float grad_scale, std::span<float> dy) {
  const int rows = batch * positions_;
  DTSIM_CHECK(t.labels.size() == size_t(rows));
  const size_t n = size_t(rows) * classes_;
  if (probs_.size() != n) {
    probs_.release();
    probs_ = TrackedBuffer<float>(ledger_, MemoryCategory::kActivations, n);
  }
  const float loss = softmax_cross_entropy_forward(y, t.labels, probs_.span(), rows, classes_);
  std::fill(dy.begin(), dy.end(), 0.0f);
  const float scale = positions_ == 1 ? grad_scale : grad_scale / float(positions_);
  softmax_cross_entropy_backward(probs_.span(), t.labels, rows, classes_, scale, dy);
  return loss;
}

}  // namespace dtsim::model
