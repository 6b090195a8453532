//! The `rollout` command: records a GRPO rollout from SGLang or an embedded sglang-mock (see `rollout --help`).

use clap::Parser;
use rollout_cli::command::{self, RolloutArgs};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = RolloutArgs::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let report = command::run_command(args).await?;
    println!("{report}");
    Ok(())
}
