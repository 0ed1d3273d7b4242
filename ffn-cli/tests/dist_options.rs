//! Learning-rate scaling, the timeline, the configuration check across processes, and clear errors
//! for bad data-parallel options.

mod support;

use serde_json::Value;
use std::process::Command;
use support::dist::*;
use support::*;

fn lr_column(out: &std::path::Path) -> Vec<f64> {
    std::fs::read_to_string(out.join("train_log.csv"))
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(8).unwrap().parse().unwrap())
        .collect()
}

#[test]
fn learning_rate_scales_with_ranks_after_warmup_and_the_timeline_shows_every_phase() {
    let dir = tempfile::tempdir().unwrap();
    let base = with(
        &set(&prepare(dir.path()), "--report-every", "1"),
        &["--batch-size", "1", "--max-steps", "4"],
    );
    let (o, so) = out_dir(dir.path(), "lin");
    let trace = dir.path().join("trace.json");
    let t = trace.display().to_string();
    let args = [
        "--out",
        &so,
        "--comm",
        "local",
        "--ranks",
        "2",
        "--lr-scaling-warmup",
        "2",
        "--timeline",
        &t,
        "--timeline-steps",
        "3",
        "--bucket-kib",
        "0",
    ];
    ok(&run(ffn(&with(&base, &args)), LIMIT), "linear");
    let lr = lr_column(&o);
    let want = [0.01, 0.015, 0.02, 0.02];
    assert!(
        lr.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-9),
        "{lr:?}"
    );
    let (o, so) = out_dir(dir.path(), "sqrt");
    ok(
        &run(
            ffn(&with(
                &base,
                &[
                    "--out",
                    &so,
                    "--comm",
                    "local",
                    "--ranks",
                    "4",
                    "--lr-scaling",
                    "sqrt",
                    "--lr-scaling-warmup",
                    "0",
                ],
            )),
            LIMIT,
        ),
        "sqrt",
    );
    assert!(lr_column(&o).iter().all(|a| (a - 0.02).abs() < 1e-9));

    // The trace: both ranks, steps 0..3, one allreduce per layer (5 layers at depth 2, bucket 0).
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let ev = doc["traceEvents"].as_array().unwrap();
    let x: Vec<&Value> = ev.iter().filter(|e| e["ph"] == "X").collect();
    for rank in 0..2 {
        for name in ["prepare", "forward", "backward", "wait", "optimizer"] {
            let n = x
                .iter()
                .filter(|e| e["pid"] == rank && e["name"] == name)
                .count();
            assert_eq!(n, 3, "rank {rank}: {name} events");
        }
        let ar: Vec<&&Value> = x
            .iter()
            .filter(|e| e["pid"] == rank && e["name"] == "allreduce")
            .collect();
        assert_eq!(ar.len(), 3 * 5, "rank {rank}: allreduce events");
        assert!(
            ar.iter()
                .all(|e| e["tid"] == 1 && e["args"]["bytes"].as_u64().unwrap() > 0)
        );
    }
    assert!(
        x.iter()
            .all(|e| e["args"]["step"].as_u64().unwrap() < 3 && e["dur"].as_f64().unwrap() >= 0.0)
    );
    assert_eq!(doc["otherData"]["ranks"], 2);
}

/// Rank processes started by hand (as a cluster launcher would), each with its own arguments.
fn rank_cmd(rank: usize, n: usize, port: u16, shm: &str, args: &[String]) -> Command {
    let mut c = Command::new(FFN);
    c.args(args)
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", n.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env("FFN_SHM_NAME", shm)
        .env("FFN_COMM_TOKEN", "dist-options-test-secret")
        .env("RAYON_NUM_THREADS", "1");
    c
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port()
}

#[test]
fn ranks_with_different_arguments_fail_naming_the_field_instead_of_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let base = prepare(dir.path());
    for backend in ["shm", "zmq"] {
        if backend == "zmq" && !cfg!(feature = "zmq") {
            continue;
        }
        let port = free_port();
        let shm = format!("ffn-test-cfg-{}-{port}", std::process::id());
        let (_, so) = out_dir(dir.path(), backend);
        let children: Vec<_> = (0..2)
            .map(|r| {
                let lr = if r == 0 { "0.01" } else { "0.03" };
                let args = with(
                    &set(&base, "--learning-rate", lr),
                    &[
                        "--out",
                        &so,
                        "--max-steps",
                        "3",
                        "--comm",
                        backend,
                        "--comm-timeout",
                        "20",
                    ],
                );
                let mut c = rank_cmd(r, 2, port, &shm, &args);
                c.stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped());
                c.spawn().unwrap()
            })
            .collect();
        for (r, c) in children.into_iter().enumerate() {
            let f = finish(c, LIMIT, &format!("{backend} rank {r}"));
            assert_ne!(f.code, 0, "{backend} rank {r} should fail");
            assert!(
                f.stderr
                    .contains("config.learning_rate: rank 0 has \"0.01\", rank 1 has \"0.03\""),
                "{backend} rank {r}: {}",
                f.stderr
            );
        }
    }
}

#[test]
fn bad_data_parallel_options_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let base = prepare(dir.path());
    let (_, so) = out_dir(dir.path(), "x");
    for (extra, want) in [
        (vec!["--ranks", "2"], "--ranks 2 needs --comm local"),
        (
            vec!["--comm", "shm", "--ranks", "2"],
            "only for --comm local",
        ),
        (vec!["--comm", "nccl"], "unknown communicator backend"),
        (
            vec!["--comm", "local", "--ranks", "2", "--comm-timeout=-1"],
            "--comm-timeout",
        ),
    ] {
        let mut e = vec!["--out", so.as_str(), "--max-steps", "1"];
        e.extend(extra.iter().copied());
        let f = run(ffn(&with(&base, &e)), LIMIT);
        assert_ne!(f.code, 0, "{extra:?}");
        assert!(f.stderr.contains(want), "{extra:?}: {}", f.stderr);
    }
}

#[test]
fn bench_scaling_reports_every_rank_count_and_a_projection() {
    for backend in ["local", "shm"] {
        let args: Vec<String> = [
            "bench",
            "scaling",
            "--backend",
            backend,
            "--ranks",
            "1,2",
            "--depth",
            "1",
            "--fov",
            "5",
            "--features",
            "2",
            "--batch",
            "1",
            "--steps",
            "2",
            "--json",
        ]
        .map(String::from)
        .to_vec();
        let f = run(ffn(&args), LIMIT);
        ok(&f, &format!("bench scaling --backend {backend}"));
        let v: Value =
            serde_json::from_str(f.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", f.stdout));
        let runs = v["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0]["efficiency"], 1.0);
        for r in runs {
            assert!(
                r["step_s"].as_f64().unwrap() > 0.0 && r["examples_per_s"].as_f64().unwrap() > 0.0,
                "{r}"
            );
            assert!(r["exposed_comm_s"].as_f64().unwrap() >= 0.0);
        }
        let proj = v["projection"].as_array().unwrap();
        assert_eq!(
            proj.iter()
                .map(|p| p["ranks"].as_u64().unwrap())
                .collect::<Vec<_>>(),
            [16, 32, 64, 128, 256, 512, 1024, 2048]
        );
        assert!(
            proj.iter()
                .all(|p| (0.0..=1.0).contains(&p["efficiency"].as_f64().unwrap()))
        );
        assert!(
            v["comm_model"]["formula"]
                .as_str()
                .unwrap()
                .contains("2(P-1)")
        );
    }
}
