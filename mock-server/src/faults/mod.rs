//! Fault injection in the server: the catalogue and the schedule are the core's data (`mock_core::faults`);
//! here they act on what is sent: the byte-level mutations of normal response bodies (`mutate`), and faults
//! applied to what a generating route answers (`stream`).

mod mutate;
pub(crate) mod stream;

pub use mock_core::faults::*;
