//! The Chrome-trace timeline of `ffn train --timeline trace.json`: per rank (a trace "process") and
//! per step, complete events for `prepare`, `forward`, `backward`, each `allreduce` bucket (on the
//! communication thread), `wait` (the training thread blocked on communication after backward) and
//! `optimizer`. Every rank records in memory; rank 0 gathers the events and writes one JSON file that
//! chrome://tracing and Perfetto open.
//!
//! Timestamps are microseconds of the wall clock relative to rank 0's start, so ranks on one host
//! line up exactly (across hosts, up to their clock synchronisation).

use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use serde_json::{Value, json};

/// Trace thread of the training (compute) thread.
pub const COMPUTE: u32 = 0;
/// Trace thread of the communication thread.
pub const COMM: u32 = 1;

/// One complete ("X") event.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// Phase name: `prepare`, `forward`, `backward`, `allreduce`, `wait`, `optimizer`, ...
    pub name: &'static str,
    /// [`COMPUTE`] or [`COMM`].
    pub thread: u32,
    /// Start, µs since this rank's origin.
    pub start_us: f64,
    /// Duration in µs.
    pub dur_us: f64,
    /// Training step.
    pub step: u64,
    /// Extra arguments (bucket index, bytes).
    pub args: Value,
}

/// The events of one rank.
#[derive(Debug)]
pub struct Timeline {
    origin: Instant,
    /// Wall-clock µs since the Unix epoch at `origin`.
    origin_unix_us: f64,
    events: Vec<Event>,
}

impl Default for Timeline {
    fn default() -> Self {
        Self::new()
    }
}

impl Timeline {
    /// An empty timeline starting now.
    pub fn new() -> Self {
        let origin = Instant::now();
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64() * 1e6)
            .unwrap_or(0.0);
        Self {
            origin,
            origin_unix_us: unix,
            events: Vec::new(),
        }
    }

    /// Wall-clock µs since the Unix epoch at this timeline's origin.
    pub fn origin_unix_us(&self) -> f64 {
        self.origin_unix_us
    }

    fn us(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.origin).as_secs_f64() * 1e6
    }

    /// Records `name` from `start` to `end`.
    pub fn record(
        &mut self,
        name: &'static str,
        thread: u32,
        step: u64,
        start: Instant,
        end: Instant,
        args: Value,
    ) {
        let s = self.us(start);
        self.events.push(Event {
            name,
            thread,
            start_us: s,
            dur_us: (self.us(end) - s).max(0.0),
            step,
            args,
        });
    }

    /// This rank's events as trace JSON objects, with timestamps relative to `job_origin_unix_us`.
    pub fn to_trace_events(&self, rank: usize, job_origin_unix_us: f64) -> Vec<Value> {
        let shift = self.origin_unix_us - job_origin_unix_us;
        let mut out = vec![
            json!({"name": "process_name", "ph": "M", "pid": rank, "tid": COMPUTE, "args": {"name": format!("rank {rank}")}}),
            json!({"name": "process_sort_index", "ph": "M", "pid": rank, "tid": COMPUTE, "args": {"sort_index": rank}}),
            json!({"name": "thread_name", "ph": "M", "pid": rank, "tid": COMPUTE, "args": {"name": "compute"}}),
            json!({"name": "thread_name", "ph": "M", "pid": rank, "tid": COMM, "args": {"name": "communication"}}),
        ];
        for e in &self.events {
            let mut args = json!({"step": e.step});
            if let (Some(a), Value::Object(extra)) = (args.as_object_mut(), &e.args) {
                a.extend(extra.clone());
            }
            out.push(json!({
                "name": e.name, "cat": if e.thread == COMM { "comm" } else { "compute" }, "ph": "X",
                "ts": round3(e.start_us + shift), "dur": round3(e.dur_us), "pid": rank, "tid": e.thread,
                "args": args,
            }));
        }
        out
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Writes the trace file from every rank's events (index = rank).
pub fn write_trace(path: &Path, ranks: &[Vec<Value>], meta: Value) -> Result<()> {
    let events: Vec<&Value> = ranks.iter().flatten().collect();
    let doc = json!({ "traceEvents": events, "displayTimeUnit": "ms", "otherData": meta });
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let text = serde_json::to_string(&doc).context("encoding the timeline")?;
    std::fs::write(path, text).with_context(|| format!("writing the timeline {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn events_become_chrome_trace_json() {
        let mut t = Timeline::new();
        let a = Instant::now();
        let b = a + Duration::from_micros(1500);
        t.record("forward", COMPUTE, 3, a, b, Value::Null);
        t.record(
            "allreduce",
            COMM,
            3,
            b,
            b + Duration::from_micros(200),
            json!({"bucket": 1, "bytes": 400}),
        );
        let ev = t.to_trace_events(2, t.origin_unix_us() - 10.0);
        assert_eq!(ev.len(), 6);
        let x: Vec<&Value> = ev.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(x[0]["name"], "forward");
        assert_eq!(x[0]["pid"], 2);
        assert_eq!(x[0]["dur"], 1500.0);
        assert!(x[0]["ts"].as_f64().unwrap() >= 10.0);
        assert_eq!(x[1]["args"]["bucket"], 1);
        assert_eq!(x[1]["args"]["step"], 3);
        assert_eq!(x[1]["tid"], COMM);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/trace.json");
        write_trace(&p, &[ev.clone(), ev], json!({"ranks": 2})).unwrap();
        let back: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(back["traceEvents"].as_array().unwrap().len(), 12);
        assert_eq!(back["otherData"]["ranks"], 2);
    }
}
