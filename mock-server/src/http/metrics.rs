//! `/metrics`: SGLang's Prometheus metrics (`sglang:` names, SGLang's histogram buckets) in the classic text
//! exposition format exactly as SGLang's `prometheus_client` writes it (see `production_metrics.md` in
//! SGLang's docs: `_sum` before the buckets, `le` first among the labels, every value a Python float such as
//! `8.0`), plus counters of injected faults. The OpenMetrics encoder of the `prometheus-client` crate writes
//! another dialect (`le` last, integer counts, `# EOF`), so the exposition stays this small writer.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

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

/// A Prometheus histogram with fixed buckets; the sum is an `f64` kept as its bits in an atomic.
#[derive(Debug)]
pub(crate) struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    sum_bits: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            sum_bits: AtomicU64::new(0f64.to_bits()),
            count: AtomicU64::new(0),
        }
    }

    /// Record `n` observations of `seconds` at once.
    pub(crate) fn observe_n(&self, seconds: f64, n: u64) {
        if n == 0 || !seconds.is_finite() {
            return;
        }
        if let Some(i) = self.bounds.iter().position(|&b| seconds <= b) {
            self.counts[i].fetch_add(n, Ordering::Relaxed);
        }
        self.count.fetch_add(n, Ordering::Relaxed);
        let add = seconds.max(0.0) * n as f64;
        // A compare-and-swap loop: there is no atomic float add.
        let _ = self
            .sum_bits
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + add).to_bits())
            });
    }

    pub(crate) fn observe(&self, seconds: f64) {
        self.observe_n(seconds, 1);
    }

    fn write(&self, out: &mut String, name: &str, help: &str, labels: &str) {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} histogram");
        let sum = python_float(f64::from_bits(self.sum_bits.load(Ordering::Relaxed)));
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
    // `repr` writes the shortest round-trip digits, in exponent form below 1e-4 and from 1e16 on.
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if x != 0.0 && x.is_finite() && !(-4..16).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    if x.fract() == 0.0 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

/// Every counter and histogram the server keeps.
#[derive(Debug)]
pub(crate) struct Metrics {
    pub prompt_tokens: AtomicU64,
    pub generation_tokens: AtomicU64,
    pub requests: AtomicU64,
    pub aborted_requests: AtomicU64,
    /// Prompt tokens the prefix cache held for finished requests.
    pub cached_tokens: AtomicU64,
    /// The last prefill's hit rate (its items' cached tokens over their prompt tokens), as `f64` bits.
    cache_hit_rate: AtomicU64,
    pub ttft: Histogram,
    pub itl: Histogram,
    pub e2e: Histogram,
    /// The previous scrape: when, and the generation tokens counted then (for `gen_throughput`).
    last_scrape: Mutex<Option<(Instant, u64)>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            prompt_tokens: AtomicU64::new(0),
            generation_tokens: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            aborted_requests: AtomicU64::new(0),
            cached_tokens: AtomicU64::new(0),
            cache_hit_rate: AtomicU64::new(0f64.to_bits()),
            ttft: Histogram::new(TTFT_BUCKETS),
            itl: Histogram::new(ITL_BUCKETS),
            e2e: Histogram::new(E2E_BUCKETS),
            last_scrape: Mutex::new(None),
        }
    }
}

/// Gauges read at scrape time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Gauges {
    pub running: usize,
    pub queued: usize,
    pub used_tokens: usize,
    /// The KV pool's size, `max_total_num_tokens`: `token_usage` is `used_tokens` over it.
    pub max_total_tokens: usize,
    /// `cached_tokens_total`'s `cache_source`: `device` where items report `cached_tokens_details`, else the
    /// collector's fallback `total`.
    pub cache_source: &'static str,
}

impl Metrics {
    /// A prefill: `cache_hit_rate` becomes its hit tokens over its prompt tokens (the scheduler's
    /// `log_hit_tokens / (log_input_tokens + log_hit_tokens)` of its last prefill batch).
    pub(crate) fn record_prefill(&self, hit_tokens: usize, prompt_tokens: usize) {
        if prompt_tokens > 0 {
            let rate = hit_tokens as f64 / prompt_tokens as f64;
            self.cache_hit_rate.store(rate.to_bits(), Ordering::Relaxed);
        }
    }

