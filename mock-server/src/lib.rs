//! `sglang-mock`: a deterministic SGLang server emulator whose logprobs are the true probabilities of a toy model.

pub mod engine;
pub mod model;
