#!/usr/bin/env python3
"""Applies the named mutants of issue #1976 one at a time and requires each to fail a named test.

Each mutant is one way the bug class of slime issue #1976 can come back: a logprob dropped, zero-filled or
shifted on its way from SGLang's `output_token_logprobs` to a training sample, the model's answer filed as
untrained tokens, a request that forgets to ask for logprobs, a sample that stops checking lengths, or a mock
whose temperature no longer matters. For each, the script edits one line of the source, runs the named tests,
requires at least one of them to fail (a test failure, not a build failure), and restores the file.

Usage: python3 mutants/named.py            (from anywhere; about one incremental build per mutant)
       python3 mutants/named.py "#2092"   (only the mutants whose name contains the text)
"""

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STALE = (
    "mock-server",
    "tests",
    "policy::logprobs_under_the_weights_before_an_update_are_named_stale_by_the_audit",
)
LEARN = ("rollout-cli", "tests", "train::the_loop_learns_with_every_ratio_exactly_one_at_the_rollout_policy")


@dataclass
class Mutant:
    name: str
    path: str
    original: str
    mutated: str
    # (package, test binary or "lib" for the unit tests, exact test name): at least one must fail.
    tests: list


MUTANTS = [
    Mutant(
        "dropping item[0] in decoding",
        "rollout-client/src/fast.rs",
        "out.logprobs.push(self.number()? as f32);",
        "self.number()?;",
        [("regression-tests", "regression", "rollouts::random_rollouts_reach_grpo_aligned_and_equal_to_the_oracle")],
    ),
    Mutant(
        "filing generated tokens as environment",
        "rollout-client/src/multi_agent.rs",
        "sample.apply_turn(&turn)?;",
        "sample.append_environment(&turn.output_ids, &turn.text)?;",
        [
            ("regression-tests", "regression", "agents::every_branch_of_the_reward_shaping_with_oracle_logprobs"),
            ("rollout-cli", "tests", "command::multi_agent_command_shapes_rewards"),
        ],
    ),
    Mutant(
        "multi-agent requests without return_logprob",
        "rollout-client/src/multi_agent.rs",
        "        ..GenerateRequest::from_ids(sample.tokens().to_vec(), params)",
        "        return_logprob: false,\n        ..GenerateRequest::from_ids(sample.tokens().to_vec(), params)",
        [("regression-tests", "regression", "agents::every_branch_of_the_reward_shaping_with_oracle_logprobs")],
    ),
    Mutant(
        "0.0 placeholder logprobs",
        "rollout-client/src/fast.rs",
        "out.logprobs.push(self.number()? as f32);",
        "{ self.number()?; out.logprobs.push(0.0); }",
        [("regression-tests", "regression", "rollouts::random_rollouts_reach_grpo_aligned_and_equal_to_the_oracle")],
    ),
    Mutant(
        "logprobs shifted by one position",
        "rollout-client/src/sample.rs",
        "self.rollout_log_probs.extend_from_slice(log_probs);",
        "self.rollout_log_probs.extend(log_probs.iter().skip(1).chain(log_probs.last()));",
        [("regression-tests", "regression", "rollouts::rollout_logprobs_are_the_policys_own_so_every_ratio_is_one")],
    ),
    Mutant(
        "skipping the length check on append",
        "rollout-client/src/sample.rs",
        "if tokens.len() != log_probs.len() {",
        "if false && tokens.len() != log_probs.len() {",
        [("regression-tests", "regression", "issue_1976::ids_without_logprobs_cannot_become_a_sample")],
    ),
    Mutant(
        "removing the temperature division in the model",
        "mock-core/src/model/dist.rs",
        "let inv_t = 1.0 / temperature;",
        "let inv_t = 1.0;",
        [("mock-server", "tests", "reference::server_agrees_with_the_python_reference_under_every_release")],
    ),
    # The channels beside the logprobs (the SGLang-channels issue's table).
    Mutant(
        "routes concatenated across turns instead of replaced (verl PR #6029)",
        "rollout-client/src/carried.rs",
        "                let mut data = Vec::new();",
        "                let mut data = existing.as_ref().map_or(Vec::new(), |e| e.as_flat().to_vec());",
        [
            ("rollout-client", "tests", "channels::a_multi_turn_sample_carries_every_channel_aligned"),
            ("regression-tests", "regression", "rollouts::random_rollouts_reach_grpo_aligned_and_equal_to_the_oracle"),
        ],
    ),
    Mutant(
        "routes cut shorter than the tokens accepted (miles #861's shape)",
        "rollout-client/src/channels.rs",
        "if !data.len().is_multiple_of(rows) || data.is_empty() {",
        "if data.is_empty() {",
        [("rollout-client", "tests", "channels::malformed_routes_name_the_channel_and_what_is_wrong")],
    ),
    Mutant(
        "a truncation that cuts the tokens but not the routes (miles #861)",
        "rollout-client/src/sample.rs",
        "routes.keep_rows(self.tokens.len().saturating_sub(1));",
        "let _ = &routes;",
        [("rollout-client", "tests", "channels::truncating_a_sample_cuts_every_channel_as_a_shorter_rollout_would")],
    ),
    Mutant(
        "multi-agent calls that do not ask for the routes (miles #407 in the multi-agent path)",
        "rollout-client/src/multi_agent.rs",
        "        return_routed_experts: config.return_routed_experts,",
        "        return_routed_experts: false,",
        [("rollout-cli", "tests", "command::the_command_writes_routes_and_sampling_masks_checked")],
    ),
    Mutant(
        "tokens of older weight versions left trained after a resume (slime PR #2092)",
        "rollout-client/src/sample.rs",
        "                    .filter(|s| s.version != newest)",
        "                    .filter(|_| false)",
        [
            ("rollout-client", "tests", "channels::offpolicy_masking_follows_each_tokens_weight_version"),
            ("regression-tests", "regression", "aborts::a_running_abort_keeps_the_partial_output_and_resumes"),
        ],
    ),
    Mutant(
        "a turn without the routes its sample carries accepted (miles #407)",
        "rollout-client/src/carried.rs",
        """            (None, Some(_)) if generated => {
                return Err(SampleError::ChannelMissingInTurn {
                    channel: "routed_experts",""",
        """            (None, Some(_)) if false => {
                return Err(SampleError::ChannelMissingInTurn {
                    channel: "routed_experts",""",
        [("rollout-client", "tests", "channels::a_sample_refuses_turns_that_would_misalign_its_channels")],
    ),
    Mutant(
        "weight-version spans with a gap or an overlap accepted (AReaL PR #1569)",
        "rollout-client/src/channels.rs",
        "        if span.start != next {",
        "        if false {",
        [
            ("rollout-client", "tests", "channels::weight_version_spans_must_tile_the_output"),
            ("regression-tests", "regression", "fault_matrix::every_channel_fault_meets_every_channel_rollout"),
        ],
    ),
    Mutant(
        "weight updates that name no version left uncounted (AReaL's integer labels checked against nothing)",
        "mock-server/src/control/mod.rs",
        "        self.weights.fetch_add(1, Ordering::AcqRel);",
        "",
        [
            (
                "mock-server",
                "tests",
                "witness::a_weight_update_without_a_version_is_counted_in_the_ledger_and_checks_number_labels",
            )
        ],
    ),
    Mutant(
        "a sampling support without its token accepted (TRL PR #7269)",
        "rollout-client/src/channels.rs",
        "let Some(at) = support.iter().position(|&id| id == token) else {",
        "let Some(at) = support.iter().position(|&id| id == token).or(Some(0)) else {",
        [("rollout-client", "tests", "channels::malformed_sampling_masks_name_the_position")],
    ),
    Mutant(
        "top-p rows asked for and not sent accepted (slime's --rollout-top-p below 1 asserting later)",
        "rollout-client/src/channels.rs",
        "        (true, None, None) if ran && !output_ids.is_empty() => {",
        "        (true, None, None) if false => {",
        [
            ("rollout-client", "tests", "channels::malformed_top_p_rows_name_the_key_and_the_row"),
            ("regression-tests", "regression", "fault_matrix::top_p_channel_faults_meet_top_p_rollouts"),
        ],
    ),
    Mutant(
        "top-p offsets that are not one per token and one more accepted (slime's extraction check)",
        "rollout-client/src/channels.rs",
        "    if offsets.len() != n + 1 {",
        "    if offsets.len() < n {",
        [("rollout-client", "tests", "channels::malformed_top_p_rows_name_the_key_and_the_row")],
    ),
    Mutant(
        "a null logprob read as 0.0 (TRL #6166, miles PR #2662: NaN written as JSON null)",
        "rollout-client/src/fast.rs",
        "out.logprobs.push(f32::NAN);",
        "out.logprobs.push(0.0);",
        [
            ("rollout-client", "tests", "decode::malformed_bodies_are_typed_errors"),
            ("regression-tests", "regression", "faults::faulted_responses_are_typed_errors_and_never_samples"),
        ],
    ),
    Mutant(
        "2-element [logprob, id] entries accepted (slime's FakeSGLangServer, miles' mock)",
        "rollout-client/src/visitor.rs",
        """        seq.next_element::<IgnoredAny>()?
            .ok_or_else(|| de::Error::invalid_length(2, &self))?;""",
        """        seq.next_element::<IgnoredAny>()?;""",
        [
            ("rollout-client", "tests", "decode::malformed_bodies_are_typed_errors"),
            ("regression-tests", "regression", "fault_matrix::every_channel_fault_meets_every_channel_rollout"),
        ],
    ),
    Mutant(
        "a phantom logprob entry without output tokens accepted (verl, max_new_tokens 0)",
        "rollout-client/src/validate.rs",
        "    if ids.len() != lps.len() {",
        "    if !ids.is_empty() && ids.len() != lps.len() {",
        [("rollout-client", "tests", "channels::a_phantom_logprob_without_output_tokens_is_refused")],
    ),
    Mutant(
        "the mock's router ignoring the context (routes no test can predict)",
        "mock-core/src/model/router.rs",
        "        let h = context_hash(seed, &tokens[..=p]) ^ ROUTER_SALT;",
        "        let h = seed ^ ROUTER_SALT;",
        [("mock-server", "tests", "channels::routes_have_a_row_per_position_but_the_last_and_continuations_repeat_them")],
    ),
    Mutant(
        "a witness that takes a zero-filled logprob for the served one (vime PR #70)",
        "mock-core/src/witness/audit.rs",
        "                Some(g) if expected == Some(Some(g)) => {",
        "                Some(g) if expected == Some(Some(g)) || g == 0.0 => {",
        [
            ("mock-core", "lib", "witness::tests::each_wrong_logprob_is_classified_at_its_positions"),
            ("regression-tests", "regression",
             "witness::the_clients_samples_pass_the_audit_and_any_single_corruption_is_reported_where_it_is"),
        ],
    ),
    Mutant(
        "a witness blind to generated tokens filed as environment (#1976)",
        "mock-core/src/witness/audit.rs",
        "        self.masked_generated();\n",
        "",
        [
            ("mock-core", "lib", "witness::tests::generated_tokens_with_mask_zero_are_reported_unless_allowed"),
            ("regression-tests", "regression",
             "witness::the_clients_samples_pass_the_audit_and_any_single_corruption_is_reported_where_it_is"),
        ],
    ),
    # Issue 49: the loop closed on the toy policy. Each is a way a trainer's recompute or weight sync goes
    # silently off-policy; the loop's own check (every ratio exactly 1 at the rollout policy) or the served
    # logprobs under the new weights must catch it.
    Mutant(
        "a server that ignores the weight update",
        "mock-server/src/http/admin.rs",
        "            state.model().set_policy(policy, weights);",
        "            drop((policy, weights));",
        [
            ("mock-server", "tests", "policy::a_model_directory_serves_its_weights_and_an_update_serves_the_new_ones"),
            LEARN,
        ],
    ),
    Mutant(
        "a recompute without the temperature",
        "rollout-cli/src/train.rs",
        ".logprob_gradient(policy, context, temperature, tokens[position])",
        ".logprob_gradient(policy, context, 1.0, tokens[position])",
        [LEARN],
    ),
    Mutant(
        "a recompute with the logits shifted by one position",
        "rollout-cli/src/train.rs",
        "let context = &tokens[..position];",
        "let context = &tokens[..position + 1];",
        [LEARN],
    ),
    Mutant(
        "a recompute that drops the prompt's last token",
        "rollout-cli/src/train.rs",
        "let context = &tokens[..position];",
        "let context = &[&tokens[..start - 1], &tokens[start..position]].concat();",
        [LEARN],
    ),
    Mutant(
        "a version label read after the update",
        "rollout-cli/src/train.rs",
        "let version = step.to_string();",
        "let version = (step + 1).to_string();",
        [LEARN],
    ),
    Mutant(
        "the policy's gradient with its sign flipped",
        "mock-core/src/model/mod.rs",
        "(hit - slot_logprobs[s].exp()) * inv_t",
        "(slot_logprobs[s].exp() - hit) * inv_t",
        [("mock-core", "lib", "model::tests::the_gradient_is_the_finite_difference_of_the_logprob"), LEARN],
    ),
    Mutant(
        "the loss gradient with its sign flipped",
        "grpo/src/loss.rs",
        "out[t] = w * f64::from(-a) * f64::from(ratio);",
        "out[t] = w * f64::from(a) * f64::from(ratio);",
        [("grpo", "tests", "gradient::the_gradient_is_the_finite_difference_of_the_loss"), LEARN],
    ),
    Mutant(
        "weights that never reach the served distribution",
        "mock-core/src/model/dist.rs",
        "            *w *= f;",
        "            let _ = (w, f);",
        [("mock-server", "tests", "reference::server_agrees_with_the_python_reference_under_non_zero_weights")],
    ),
    Mutant(
        "an audit blind to the weights served before",
        "mock-core/src/witness/audit.rs",
        "            None => model.policies_before(self.weights_of(seq, q)),",
        "            None => Vec::new(),",
        [
            ("mock-core", "lib", "witness::tests::logprobs_of_older_weights_than_the_tokens_name_the_stale_weights"),
            STALE,
        ],
    ),
    Mutant(
        "new weights recorded under the count before the update",
        "mock-server/src/http/admin.rs",
        "            state.model().set_policy(policy, weights);",
        "            state.model().set_policy(policy, weights - 1);",
        [STALE],
    ),
]


