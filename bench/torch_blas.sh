# Sourced by the scripts that run PyTorch as a yardstick (bench/torch_compare.sh,
# bench/step_vs_torch.sh): gives torch's OpenBLAS its fastest kernel on this CPU.
#
# Debian 12's OpenBLAS (0.3.21) picks its kernels by CPU model, and a model newer than it
# knows falls back to "Prescott" (SSE3): on an AVX-512 Xeon of model 207 torch's MLP step
# took 7 ms that way against 2.8 ms with the Cooperlake kernels. torch_blas_core times one
# GEMM of the benchmark's shapes under the detected core and under each core the CPU's
# flags allow, exports OPENBLAS_CORETYPE as the fastest (unless the caller set it), and
# sets TORCH_BLAS_NOTE to a line saying what it chose. Needs $python.
torch_blas_core() {
  TORCH_BLAS_NOTE=""
  [[ -z ${OPENBLAS_CORETYPE:-} ]] && unset OPENBLAS_CORETYPE # set but empty changes detection
  local detected
  detected=$(OPENBLAS_VERBOSE=2 "$python" -c 'import torch; torch.ones(8, 8) @ torch.ones(8, 8)' 2>&1 |
    sed -n 's/^Core: *//p' | head -1)
  if [[ -n ${OPENBLAS_CORETYPE:-} ]]; then
    TORCH_BLAS_NOTE="torch's OpenBLAS: core ${OPENBLAS_CORETYPE} (set by the caller; detected ${detected:-?})"
    return
  fi
  local flags cores=("")
  flags=$(grep -m1 '^flags' /proc/cpuinfo)
  if grep -q 'GenuineIntel' /proc/cpuinfo; then
    [[ $flags == *" avx2 "* ]] && cores+=(Haswell)
    [[ $flags == *" avx512f "* && $flags == *" avx512vl "* ]] && cores+=(SkylakeX)
    [[ $flags == *" avx512_bf16 "* ]] && cores+=(Cooperlake)
  elif [[ $flags == *" avx2 "* ]]; then
    cores+=(Zen Haswell)
  fi
  local probe='
import sys, time, torch
torch.set_num_threads(1)
a, b = torch.rand(64, 256), torch.rand(1024, 256)
for _ in range(20): a @ b.t()
best = 1e9
for _ in range(5):
    t = time.perf_counter()
    for _ in range(200): a @ b.t()
    best = min(best, time.perf_counter() - t)
print(f"{best / 200 * 1e6:.1f}")'
  local best="" best_us="" c us report=""
  for c in "${cores[@]}"; do
    if [[ -z $c ]]; then
      us=$(taskset -c 0 "$python" -c "$probe")
    else
      us=$(OPENBLAS_CORETYPE=$c taskset -c 0 "$python" -c "$probe")
    fi
    report+=" ${c:-detected}=${us}us"
    if [[ -z $best_us ]] || awk -v a="$us" -v b="$best_us" 'BEGIN { exit !(a < b) }'; then
      best=$c best_us=$us
    fi
  done
  if [[ -n $best ]]; then export OPENBLAS_CORETYPE=$best; fi
  TORCH_BLAS_NOTE="torch's OpenBLAS: core ${best:-${detected:-?}} (detected ${detected:-?}; one (64, 256) x (256, 1024) GEMM:${report})"
}
