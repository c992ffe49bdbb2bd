# Summaries of per-run numbers for the bench scripts; sourced, not run.

# median: whitespace-separated numbers on stdin -> their median.
median() {
  tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR] = $1}
    END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}

# step_summary WIDTH NAME ROUNDS: per-run step CPU times (ms) on stdin -> one line
# "NAME step cpu ms over ROUNDS rounds: q1 Q median M min L", NAME padded to WIDTH.
step_summary() {
  tr ' ' '\n' | grep -v '^$' | sort -g | awk -v w="$1" -v n="$2" -v r="$3" \
    '{a[NR] = $1} END {printf "%-*s step cpu ms over %d rounds: q1 %.3f median %.3f min %.3f\n",
      w, n, r, a[int(NR / 4) + 1], (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2, a[1]}'
}
