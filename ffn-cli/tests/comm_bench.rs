//! `ffn bench comm`: one JSON row per size from rank 0, on threads and on self-started shm ranks.

mod support;

use std::process::Command;
use std::time::Duration;
use support::*;

#[test]
fn bench_comm_reports_every_size_on_local_and_shm() {
    for backend in ["local", "shm"] {
        let mut cmd = Command::new(FFN);
        cmd.args(["bench", "comm", "--backend", backend, "--ranks", "2"])
            .args(["--sizes", "4,64K", "--seconds", "0.02", "--json"]);
        let f = run_named(cmd, Duration::from_secs(120), backend);
        ok(&f, backend);
        let rows = json_lines(&f.stdout);
        let bytes: Vec<u64> = rows.iter().map(|r| r["bytes"].as_u64().unwrap()).collect();
        assert_eq!(bytes, [4, 65536], "{backend}: {}", f.stdout);
        for r in &rows {
            assert_eq!(r["ranks"], 2);
            assert!(r["time_s"].as_f64().unwrap() > 0.0 && r["iters"].as_u64().unwrap() >= 3);
            assert!(r["busbw_gbs"].as_f64().unwrap() > 0.0);
        }
    }
}
