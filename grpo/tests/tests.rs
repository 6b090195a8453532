//! Integration tests of the `grpo` crate, built as one binary.

/// Known-answer vectors of section 6 of the reference, through one data-driven `check` helper.
mod known_answers;

/// Batch validation: every invalid input is rejected with the right error and sample index.
mod validation;

/// Property tests of section R9 and the no-NaN guarantee, with proptest.
mod properties;

/// The kernel's copy chosen from the CPU's features against the build target's copy, bit for bit.
mod dispatch;

/// The loss gradient against finite differences of the loss.
mod gradient;

/// Shared builders for the test modules.
mod util;
