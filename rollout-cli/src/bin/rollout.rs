//! The `rollout` command: records a GRPO rollout from SGLang or an embedded sglang-mock (see `rollout --help`).
//!
//! Exit status: 0 when every group finished (or `--allow-partial`), 1 when the run failed or some group
//! failed, 130 after SIGINT and 143 after SIGTERM (the finished groups are in the output and the summary is
//! printed); a second signal exits at once.

use std::process::ExitCode;
use std::sync::{Arc, OnceLock};

use clap::Parser;
use rollout_cli::command::{self, RolloutArgs};
use rollout_cli::run::{Stop, StopHandle};
use rollout_cli::train::TrainArgs;
use tokio::signal::unix::{SignalKind, signal};
use tracing_subscriber::EnvFilter;

/// A stopping signal and the exit status it gives, as a shell reports a process it ended (128 + signal).
#[derive(Debug, Clone, Copy)]
enum Signal {
    Interrupt,
    Terminate,
}

impl Signal {
    fn status(self) -> u8 {
        match self {
            Signal::Interrupt => 130,
            Signal::Terminate => 143,
        }
    }
}

/// Waits for SIGINT or SIGTERM, records it and asks the run to stop; a second one exits at once.
fn watch_signals(stop: StopHandle, received: Arc<OnceLock<Signal>>) -> std::io::Result<()> {
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    tokio::spawn(async move {
        let first = tokio::select! {
            _ = interrupt.recv() => Signal::Interrupt,
            _ = terminate.recv() => Signal::Terminate,
        };
        received.set(first).ok();
        eprintln!(
            "rollout: stopping: aborting the requests in flight and keeping the finished groups (signal \
             again to exit at once)"
        );
        stop.stop();
        let second = tokio::select! {
            _ = interrupt.recv() => Signal::Interrupt,
            _ = terminate.recv() => Signal::Terminate,
        };
        std::process::exit(i32::from(second.status()));
    });
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    // `rollout train [FLAGS]`: the training loop on the toy policy, with flags of its own.
    if std::env::args_os().nth(1).is_some_and(|a| a == "train") {
        let args = TrainArgs::parse_from(
            std::iter::once("rollout train".into()).chain(std::env::args_os().skip(2)),
        );
        rollout_cli::train::run_train(args).await?;
        return Ok(ExitCode::SUCCESS);
    }
    let args = RolloutArgs::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let (handle, stop) = Stop::new();
    let received = Arc::new(OnceLock::new());
    watch_signals(handle, Arc::clone(&received))?;
    let result = command::run_command_until(args, stop).await;
    let signal = received.get().copied();
    let report = match (result, signal) {
        (Ok(report), _) => report,
        (Err(error), Some(signal)) => {
            eprintln!("rollout: {:#}", anyhow::Error::from(error));
            return Ok(ExitCode::from(signal.status()));
        }
        (Err(error), None) => return Err(error.into()),
    };
    println!("{report}");
    Ok(match signal {
        Some(signal) => ExitCode::from(signal.status()),
        None if report.failed() => {
            eprintln!(
                "rollout: {} of {} groups failed; the output holds the {} that finished (--allow-partial \
                 accepts a partial rollout)",
                report.summary.failed_groups, report.summary.total_prompts, report.summary.prompts
            );
            ExitCode::FAILURE
        }
        None => ExitCode::SUCCESS,
    })
}
