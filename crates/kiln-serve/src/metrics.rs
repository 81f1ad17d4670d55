//! Counters and gauges the handlers and the engine update, rendered as Prometheus text
//! for `GET /metrics`. The queue depth is also the queue's admission count: a handler
//! takes a place with [`Metrics::try_enqueue`] and the engine frees it when the request
//! starts (or its client has gone).

use std::collections::VecDeque;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Generated tokens/s are averaged over this window.
const RATE_WINDOW: Duration = Duration::from_secs(10);

/// The server's metrics (see the module docs).
#[derive(Default)]
pub struct Metrics {
    /// Requests accepted into the queue.
    pub requests: AtomicU64,
    /// Requests answered 400 (bad input).
    pub invalid: AtomicU64,
    /// Requests answered 503 (queue full).
    pub rejected: AtomicU64,
    /// Prompt tokens of the requests that started.
    pub prompt_tokens: AtomicU64,
    /// Tokens generated.
    pub generated_tokens: AtomicU64,
    /// Requests waiting to start.
    pub queued: AtomicUsize,
    /// Sequences in prefill or decode.
    pub running: AtomicUsize,
    /// KV blocks held by sequences.
    pub kv_blocks_used: AtomicUsize,
    /// KV blocks in the pool.
    pub kv_blocks_total: AtomicUsize,
    /// When each decode step ended and how many tokens it made, over the last `RATE_WINDOW`.
    steps: Mutex<VecDeque<(Instant, usize)>>,
}

impl Metrics {
    /// Takes a place in a queue of `capacity`, or says it is full.
    pub fn try_enqueue(&self, capacity: usize) -> bool {
        self.queued.fetch_update(Relaxed, Relaxed, |q| (q < capacity).then_some(q + 1)).is_ok()
    }

    /// Records a step that generated `tokens` tokens.
    pub fn record_step(&self, tokens: usize) {
        self.generated_tokens.fetch_add(tokens as u64, Relaxed);
        let now = Instant::now();
        let mut steps = self.steps.lock().expect("metrics lock");
        steps.push_back((now, tokens));
        while steps.front().is_some_and(|&(t, _)| now - t > RATE_WINDOW) {
            steps.pop_front();
        }
    }

    /// Tokens generated per second over the last `RATE_WINDOW`.
    fn tokens_per_sec(&self) -> f64 {
        let steps = self.steps.lock().expect("metrics lock");
        let recent: usize = steps.iter().filter(|&&(t, _)| t.elapsed() <= RATE_WINDOW).map(|&(_, n)| n).sum();
        recent as f64 / RATE_WINDOW.as_secs_f64()
    }

    /// Prometheus text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut put = |name: &str, kind: &str, help: &str, value: String| {
            let _ =
                writeln!(out, "# HELP kiln_{name} {help}\n# TYPE kiln_{name} {kind}\nkiln_{name} {value}");
        };
        let n = |a: &AtomicU64| a.load(Relaxed).to_string();
        let g = |a: &AtomicUsize| a.load(Relaxed).to_string();
        put("requests_total", "counter", "Requests accepted into the queue.", n(&self.requests));
        put("requests_invalid_total", "counter", "Requests refused as bad input (400).", n(&self.invalid));
        put(
            "requests_rejected_total",
            "counter",
            "Requests refused with a full queue (503).",
            n(&self.rejected),
        );
        put("prompt_tokens_total", "counter", "Prompt tokens of started requests.", n(&self.prompt_tokens));
        put("generated_tokens_total", "counter", "Tokens generated.", n(&self.generated_tokens));
        put(
            "generated_tokens_per_second",
            "gauge",
            "Tokens generated per second over the last 10 s.",
            format!("{:.3}", self.tokens_per_sec()),
        );
        put("queue_depth", "gauge", "Requests waiting to start.", g(&self.queued));
        put("running_sequences", "gauge", "Sequences in prefill or decode.", g(&self.running));
        put("kv_blocks_in_use", "gauge", "KV cache blocks held by sequences.", g(&self.kv_blocks_used));
        put("kv_blocks_total", "gauge", "KV cache blocks in the pool.", g(&self.kv_blocks_total));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_places_are_bounded_and_rendered() {
        let m = Metrics::default();
        assert!(m.try_enqueue(2) && m.try_enqueue(2) && !m.try_enqueue(2));
        m.record_step(3);
        let text = m.render();
        assert!(text.contains("kiln_queue_depth 2\n"), "{text}");
        assert!(text.contains("kiln_generated_tokens_total 3\n"), "{text}");
        assert!(text.contains("kiln_generated_tokens_per_second 0.300\n"), "{text}");
    }
}
