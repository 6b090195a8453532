//! Fault injection: the catalogue of fault kinds, their classes, typed parameters and `kind;param=value`
//! syntax (`catalogue`), the
//! deterministic schedule that picks which request gets which fault and the counters `/admin/stats` reports
//! (`schedule`), the byte-level mutations of normal response bodies (`mutate`), and faults applied to what a
//! generating route answers (`stream`).

mod catalogue;
mod mutate;
mod schedule;
pub(crate) mod stream;

pub use catalogue::{
    BodyFault, Channel, EngineFault, FAULT_HEADER, Fault, FaultClass, FaultConfig,
    FaultConfigError, FaultError, FaultKind, FaultRule, HttpFault, NonFinite, NumberLiteral,
    StreamFault, StreamFilter,
};
pub(crate) use schedule::Faults;
