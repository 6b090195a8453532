//! Fault injection's data: the catalogue of fault kinds, their classes, typed parameters and
//! `kind;param=value` syntax (`catalogue`), and the deterministic schedule that picks which request gets which
//! fault, with the counters `/admin/stats` reports (`schedule`). The server applies them (its `faults` module:
//! the byte-level mutations of bodies, and faults on what a generating route sends).

mod catalogue;
mod schedule;

pub use catalogue::{
    BodyFault, Channel, EngineFault, FAULT_HEADER, Fault, FaultClass, FaultConfig,
    FaultConfigError, FaultError, FaultKind, FaultRule, HttpFault, NonFinite, NumberLiteral,
    StreamFault, StreamFilter,
};
pub use schedule::Faults;
