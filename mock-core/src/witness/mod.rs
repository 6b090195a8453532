//! The witness: the ledger of what the server served, and the audit of a trainer's samples against it
//! (`mock-server/WITNESS.md`).
//!
//! Only the server knows exactly what it sent. With the ledger on (`--ledger`), every item that ends is
//! recorded ([`Ledger`], [`Entry`]); a trainer's test hands the server the samples its own rollout code built,
//! in slime's, verl's, AReaL's or a generic layout ([`parse_samples`]), and [`audit`] explains each response as
//! segments the server generated, reporting every way the #1976 bug class shows up at the positions where it
//! does ([`Report`], [`Problem`], [`ProblemKind`]). Pure: no HTTP, no async; the server's `/admin/ledger` and
//! `/admin/audit` and the binary's `audit` command are thin drivers of this module.

mod audit;
mod ledger;
mod record;
mod samples;
#[cfg(test)]
mod tests;

pub use audit::{Problem, ProblemKind, Report, audit};
pub use ledger::{
    Entry, Finish, Ledger, PromptHash, Records, Route, Router, RoutesEdit, SentLogprobs,
    SentRoutes, Span, Supports,
};
pub use record::Served;
pub use samples::{
    AuditOptions, AuditSample, Batch, Fields, Layout, Rows, SampleError, VersionLabel,
    parse_sample, parse_samples,
};
