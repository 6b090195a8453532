#!/usr/bin/env bash
# Mutation testing of the code that stands between SGLang's logprobs and a training batch: installs
# cargo-mutants if it is missing, then mutates each area with the tests that guard it. Results go to
# mutants.out/<area>/mutants.out/ (outcomes.json, caught.txt, missed.txt, ...); survivors are explained in
# mutants/survivors.md.
#
#   mutants/run.sh                 every area
#   mutants/run.sh decoding        one area: decoding, samples, grpo, model, openai, channels, server-channels,
#                                  client-channels, witness
#   mutants/run.sh samples --shard 0/4 ...   extra arguments go to cargo mutants
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=27.1.0
if ! cargo mutants --version 2>/dev/null | grep -q "$VERSION"; then
    cargo install cargo-mutants --locked --version "$VERSION"
fi

# area: files to mutate, and the test packages whose tests must catch the mutants. The regression suite
# (tests/) runs for every area that feeds it.
run_area() {
    local area=$1
    shift
    # test_args: what `cargo test` gets after the mutants' own flags (a test-name filter), last on the line.
    local files=() packages=() extra=() test_args=()
    case "$area" in
        decoding)
            files=(rollout-client/src/wire.rs rollout-client/src/fast.rs rollout-client/src/visitor.rs
                rollout-client/src/decode.rs rollout-client/src/validate.rs rollout-client/src/turn.rs
                rollout-client/src/stream.rs)
            packages=(rollout-client rollout-cli regression-tests) ;;
        samples)
            files=(rollout-client/src/sample.rs rollout-client/src/fields.rs rollout-client/src/record.rs
                rollout-client/src/rollout.rs rollout-client/src/multi_agent.rs rollout-client/src/train.rs)
            packages=(rollout-client rollout-cli regression-tests) ;;
        grpo)
            files=(grpo/src/batch.rs grpo/src/advantage.rs)
            packages=(grpo regression-tests) ;;
        model)
            files=('mock-core/src/model/*.rs' 'mock-core/src/engine/**/*.rs' 'mock-core/src/wire/*.rs')
            packages=(mock-core mock-server) ;;
        openai)
            files=('mock-server/src/http/openai/*.rs')
            packages=(mock-server) ;;
        channels)
            files=(rollout-client/src/channels.rs rollout-client/src/carried.rs)
            packages=(rollout-client regression-tests) ;;
        server-channels)
            # The server's side of the channels (the router, the sampling supports, their refusals and their
            # wire form) is spread over many files, so this area mutates the lines of these files changed since
            # the commit before the channels began.
            # The files moved to the core crate since, so the diff follows renames.
            files=(mock-core/src/model/router.rs mock-core/src/model/dist.rs mock-core/src/engine/item.rs
                mock-core/src/engine/plan.rs mock-core/src/wire/meta.rs mock-core/src/wire/json.rs)
            mkdir -p target
            git diff -M ccfb6dc -- mock-server/src mock-core/src > target/server-channels.diff
            extra=(--in-diff target/server-channels.diff)
            packages=(mock-core mock-server) ;;
        client-channels)
            # What truncation, the version-aware off-policy mask, the multi-agent channels and grpo's routes check
            # added to the client and grpo: the lines changed since the commit before them.
            mkdir -p target
            git diff 4ca50a0 -- rollout-client/src grpo/src > target/client-channels.diff
            extra=(--in-diff target/client-channels.diff)
            packages=(rollout-client rollout-cli regression-tests grpo) ;;
        witness)
            # The ledger, the sample layouts and the audit, and the server's recording: the tests whose names say
            # witness (its unit tests, the server's witness area and the regression suite's property test).
            files=('mock-core/src/witness/*.rs' mock-server/src/http/witness.rs)
            test_args=(-- -- witness)
            packages=(mock-core mock-server regression-tests) ;;
        *)
            echo "unknown area $area (decoding, samples, grpo, model, openai, channels, server-channels, client-channels, witness)" >&2
            return 2 ;;
    esac
    local args=()
    for f in "${files[@]}"; do args+=(--file "$f"); done
    for p in "${packages[@]}"; do args+=(--test-package "$p"); done
    args+=("${extra[@]}")
    mkdir -p "mutants.out/$area"
    # Debug info makes every mutant's link slower and is not needed to see a test fail.
    export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-none}"
    # The baseline runs only the mutated package's tests, so its auto timeout is too short for the suite.
    cargo mutants --no-shuffle --timeout 30 --output "mutants.out/$area" "${args[@]}" "$@" "${test_args[@]}"
}

if [ $# -eq 0 ]; then
    status=0
    for area in decoding samples grpo model openai channels server-channels client-channels witness; do
        run_area "$area" || status=1
    done
    exit $status
fi
area=$1
shift
run_area "$area" "$@"
