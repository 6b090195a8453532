//! Faulted server responses become typed client errors and never samples.
