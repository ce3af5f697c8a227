# Nsight Compute for the device scripts (sourced): NCU is its path (empty where the box has none), and
#   ncu_kernels OUT.csv CMD ARGS...
# writes the duration of every kernel CMD runs between cuProfilerStart and cuProfilerStop (step_cost.py and
# draft_cost.py --ncu-phase N) to OUT.csv, as kernel_breakdown.py reads them, and ncu's messages to OUT.err;
# it returns ncu's status. NCU_TIMEOUT bounds one run (default 240 s).
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)
ncu_kernels() {
    local out=$1; shift
    timeout "${NCU_TIMEOUT:-240}" "$NCU" --profile-from-start off --cache-control none --clock-control none --csv \
        --page raw --metrics gpu__time_duration.sum "$@" > "$out" 2> "${out%.csv}.err"
}
