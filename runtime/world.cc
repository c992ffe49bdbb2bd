#include "runtime/world.h"

#include <string>

#include "runtime/communicator.h"
#include "runtime/rank_context.h"
#include "runtime/thread_transport.h"
#include "runtime/world_state.h"

namespace dtsim {

RankFailure::RankFailure(int rank, std::exception_ptr cause, const std::string& what)
    : Error("rank " + std::to_string(rank) + ": " + what), rank_(rank), cause_(std::move(cause)) {}

World::World(int size, WorldOptions options) : size_(size) {
  if (size < 1 || size > 4096) {
    throw UsageError("world size " + std::to_string(size) +
                     " is out of range; use 1 to 4096 ranks");
  }
  state_ = std::make_unique<WorldState>(size, options);
  for (int r = 0; r < size; ++r) {
    auto ctx = std::make_unique<RankContext>();
    ctx->rank = r;
    ctx->transport = std::make_unique<ThreadTransport>(state_.get(), r);
    ctx->tracing = options.trace;
    contexts_.push_back(std::move(ctx));
  }
  threads_.reserve(size);
  for (int r = 0; r < size; ++r) threads_.emplace_back([this, r] { rank_main(r); });
}

World::~World() {
  stopping_ = true;
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

const WorldOptions& World::options() const { return state_->options(); }
const RankCounters& World::counters(int rank) const { return contexts_.at(rank)->counters; }
const RankTrace& World::trace(int rank) const { return contexts_.at(rank)->trace; }

void World::rank_main(int rank) {
  uint64_t seen = 0;
  for (;;) {
    generation_.wait(seen, std::memory_order_acquire);
    seen = generation_.load(std::memory_order_acquire);
    if (stopping_) return;
    try {
      Communicator world(
          contexts_[rank].get(), 1,
          [&] {
            std::vector<int> all(size_);
            for (int r = 0; r < size_; ++r) all[r] = r;
            return all;
          }(),
          "world");
      (*job_)(world);
    } catch (...) {
      state_->fail(rank, std::current_exception());
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_all();
  }
}

void World::run(const std::function<void(Communicator&)>& fn) {
  for (auto& ctx : contexts_) {
    ctx->counters = RankCounters{};
    ctx->trace.clear();
  }
  job_ = &fn;
  pending_.store(size_, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (int left = pending_.load(); left != 0; left = pending_.load(std::memory_order_acquire)) {
    pending_.wait(left, std::memory_order_acquire);
  }
  const int failed = state_->failed_rank();
  std::exception_ptr cause = state_->failure();
  std::string what;
  if (cause) what = state_->abort_reason().substr(std::string("rank ").size());
  state_->reset();
  if (cause) {
    const std::string prefix = std::to_string(failed) + " failed: ";
    throw RankFailure(failed, cause, what.substr(prefix.size()));
  }
}

}  // namespace dtsim
