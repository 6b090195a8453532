//! The embedded sglang-mock: started in-process on 127.0.0.1:0 with scripted answers for the prompts, stopped after the run.

use mock_server::model::LoadedTokenizer;
use mock_server::{Server, ServerConfig, SglangVersion, StartError};

use crate::prompts::LabeledPrompt;
use crate::scripted;

/// A running embedded mock. [`EmbeddedMock::stop`] shuts it down and waits for it.
#[derive(Debug)]
pub struct EmbeddedMock {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// How many of the prompts get scripted answers.
    pub scripted_prompts: usize,
    server: Server,
}

impl EmbeddedMock {
    /// Binds a free port and serves the mock configured with the scripted answers for `prompts`, returning
    /// routed experts when `routed_experts`, over `tokenizer`'s vocabulary when one is given, and as slime's
    /// patched release (which serves top-p replay) when `slime_top_p`.
    pub async fn start(
        prompts: &[LabeledPrompt],
        routed_experts: bool,
        slime_top_p: bool,
        tokenizer: Option<LoadedTokenizer>,
    ) -> Result<EmbeddedMock, StartError> {
        let base = scripted::mock_config(prompts);
        let server = Server::start(ServerConfig {
            host: "127.0.0.1".to_owned(),
            port: 0,
            enable_return_routed_experts: routed_experts,
            tokenizer,
            // The release slime's patches apply to.
            sglang_version: match slime_top_p {
                true => SglangVersion::all()
                    .find(|release| release.slime_patches)
                    .unwrap_or(base.sglang_version),
                false => base.sglang_version,
            },
            slime_patches: slime_top_p,
            ..base
        })
        .await?;
        Ok(EmbeddedMock {
            url: server.url(),
            scripted_prompts: scripted::scripted_prompt_count(prompts),
            server,
        })
    }

    /// Stops the server once its in-flight requests are done.
    pub async fn stop(self) {
        // The server's own error is not the rollout's to report.
        let _ = self.server.shutdown().await;
    }
}
