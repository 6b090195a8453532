//! The embedded sglang-mock: started in-process on 127.0.0.1:0 with scripted answers for the prompts, stopped after the run.

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::prompts::LabeledPrompt;
use crate::scripted;

/// A running embedded mock. [`EmbeddedMock::stop`] shuts it down and waits for it.
#[derive(Debug)]
pub struct EmbeddedMock {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// How many of the prompts get scripted answers.
    pub scripted_prompts: usize,
    shutdown: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

impl EmbeddedMock {
    /// Binds a free port and serves the mock configured with the scripted answers for `prompts`.
    pub async fn start(prompts: &[LabeledPrompt]) -> std::io::Result<EmbeddedMock> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (shutdown, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(mock_server::run(
            listener,
            scripted::mock_config(prompts),
            async move {
                let _ = rx.await;
            },
        ));
        Ok(EmbeddedMock {
            url: format!("http://{addr}"),
            scripted_prompts: scripted::scripted_prompt_count(prompts),
            shutdown,
            task,
        })
    }

    /// Stops the server once its in-flight requests are done.
    pub async fn stop(self) {
        let _ = self.shutdown.send(());
        // The server's own error is not the rollout's to report.
        let _ = self.task.await;
    }
}
