//! The command's progress bar: finished samples (or agent-system runs) out of all of them, on stderr.

use indicatif::{ProgressBar, ProgressStyle};

/// A bar over `units` finished units, named `unit` ("samples", "agent runs").
pub fn bar(units: usize, unit: &str) -> ProgressBar {
    let pb = ProgressBar::new(units as u64);
    if let Ok(style) = ProgressStyle::with_template(&format!(
        "{{elapsed_precise}} [{{bar:40}}] {{pos}}/{{len}} {unit} ({{per_sec}})"
    )) {
        pb.set_style(style);
    }
    pb
}
