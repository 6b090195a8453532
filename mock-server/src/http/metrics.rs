//! `/metrics`: SGLang's Prometheus metrics (`sglang:` names, SGLang's histogram buckets) written by hand in the
//! text exposition format, plus counters of injected faults.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// SGLang's `time_to_first_token_seconds` buckets.
const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    15.0, 20.0, 25.0, 30.0,
];
/// SGLang's `time_per_output_token_seconds` (inter-token latency) buckets.
const ITL_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
    1.0, 2.5,
];
/// SGLang's `e2e_request_latency_seconds` buckets.
const E2E_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
];

/// A Prometheus histogram with fixed buckets; the sum is kept in microseconds to stay an integer atomic.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    sum_micros: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// Record `n` observations of `seconds` at once.
    pub fn observe_n(&self, seconds: f64, n: u64) {
        if n == 0 || !seconds.is_finite() {
            return;
        }
        if let Some(i) = self.bounds.iter().position(|&b| seconds <= b) {
            self.counts[i].fetch_add(n, Ordering::Relaxed);
        }
        self.count.fetch_add(n, Ordering::Relaxed);
        self.sum_micros
            .fetch_add((seconds.max(0.0) * 1e6) as u64 * n, Ordering::Relaxed);
    }

    pub fn observe(&self, seconds: f64) {
        self.observe_n(seconds, 1);
    }

    fn write(&self, out: &mut String, name: &str, help: &str, labels: &str) {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} histogram");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
        let mut cumulative = 0;
        for (bound, count) in self.bounds.iter().zip(&self.counts) {
            cumulative += count.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{name}_bucket{{le=\"{}\",{labels}}} {cumulative}.0",
                python_float(*bound)
            );
        }
        let total = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\",{labels}}} {total}.0");
        let _ = writeln!(out, "{name}_count{{{labels}}} {total}.0");
    }
}

/// Python's `str(float)`: `1.0`, not `1`.
fn python_float(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

/// Every counter and histogram the server keeps.
#[derive(Debug)]
pub struct Metrics {
    pub prompt_tokens: AtomicU64,
    pub generation_tokens: AtomicU64,
    pub requests: AtomicU64,
    pub aborted_requests: AtomicU64,
    pub ttft: Histogram,
    pub itl: Histogram,
    pub e2e: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            prompt_tokens: AtomicU64::new(0),
            generation_tokens: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            aborted_requests: AtomicU64::new(0),
            ttft: Histogram::new(TTFT_BUCKETS),
            itl: Histogram::new(ITL_BUCKETS),
            e2e: Histogram::new(E2E_BUCKETS),
        }
    }
}

/// Gauges read at scrape time.
#[derive(Debug, Clone, Copy)]
pub struct Gauges {
    pub running: usize,
    pub queued: usize,
    pub used_tokens: usize,
}

impl Metrics {
    /// Record a finished sample: its token counts, and its latencies (seconds).
    pub fn record_sample(&self, prompt_tokens: usize, output_tokens: usize, ttft: f64, e2e: f64) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.prompt_tokens
            .fetch_add(prompt_tokens as u64, Ordering::Relaxed);
        self.generation_tokens
            .fetch_add(output_tokens as u64, Ordering::Relaxed);
        if output_tokens > 0 {
            self.ttft.observe(ttft);
        }
        if output_tokens > 1 {
            let per = (e2e - ttft).max(0.0) / (output_tokens - 1) as f64;
            self.itl.observe_n(per, output_tokens as u64 - 1);
        }
        self.e2e.observe(e2e);
    }

    /// The whole exposition. `faults` is the count per injected fault kind.
    pub fn render(
        &self,
        model_name: &str,
        gauges: Gauges,
        faults: &[(&'static str, u64)],
    ) -> String {
        let labels = format!("model_name=\"{}\"", escape_label(model_name));
        let mut out = String::with_capacity(8192);
        let counter = |out: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            let _ = writeln!(out, "{name}{{{labels}}} {v}.0");
        };
        let gauge = |out: &mut String, name: &str, help: &str, v: usize| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} gauge");
            let _ = writeln!(out, "{name}{{{labels}}} {v}.0");
        };
        counter(
            &mut out,
            "sglang:prompt_tokens_total",
            "Number of prefill tokens processed.",
            self.prompt_tokens.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "sglang:generation_tokens_total",
            "Number of generation tokens processed.",
            self.generation_tokens.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "sglang:num_requests_total",
            "Number of requests processed.",
            self.requests.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "sglang:num_aborted_requests_total",
            "Number of requests aborted.",
            self.aborted_requests.load(Ordering::Relaxed),
        );
        self.ttft.write(
            &mut out,
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            &labels,
        );
        self.itl.write(
            &mut out,
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            &labels,
        );
        self.e2e.write(
            &mut out,
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            &labels,
        );
        gauge(
            &mut out,
            "sglang:num_running_reqs",
            "The number of running requests",
            gauges.running,
        );
        gauge(
            &mut out,
            "sglang:num_queue_reqs",
            "The number of requests in the waiting queue",
            gauges.queued,
        );
        gauge(
            &mut out,
            "sglang:num_used_tokens",
            "The number of used tokens",
            gauges.used_tokens,
        );
        let name = "sglang_mock:faults_injected_total";
        let _ = writeln!(out, "# HELP {name} Faults injected by the mock, by kind.");
        let _ = writeln!(out, "# TYPE {name} counter");
        for (kind, n) in faults {
            let _ = writeln!(out, "{name}{{kind=\"{kind}\",{labels}}} {n}.0");
        }
        out
    }
}

fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
