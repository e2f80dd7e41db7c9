#!/usr/bin/env bash
# Runs relayd's cargo-fuzz targets, one at a time, each for FUZZ_SECONDS; called by
# `make fuzz` (300 s each) and `make fuzz-smoke` (30 s each, part of `make test`).
#
#   fuzz/run.sh [--smoke] [TARGET...]      (default: every target in fuzz/fuzz_targets)
#
# Environment: FUZZ_SECONDS (per target), FUZZ_ARGS (extra libFuzzer flags),
# FUZZ_LOG_DIR (default fuzz/target/logs).
#
# Needs the nightly toolchain (`cargo +nightly`) and cargo-fuzz, which it installs from
# crates.io if missing. With --smoke, a missing nightly toolchain is a loud warning and
# success (CI machines without nightly still pass `make test`); without it, an error.
#
# Each target starts from its committed seeds (fuzz/seeds/TARGET) and the reproducers of
# crashes found and fixed (fuzz/regressions/TARGET), and grows its working corpus in
# fuzz/corpus/TARGET (not committed). A target that crashes, times out on an
# input or runs out of memory fails the run; its input is in fuzz/artifacts/TARGET/ and
# its path is printed with the command that reproduces it. Every target runs even if an
# earlier one failed; the summary lists executions and coverage per target.
set -uo pipefail
cd "$(dirname "$0")/.."

smoke=0
if [ "${1:-}" = "--smoke" ]; then
    smoke=1
    shift
fi
seconds="${FUZZ_SECONDS:-300}"
logs="${FUZZ_LOG_DIR:-fuzz/target/logs}"

if ! cargo +nightly --version >/dev/null 2>&1; then
    msg="the nightly Rust toolchain is missing (rustup toolchain install nightly): fuzz targets NOT built or run"
    if [ "$smoke" = 1 ]; then
        echo "################################################################" >&2
        echo "WARNING: $msg" >&2
        echo "################################################################" >&2
        exit 0
    fi
    echo "error: $msg" >&2
    exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz from crates.io"
    cargo install cargo-fuzz --locked || { echo "error: cannot install cargo-fuzz" >&2; exit 1; }
fi

if [ $# -gt 0 ]; then
    targets=("$@")
else
    targets=()
    for f in fuzz/fuzz_targets/*.rs; do
        targets+=("$(basename "$f" .rs)")
    done
fi

start=$(date +%s)
echo "== building ${#targets[@]} fuzz targets (nightly, AddressSanitizer, debug assertions)"
# Its own target dir whatever CARGO_TARGET_DIR says: the instrumented build must not mix
# with the workspace's.
# The build's output goes to a log as well as the terminal, so that a failure can be
# summarised in the last lines (CI shows only the end of a long output). A failed build is
# tried once more with one job, in case the cause was the machine's (memory, a killed
# linker) rather than the code's; the summary says which resources were left.
mkdir -p "$logs"
build_log="$logs/build.log"
build() {
    cargo +nightly fuzz build --target-dir fuzz/target "$@" 2>&1 | tee "$build_log"
    return "${PIPESTATUS[0]}"
}
if ! build; then
    echo "== the fuzz build failed; trying once more with one job (-j 1)" >&2
    if ! CARGO_BUILD_JOBS=1 build; then
        {
            echo "FUZZ FAILURE: the fuzz targets do not build ($(cargo +nightly --version))"
            echo "-- the first errors (whole log: $build_log):"
            grep -m 3 -A 12 -E "^error" "$build_log" | head -30
            echo "-- disk and memory left:"
            df -h . fuzz/target 2>/dev/null | uniq
            free -m
        } >&2
        exit 1
    fi
fi
built=$(date +%s)
bin=fuzz/target/x86_64-unknown-linux-gnu/release
echo "== built in $((built - start)) s; running each target for ${seconds} s"

failed=()
summary=()
for t in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t" "fuzz/seeds/$t"
    log="$logs/$t.log"
    before=$(ls -1 "fuzz/artifacts/$t" | wc -l)
    echo "== $t (${seconds} s, log $log)"
    # -timeout: an input that takes 10 s is a hang; -rss_limit_mb: a 2 GiB process is a
    # leak or a hostile allocation. Both fail the target like a crash.
    # Committed reproducers of fixed crashes run first, with the seeds.
    dirs=("fuzz/corpus/$t" "fuzz/seeds/$t")
    [ -d "fuzz/regressions/$t" ] && dirs+=("fuzz/regressions/$t")
    # The binary `cargo fuzz build` made, run directly (as `cargo fuzz run` would, with
    # its ASAN_OPTIONS), so that no target waits for another build.
    # shellcheck disable=SC2086
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_odr_violation=0" \
        "$bin/$t" -artifact_prefix="fuzz/artifacts/$t/" \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 ${FUZZ_ARGS:-} "${dirs[@]}" >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corpus=$(sed -n 's/.* corp: \([0-9]*\/[0-9a-zA-Z]*\).*/\1/p' <<<"$last")
    if [ "$rc" -ne 0 ]; then
        artifact=$(ls -1t "fuzz/artifacts/$t" 2>/dev/null | head -1)
        after=$(ls -1 "fuzz/artifacts/$t" | wc -l)
        echo "FUZZ FAILURE: target $t exited $rc" >&2
        grep -E 'panicked at|ERROR: (libFuzzer|AddressSanitizer)|^SUMMARY' "$log" | head -5 >&2
        if [ -n "$artifact" ] && [ "$after" -gt "$before" ]; then
            echo "  crash input: fuzz/artifacts/$t/$artifact" >&2
            echo "  reproduce:   cargo +nightly fuzz run $t fuzz/artifacts/$t/$artifact" >&2
        fi
        echo "  log: $log" >&2
        failed+=("$t")
        summary+=("$(printf '%-14s FAILED  execs=%-10s cov=%-6s ft=%-6s' "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}")")
    else
        summary+=("$(printf '%-14s ok      execs=%-10s cov=%-6s ft=%-6s corpus=%s' "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corpus:-?}")")
    fi
done
end=$(date +%s)

echo "== fuzz summary (${seconds} s per target; build $((built - start)) s, total $((end - start)) s)"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
    echo "FUZZ FAILURE: ${failed[*]} (inputs in fuzz/artifacts/<target>/)" >&2
    exit 1
fi