    /// The last prefill's hit rate ([`Metrics::record_prefill`]).
    pub(crate) fn cache_hit_rate(&self) -> f64 {
        f64::from_bits(self.cache_hit_rate.load(Ordering::Relaxed))
    }

    /// Record a finished sample: its token counts, and its latencies (seconds).
    pub(crate) fn record_sample(
        &self,
        prompt_tokens: usize,
        output_tokens: usize,
        cached_tokens: usize,
        ttft: f64,
        e2e: f64,
    ) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.cached_tokens
            .fetch_add(cached_tokens as u64, Ordering::Relaxed);
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

    /// Generation tokens per second since the previous scrape (SGLang's scheduler measures over its decode log
    /// interval instead); 0 at the first scrape and when nothing was generated in between.
    fn throughput_since_last_scrape(&self) -> f64 {
        let now = Instant::now();
        let tokens = self.generation_tokens.load(Ordering::Relaxed);
        let mut last = self
            .last_scrape
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let rate = match *last {
            Some((at, before)) if tokens > before => {
                let seconds = now.duration_since(at).as_secs_f64();
                if seconds > 0.0 {
                    (tokens - before) as f64 / seconds
                } else {
                    0.0
                }
            }
            _ => 0.0,
        };
        *last = Some((now, tokens));
        rate
    }

    /// The whole exposition. `faults` is the count per injected fault kind.
    pub(crate) fn render(
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
        let float_gauge = |out: &mut String, name: &str, help: &str, v: f64| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} gauge");
            let _ = writeln!(out, "{name}{{{labels}}} {}", python_float(v));
        };
        float_gauge(
            &mut out,
            "sglang:token_usage",
            "The token usage.",
            gauges.used_tokens as f64 / gauges.max_total_tokens.max(1) as f64,
        );
        float_gauge(
            &mut out,
            "sglang:gen_throughput",
            "The generation throughput (token/s).",
            self.throughput_since_last_scrape(),
        );
        // The toy model has no grammar backend and no speculative decoding.
        gauge(
            &mut out,
            "sglang:num_grammar_queue_reqs",
            "The number of requests in the grammar waiting queue.",
            0,
        );
        float_gauge(
            &mut out,
            "sglang:cache_hit_rate",
            "The prefix cache hit rate.",
            f64::from_bits(self.cache_hit_rate.load(Ordering::Relaxed)),
        );
        float_gauge(
            &mut out,
            "sglang:spec_accept_length",
            "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
            0.0,
        );
        // Labelled by `cache_source`: until a hit, `prometheus_client` writes the metric's header and no sample.
        let name = "sglang:cached_tokens_total";
        let _ = writeln!(
            out,
            "# HELP {name} Number of cached prompt tokens by source (device/host/storage)."
        );
        let _ = writeln!(out, "# TYPE {name} counter");
        let cached = self.cached_tokens.load(Ordering::Relaxed);
        if cached > 0 {
            let source = gauges.cache_source;
            let _ = writeln!(
                out,
                "{name}{{cache_source=\"{source}\",{labels}}} {cached}.0"
            );
        }
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

#[cfg(test)]
mod tests {
    use super::python_float;

    #[test]
    fn floats_read_as_pythons_repr() {
        // Expected values are Python 3's `repr` of the same floats.
        for (x, repr) in [
            (0.0, "0.0"),
            (8.0, "8.0"),
            (0.25, "0.25"),
            (0.0001, "0.0001"),
            (4.5e-5, "4.5e-05"),
            (2351897.9474117756, "2351897.9474117756"),
            (1e16, "1e+16"),
            (1.5e17, "1.5e+17"),
            (123456789012345.6, "123456789012345.6"),
        ] {
            assert_eq!(python_float(x), repr);
        }
    }
}
