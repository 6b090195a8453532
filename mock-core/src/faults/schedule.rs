//! The deterministic schedule that picks which request gets which fault (`first`, `every`, `rate`, per
//! endpoint and stream filter, or the `X-Mock-Fault` header), and the counters `/admin/stats` reports.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use super::catalogue::{
    Fault, FaultConfig, FaultError, FaultKind, GENERATING_ENDPOINTS, StreamFilter, generates,
};
use crate::model::{mix, unit};

struct Installed {
    config: FaultConfig,
    counters: Vec<AtomicU64>,
    since: Instant,
}

/// The live schedule plus the counters of `/admin/stats`. Replacing the configuration is atomic: a request
/// sees either the old rules or the new ones.
pub struct Faults {
    installed: RwLock<Arc<Installed>>,
    requests: Mutex<BTreeMap<String, u64>>,
    injected: Mutex<BTreeMap<FaultKind, u64>>,
}

impl fmt::Debug for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Faults")
            .field("config", &self.config())
            .finish()
    }
}

impl Faults {
    pub fn new(config: FaultConfig) -> Faults {
        Faults {
            installed: RwLock::new(Arc::new(Installed::new(config))),
            requests: Mutex::new(BTreeMap::new()),
            injected: Mutex::new(BTreeMap::new()),
        }
    }

    fn current(&self) -> Arc<Installed> {
        match self.installed.read() {
            Ok(guard) => Arc::clone(&guard),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    pub fn config(&self) -> FaultConfig {
        self.current().config.clone()
    }

    /// Replace the configuration; rule counters and the time window start afresh.
    pub fn replace(&self, config: FaultConfig) {
        let installed = Arc::new(Installed::new(config));
        match self.installed.write() {
            Ok(mut guard) => *guard = installed,
            Err(poisoned) => *poisoned.into_inner() = installed,
        }
    }

    /// Install `config` afresh, as [`Faults::replace`], and zero the counters of requests and injected faults.
    pub fn reset(&self, config: FaultConfig) {
        self.replace(config);
        lock(&self.requests).clear();
        lock(&self.injected).clear();
    }

    /// Count a request to `endpoint` and pick its fault: the header's if given (a bad header is an error),
    /// otherwise the first scheduled rule that fires.
    pub fn decide(
        &self,
        endpoint: &str,
        stream: bool,
        header: Option<&str>,
    ) -> Result<Option<Fault>, FaultError> {
        {
            let mut requests = lock(&self.requests);
            match requests.get_mut(endpoint) {
                Some(count) => *count += 1,
                None => {
                    requests.insert(endpoint.to_owned(), 1);
                }
            }
        }
        if let Some(spec) = header {
            let fault: Fault = spec.parse()?;
            if !generates(endpoint) && !fault.is_http_level() {
                return Err(FaultError::BadRule {
                    index: 0,
                    reason: format!(
                        "{} only applies to {GENERATING_ENDPOINTS}, not {endpoint}",
                        fault.kind()
                    ),
                });
            }
            return Ok(Some(fault));
        }
        let installed = self.current();
        if installed.config.rules.is_empty() {
            return Ok(None);
        }
        Ok(installed.pick(endpoint, stream))
    }

    /// Record that `kind` was injected.
    pub fn record(&self, kind: FaultKind) {
        *lock(&self.injected).entry(kind).or_default() += 1;
    }

    /// Requests seen per endpoint.
    pub fn requests_seen(&self) -> BTreeMap<String, u64> {
        lock(&self.requests).clone()
    }

    /// Faults injected per kind.
    pub fn injected(&self) -> BTreeMap<FaultKind, u64> {
        lock(&self.injected).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Installed {
    fn new(config: FaultConfig) -> Installed {
        Installed {
            counters: config.rules.iter().map(|_| AtomicU64::new(0)).collect(),
            config,
            since: Instant::now(),
        }
    }

    fn pick(&self, endpoint: &str, stream: bool) -> Option<Fault> {
        let elapsed_ms = self.since.elapsed().as_millis() as u64;
        for (i, rule) in self.config.rules.iter().enumerate() {
            if rule.endpoint.as_deref().unwrap_or("/generate") != endpoint {
                continue;
            }
            match rule.stream {
                Some(StreamFilter::Stream) if !stream => continue,
                Some(StreamFilter::NonStream) if stream => continue,
                _ => {}
            }
            if let Some((start, end)) = rule.window_ms
                && !(start..end).contains(&elapsed_ms)
            {
                continue;
            }
            let n = self.counters[i].fetch_add(1, Ordering::Relaxed);
            let fires = rule.first.is_none_or(|first| n < first)
                && rule.every.is_none_or(|k| (n + 1).is_multiple_of(k.max(1)))
                && rule
                    .rate
                    .is_none_or(|rate| unit(mix(mix(self.config.seed, i as u64), n)) < rate);
            if fires {
                return Some(rule.fault.clone());
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::FaultRule;

    #[test]
    fn schedules_are_deterministic() {
        let config = FaultConfig {
            seed: 3,
            rules: vec![
                FaultRule {
                    first: Some(2),
                    ..FaultRule::new("reset".parse().unwrap())
                },
                FaultRule {
                    every: Some(3),
                    ..FaultRule::new("stall;ms=1".parse().unwrap())
                },
                FaultRule {
                    rate: Some(0.5),
                    ..FaultRule::new("missing-logprobs".parse().unwrap())
                },
            ],
        };
        let run = || {
            let faults = Faults::new(config.clone());
            (0..40)
                .map(|_| {
                    faults
                        .decide("/generate", false, None)
                        .unwrap()
                        .map(|f| f.kind())
                })
                .collect::<Vec<_>>()
        };
        let a = run();
        assert_eq!(a, run());
        assert_eq!(a[..2], [Some(FaultKind::Reset), Some(FaultKind::Reset)]);
        // Rule 1 counts the requests rule 0 let through: its 3rd, 6th, ... are requests 4, 7, ...
        assert_eq!(a[4], Some(FaultKind::Stall));
        let rated = a
            .iter()
            .filter(|k| **k == Some(FaultKind::MissingLogprobs))
            .count();
        assert!((5..25).contains(&rated), "{rated}");
    }
}
