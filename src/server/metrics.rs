//! Prometheus metrics (text exposition format 0.0.4), kept by hand: gauges copied from the
//! engine's [`ServeStats`] after each step, counters and latency histograms observed by the HTTP
//! side as events reach clients (so time to first token includes queueing).
//!
//! Invariants: histogram buckets are cumulative when rendered (`le` upper bounds, then `+Inf`
//! equal to `_count`); counters only grow.

use std::fmt::Write;
use std::sync::Mutex;

use crate::serving::ServeStats;

const LATENCY_BUCKETS: &[f64] =
    &[0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0];

#[derive(Debug)]
pub struct Histogram {
    buckets: &'static [f64],
    /// Per bucket (not cumulative), then the overflow bucket.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    pub fn new(buckets: &'static [f64]) -> Self {
        Histogram { buckets, counts: vec![0; buckets.len() + 1], sum: 0.0, count: 0 }
    }
    pub fn observe(&mut self, v: f64) {
        let i = self.buckets.iter().position(|&b| v <= b).unwrap_or(self.buckets.len());
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }
    pub fn count(&self) -> u64 {
        self.count
    }
    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut acc = 0;
        for (b, c) in self.buckets.iter().zip(&self.counts) {
            acc += c;
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {acc}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum {}\n{name}_count {}", self.sum, self.count);
    }
}

#[derive(Debug)]
struct Inner {
    stats: ServeStats,
    ttft: Histogram,
    itl: Histogram,
    e2e: Histogram,
    success_stop: u64,
    success_length: u64,
    failed: u64,
    rejected: u64,
}

#[derive(Debug)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            inner: Mutex::new(Inner {
                stats: ServeStats::default(),
                ttft: Histogram::new(LATENCY_BUCKETS),
                itl: Histogram::new(LATENCY_BUCKETS),
                e2e: Histogram::new(LATENCY_BUCKETS),
                success_stop: 0,
                success_length: 0,
                failed: 0,
                rejected: 0,
            }),
        }
    }
}

impl Metrics {
    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g)
    }
    pub fn set_stats(&self, s: ServeStats) {
        self.with(|i| i.stats = s);
    }
    pub fn stats(&self) -> ServeStats {
        self.with(|i| i.stats.clone())
    }
    pub fn ttft(&self, seconds: f64) {
        self.with(|i| i.ttft.observe(seconds));
    }
    /// `tokens` tokens arrived `seconds` after the previous ones: one observation per token.
    pub fn itl(&self, seconds: f64, tokens: usize) {
        self.with(|i| (0..tokens).for_each(|_| i.itl.observe(seconds / tokens as f64)));
    }
    pub fn finished(&self, seconds: f64, stop: bool) {
        self.with(|i| {
            i.e2e.observe(seconds);
            if stop { i.success_stop += 1 } else { i.success_length += 1 }
        });
    }
    pub fn failed(&self) {
        self.with(|i| i.failed += 1);
    }
    pub fn rejected(&self) {
        self.with(|i| i.rejected += 1);
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        self.with(|i| {
            let s = &i.stats;
            let mut o = String::new();
            let mut g = |name: &str, kind: &str, help: &str, v: String| {
                let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
            };
            g("lserve_num_requests_running", "gauge", "Requests in the running batch.", s.running.to_string());
            g("lserve_num_requests_running_peak", "gauge", "The most requests that were in the running batch at once since start.", s.peak_running.to_string());
            g("lserve_num_requests_waiting", "gauge", "Requests queued (not yet admitted or preempted for recompute).", s.waiting.to_string());
            g("lserve_num_requests_swapped", "gauge", "Preempted requests whose KV is in the host tier.", s.swapped.to_string());
            let usage = if s.pages_total == 0 { 0.0 } else { 100.0 * s.pages_used as f64 / s.pages_total as f64 };
            g("lserve_kv_cache_usage_percent", "gauge", "KV cache pages in use, percent of the pool.", format!("{usage}"));
            g("lserve_kv_cache_pages_used", "gauge", "KV cache pages in use.", s.pages_used.to_string());
            g("lserve_kv_cache_pages_total", "gauge", "KV cache pages in the pool.", s.pages_total.to_string());
            g("lserve_host_swap_bytes", "gauge", "Bytes of swapped-out KV held in host memory.", s.host_bytes.to_string());
            g("lserve_prompt_tokens_total", "counter", "Prompt tokens of accepted requests.", s.prompt_tokens.to_string());
            g("lserve_generation_tokens_total", "counter", "Generated tokens.", s.generation_tokens.to_string());
            g("lserve_engine_steps_total", "counter", "Engine steps run.", s.steps.to_string());
            g("lserve_requests_cancelled_total", "counter", "Requests cancelled because the client went away.", s.cancelled.to_string());
            g("lserve_requests_rejected_total", "counter", "Requests refused because the queue was full.", i.rejected.to_string());
            g("lserve_requests_failed_total", "counter", "Requests that ended with a server-side error.", i.failed.to_string());
            let _ = writeln!(o, "# HELP lserve_preemptions_total Preemptions by how the KV was kept.\n# TYPE lserve_preemptions_total counter");
            let _ = writeln!(o, "lserve_preemptions_total{{mode=\"swap\"}} {}", s.preemptions_swap);
            let _ = writeln!(o, "lserve_preemptions_total{{mode=\"recompute\"}} {}", s.preemptions_recompute);
            let _ = writeln!(o, "# HELP lserve_request_success_total Finished requests by finish reason.\n# TYPE lserve_request_success_total counter");
            let _ = writeln!(o, "lserve_request_success_total{{finished_reason=\"stop\"}} {}", i.success_stop);
            let _ = writeln!(o, "lserve_request_success_total{{finished_reason=\"length\"}} {}", i.success_length);
            i.ttft.render(&mut o, "lserve_time_to_first_token_seconds", "Time from request arrival to its first token.");
            i.itl.render(&mut o, "lserve_inter_token_latency_seconds", "Time between consecutive tokens of a request.");
            i.e2e.render(&mut o, "lserve_e2e_request_latency_seconds", "Time from request arrival to its last token.");
            o
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_renders_cumulative_buckets() {
        let mut h = Histogram::new(&[0.1, 1.0]);
        for v in [0.05, 0.5, 0.7, 3.0] {
            h.observe(v);
        }
        let mut s = String::new();
        h.render(&mut s, "x", "help");
        assert!(s.contains("x_bucket{le=\"0.1\"} 1\nx_bucket{le=\"1\"} 3\nx_bucket{le=\"+Inf\"} 4\n"), "{s}");
        assert!(s.contains("x_count 4"));
    }
}
