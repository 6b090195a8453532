//! Fault injection: the catalogue of fault kinds and their `kind;param=value` syntax (`catalogue`), the
//! deterministic schedule that picks which request gets which fault and the counters `/admin/stats` reports
//! (`schedule`), the byte-level mutations of normal response bodies (`mutate`), and faults applied to what a
//! generating route answers (`stream`).

mod catalogue;
mod mutate;
mod schedule;
pub mod stream;

pub use catalogue::{
    FAULT_HEADER, Fault, FaultConfig, FaultConfigError, FaultError, FaultKind, FaultRule,
    StreamFilter,
};
pub use mutate::{is_body_fault, mutate_body, mutate_object};
pub use schedule::Faults;