def run_test(package, binary, test):
    """Runs one test; returns 'failed', 'passed' or 'build error' with the output's tail."""
    target = ["--lib"] if binary == "lib" else ["--test", binary]
    command = ["cargo", "test", "-q", "-p", package, *target, "--", "--exact", test]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    output = result.stdout + result.stderr
    if "test result: FAILED" in output:
        return "failed", output
    if result.returncode == 0 and "1 passed" in output:
        return "passed", output
    return "build error", output


def untracked():
    """The files git does not track (nor ignore)."""
    out = subprocess.run(["git", "ls-files", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return set(out.split())


def main():
    # An argument picks the mutants whose name contains it (a local run); CI runs them all.
    chosen = [m for m in MUTANTS if len(sys.argv) < 2 or sys.argv[1] in m.name]
    if not chosen:
        print(f"ERROR no mutant's name contains {sys.argv[1]!r}")
        return 2
    survived = []
    for mutant in chosen:
        path = ROOT / mutant.path
        source = path.read_text()
        if source.count(mutant.original) != 1:
            print(f"ERROR {mutant.name}: {mutant.original!r} occurs {source.count(mutant.original)} times "
                  f"in {mutant.path}, not once")
            return 2
        before = untracked()
        path.write_text(source.replace(mutant.original, mutant.mutated))
        try:
            outcomes = [(test, *run_test(*test)) for test in mutant.tests]
        finally:
            path.write_text(source)
            # A property test that a mutant fails saves its failing case (proptest's regressions file): the
            # mutant's, not the code's, so it goes with the mutant.
            for new in untracked() - before:
                (ROOT / new).unlink()
        caught = [test for test, outcome, _ in outcomes if outcome == "failed"]
        broken = [(test, output) for test, outcome, output in outcomes if outcome == "build error"]
        if broken:
            test, output = broken[0]
            print(f"ERROR {mutant.name}: {test[2]} did not build or run:\n{output[-3000:]}")
            return 2
        if caught:
            print(f"caught    {mutant.name}: {', '.join(t[2] for t in caught)}")
        else:
            print(f"SURVIVED  {mutant.name}: {', '.join(t[2] for t in mutant.tests)} all passed")
            survived.append(mutant.name)
    # Each mutant is a test of the suite: caught passes, survived fails.
    print(f"named-mutants: {len(chosen) - len(survived)} passed, {len(survived)} failed")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
