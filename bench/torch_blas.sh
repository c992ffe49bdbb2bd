# Sourced by the scripts that run PyTorch as a yardstick (bench/torch_compare.sh,
# bench/step_vs_torch.sh): gives torch's OpenBLAS its fastest kernel on this CPU.
#
# Debian 12's OpenBLAS (0.3.21) picks its kernels by CPU model, and a model newer than it
# knows falls back to older kernels: on an AVX-512 Xeon of model 207 it took Prescott
# (SSE3), torch's MLP step 7 ms against 2.8 ms with the Cooperlake kernels; on an AMD Zen 5
# with AVX-512 it takes Haswell (AVX2), one GEMM 400 us against 240 us with Cooperlake. A
# machine may also set OPENBLAS_CORETYPE (and OPENBLAS_L2_SIZE) in every shell; this
# workplace sets Haswell. torch_blas_core therefore ignores both as inherited, times one
# correct GEMM of the benchmark's shapes under the detected core, the inherited one and
# each core the CPU's flags allow (whatever its vendor), exports OPENBLAS_CORETYPE as the
# fastest, and sets TORCH_BLAS_NOTE to a line saying what it chose. TORCH_BLAS_CORE=NAME
# forces a core instead (for A/B runs). Needs $python.
torch_blas_core() {
  TORCH_BLAS_NOTE=""
  local inherited=${OPENBLAS_CORETYPE:-}
  unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
  local detected
  detected=$(OPENBLAS_VERBOSE=2 "$python" -c 'import torch; torch.ones(8, 8) @ torch.ones(8, 8)' 2>&1 |
    sed -n 's/^Core: *//p' | head -1)
  if [[ -n ${TORCH_BLAS_CORE:-} ]]; then
    export OPENBLAS_CORETYPE=$TORCH_BLAS_CORE
    TORCH_BLAS_NOTE="torch's OpenBLAS: core ${TORCH_BLAS_CORE} (TORCH_BLAS_CORE; detected ${detected:-?})"
    return
  fi
  local flags cores=("")
  flags=$(grep -m1 '^flags' /proc/cpuinfo)
  [[ $flags == *" avx2 "* ]] && cores+=(Haswell)
  [[ $flags == *" avx2 "* ]] && grep -q 'AuthenticAMD' /proc/cpuinfo && cores+=(Zen)
  [[ $flags == *" avx512f "* && $flags == *" avx512vl "* ]] && cores+=(SkylakeX)
  [[ $flags == *" avx512_bf16 "* ]] && cores+=(Cooperlake)
  [[ -n $inherited && " ${cores[*]} " != *" $inherited "* ]] && cores+=("$inherited")
  # Prints the best of 5 timings of 200 GEMMs in us, or "wrong" when the kernel's product
  # is off by more than fp32 rounding.
  local probe='
import sys, time, torch
torch.set_num_threads(1)
a, b = torch.rand(64, 256), torch.rand(1024, 256)
ref = a.double() @ b.double().t()
if not torch.allclose((a @ b.t()).double(), ref, rtol=1e-4, atol=1e-3):
    print("wrong"); sys.exit()
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
    [[ $us == wrong ]] && continue
    if [[ -z $best_us ]] || awk -v a="$us" -v b="$best_us" 'BEGIN { exit !(a < b) }'; then
      best=$c best_us=$us
    fi
  done
  if [[ -n $best ]]; then export OPENBLAS_CORETYPE=$best; fi
  TORCH_BLAS_NOTE="torch's OpenBLAS: core ${best:-${detected:-?}} (detected ${detected:-?}${inherited:+, inherited $inherited ignored}; one (64, 256) x (256, 1024) GEMM:${report})"
}
