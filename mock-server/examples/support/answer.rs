//! One answer to the loopback benchmark's request (`bench/loopback.py`), split into the two halves of its floor:
//! generating it without encoding it, as the server's non-stream driver runs it (without the runtime around it),
//! and encoding the finished answer, each through the server's own code. Shared by `examples/floor.rs` and the
//! criterion group `floor_1024_logprobs` (`benches/generate.rs`).

use mock_server::engine::{GeneratePlan, Interventions, Run};
use mock_server::oracle::Oracle;
use mock_server::wire::{EncodeCtx, encode_body};
use mock_server::{ApiError, ServerConfig};

/// The loopback benchmark's request with `max_new_tokens` and `stream` filled in.
pub(crate) fn request_body(tokens: u32, stream: bool) -> String {
    format!(
        r#"{{"input_ids":[785,6722,315,9625,374],"sampling_params":{{"max_new_tokens":{tokens},"ignore_eos":true,"temperature":1.0}},"return_logprob":true,"stream":{stream}}}"#
    )
}

/// The planned request of a `tokens`-long answer, on the default server.
pub(crate) struct Answer {
    oracle: Oracle,
    plan: GeneratePlan,
}

impl Answer {
    pub(crate) fn new(tokens: u32) -> Result<Answer, ApiError> {
        Answer::serving(tokens, ServerConfig::default())
    }

    /// The same answer from a server of `config` (a toy policy's `model_path`, say).
    pub(crate) fn serving(tokens: u32, config: ServerConfig) -> Result<Answer, ApiError> {
        let oracle = Oracle::new(config).map_err(|e| ApiError::internal(e.to_string()))?;
        let plan = oracle.plan(request_body(tokens, false).as_bytes())?;
        Ok(Answer { oracle, plan })
    }

    /// The answer generated to its end, ticking as many steps per call as the non-stream driver does.
    pub(crate) fn generate(&self) -> Run {
        let mut run = Run::new(self.oracle.model(), &self.plan, None);
        while !run.is_done() {
            run.tick_many(&Interventions::default(), usize::MAX);
        }
        run
    }

    /// The non-stream body of a finished run.
    pub(crate) fn encode(&self, run: &Run) -> Vec<u8> {
        let config = self.oracle.config();
        let ctx = EncodeCtx::new(
            config.sglang_version,
            self.oracle.model(),
            &self.plan,
            &config.weight_version,
        );
        // A finished run of a valid plan always encodes; an empty body would show in the byte counts.
        encode_body(&ctx, &self.plan, run, &[0.25], 1.7e9).unwrap_or_default()
    }
}
