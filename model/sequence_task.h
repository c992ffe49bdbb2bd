// A seeded synthetic sequence task a tiny GPT visibly learns: reversal. A sample is n
// symbols drawn uniformly from 1..K, the separator 0, then the n symbols reversed:
//
//   a1 .. an 0 an .. a1      (2n + 1 tokens; the model reads the first 2n and predicts
//                              the next token at each position)
//
// so the vocabulary is K + 1 and the sequence length 2n. The labels at positions
// [n, 2n) are the reversed symbols (the answer: predictable from the prefix); at n - 1 the
// separator; before it the next random symbol, which no model can predict (the loss there
// stays near log K). Accuracy is measured on the answer positions; chance is 1/K.
//
// Sample i of step s depends only on (seed, s, i), as the other tasks (data.h); held-out
// samples come from a stream of their own (a different seed), so they are not the training
// samples (a sequence may still recur by chance: K^n of them).
// Thread safety: const methods, any number of threads.
#pragma once

#include <cstdint>
#include <span>

namespace dtsim::model {

class ReverseTask {
 public:
  // `length` n >= 1 symbols from `symbols` K >= 2.
  ReverseTask(int length, int symbols, uint64_t seed);
  int vocab() const { return symbols_ + 1; }
  int seq_len() const { return 2 * length_; }
  // The answer positions are [answer_begin(), seq_len()).
  int answer_begin() const { return length_; }

  // Fills tokens (count, 2n) (integer ids as floats) and labels (count, 2n) with samples
  // [first, first + count) of step `step`.
  void batch(int64_t step, int first, int count, std::span<float> tokens,
             std::span<int32_t> labels) const;
  // The same for held-out samples [first, first + count).
  void heldout(int first, int count, std::span<float> tokens, std::span<int32_t> labels) const;

 private:
  void fill(uint64_t seed, int64_t step, int first, int count, std::span<float> tokens,
            std::span<int32_t> labels) const;
  int length_, symbols_;
  uint64_t seed_;
};

// The fraction of positions [begin, end) of each of `batch` samples at which the argmax of
// logits (B, S, V) equals the label (B, S) (ties: the lowest id).
float token_accuracy(std::span<const float> logits, std::span<const int32_t> labels, int batch,
                     int seq, int vocab, int begin, int end);

}  // namespace dtsim::model
