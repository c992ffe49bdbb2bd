// Layer-level hooks: a model's forward_backward calls them around each layer so a strategy
// can wrap communication around the model without the model knowing (ZeRO-3 all-gathers a
// layer's parameters before use and reduce-scatters its gradients after backward; DDP
// launches a bucket all-reduce once the layers that fill it are done).
#pragma once

namespace dtsim::model {

// Layers are numbered 0..L-1 in forward order; backward visits them L-1..0. A layer's
// parameters and gradients are the contiguous ParamLayout::layer_range(layer).
class LayerHooks {
 public:
  virtual ~LayerHooks() = default;
  // Called before layer `layer` reads its parameters in forward.
  virtual void before_forward(int /*layer*/) {}
  // Called after layer `layer`'s forward; it will not read its parameters until backward.
  virtual void after_forward(int /*layer*/) {}
  // Called before layer `layer` reads its parameters in backward.
  virtual void before_backward(int /*layer*/) {}
  // Called once layer `layer`'s gradients are final for this forward_backward call.
  virtual void after_backward(int /*layer*/) {}
  // Under a split backward (ZB-H1), called after layer `layer`'s input half: it will not read
  // its parameters until its next forward (its weight half reads none); after_backward
  // follows its weight half.
  virtual void after_backward_input(int /*layer*/) {}
};

}  // namespace dtsim::model
