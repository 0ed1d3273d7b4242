//! Ranks on separate hosts: two network namespaces joined by a veth link ([`support::hosts`]), each
//! host with its own address and its own `ffn launch --nnodes 2 --node-rank H`, ZeroMQ between
//! them with the job secret. Training over two hosts gives the bits of the same ranks on one host,
//! and a host whose link goes down mid-run ends the job with an error naming the lost rank within
//! the communication timeout. Needs root and iproute2 (CI sets `FFN_REQUIRE_NETNS=1`).

#![cfg(feature = "zmq")]

mod support;

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use support::dist::*;
use support::hosts::Hosts;
use support::*;

/// Host 0's rendezvous port (each pair of namespaces is a network of its own).
const PORT: &str = "29517";
const TOKEN: &str = "multihost-test-secret-0123456789";

/// `ffn launch --nnodes 2 --node-rank h ... -n ranks -- args` inside host `h`.
fn host_launch(
    hosts: &Hosts,
    h: usize,
    ranks: usize,
    launch_args: &[&str],
    args: &[String],
) -> Command {
    let mut c = hosts.command(h, FFN);
    c.args(["launch", "--nnodes", "2", "--node-rank", &h.to_string()])
        .args(["--master-addr", &hosts.addrs[0], "--master-port", PORT])
        .args(["-n", &ranks.to_string(), "--timeout", "200"])
        .args(launch_args)
        .arg("--")
        .args(args)
        .env("FFN_COMM_TOKEN", TOKEN)
        .env("FFN_COMM_BIND", &hosts.addrs[h])
        .env("RAYON_NUM_THREADS", "1");
    c
}

/// Starts both hosts' launchers.
fn start_job(hosts: &Hosts, ranks: usize, args: &[String]) -> Vec<Child> {
    (0..2)
        .map(|h| spawn(host_launch(hosts, h, ranks, &[], args)))
        .collect()
}

fn train_args(dir: &Path, out: &str, comm: &str, extra: &[&str]) -> Vec<String> {
    let base = with(
        &prepare(dir),
        &["--out", out, "--batch-size", "1", "--comm", comm],
    );
    with(&base, extra)
}

#[test]
fn zmq_ranks_on_two_hosts_train_the_bits_of_the_same_ranks_on_one_host() {
    let Some(hosts) = Hosts::pair("zmq_ranks_on_two_hosts") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (p, s) = out_dir(dir.path(), "hosts");
    let job = start_job(
        &hosts,
        2,
        &train_args(dir.path(), &s, "zmq", &["--max-steps", "4"]),
    );
    for (h, child) in job.into_iter().enumerate() {
        ok(
            &finish(child, LIMIT, &format!("host {h}")),
            &format!("host {h} of 2"),
        );
    }
    let (lp, ls) = out_dir(dir.path(), "local");
    let local = train_args(
        dir.path(),
        &ls,
        "local",
        &["--max-steps", "4", "--ranks", "4"],
    );
    ok(&run(ffn(&local), LIMIT), "4 local ranks");
    let (two_hosts, one_host) = (checkpoint(&p, 4), checkpoint(&lp, 4));
    assert_eq!(
        two_hosts
            .optimizer
            .iter()
            .filter(|(n, _)| n.starts_with("trainer_state"))
            .count(),
        4
    );
    assert_bitwise(
        &two_hosts.params,
        &one_host.params,
        "2 hosts x 2 zmq ranks vs 4 local ranks",
    );
}

#[test]
fn a_host_whose_link_goes_down_ends_the_job_with_an_error_naming_the_lost_rank() {
    let Some(hosts) = Hosts::pair("a_host_whose_link_goes_down") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (p, s) = out_dir(dir.path(), "cut");
    let timeout_s = 5;
    let args = train_args(
        dir.path(),
        &s,
        "zmq",
        &[
            "--max-steps",
            "1000000",
            "--checkpoint-every",
            "5",
            "--comm-timeout",
            &timeout_s.to_string(),
        ],
    );
    let mut job = start_job(&hosts, 1, &args);
    wait_for_checkpoints(&mut job, &p, 1);
    hosts.cut_link(1);
    let cut = Instant::now();
    for (h, child) in job.into_iter().enumerate() {
        let f = finish(child, LIMIT, &format!("host {h} after the link went down"));
        let other = 1 - h;
        assert_ne!(f.code, 0, "host {h} must fail: {}", f.stderr);
        assert!(
            f.stderr.contains(&format!("rank {other}"))
                || f.stderr.contains(&format!("rank(s) [{other}]")),
            "host {h}'s error names rank {other}: {}",
            f.stderr
        );
        // Each launcher names its rank by its place in the whole job.
        assert!(
            f.stderr.contains(&format!("ffn launch: rank {h} failed")),
            "host {h}: {}",
            f.stderr
        );
        eprintln!(
            "host {h} ended {:.1} s after the cut: {}",
            cut.elapsed().as_secs_f64(),
            f.stderr.lines().last().unwrap_or("")
        );
    }
    // Within the timeout and the time the last step takes, never a hang.
    assert!(
        cut.elapsed() < Duration::from_secs(3 * timeout_s + 15),
        "the job took {:?} to end after the link went down",
        cut.elapsed()
    );
}

#[test]
fn a_host_launcher_without_the_shared_secret_or_master_is_an_error_naming_it() {
    let no_token = Command::new(FFN)
        .args([
            "launch",
            "--nnodes",
            "2",
            "--node-rank",
            "1",
            "--master-addr",
            "10.0.0.1",
            "-n",
            "1",
            "--",
            "inspect",
        ])
        .env_remove("FFN_COMM_TOKEN")
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&no_token.stderr);
    assert!(
        !no_token.status.success() && e.contains("FFN_COMM_TOKEN") && e.contains("<unset>"),
        "{e}"
    );
    for (args, needle) in [
        (vec!["--nnodes", "2"], "--master-addr"),
        (
            vec![
                "--nnodes",
                "2",
                "--node-rank",
                "2",
                "--master-addr",
                "10.0.0.1",
            ],
            "--node-rank 2",
        ),
        (
            vec!["--nnodes", "2", "--master-addr", "0.0.0.0"],
            "not a wildcard",
        ),
        (vec!["--node-rank", "1"], "--node-rank 1"),
    ] {
        let out = Command::new(FFN)
            .arg("launch")
            .args(&args)
            .args(["-n", "1", "--", "inspect"])
            .env("FFN_COMM_TOKEN", TOKEN)
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && e.contains(needle), "{args:?}: {e}");
    }
}

#[test]
fn hier_ranks_on_two_hosts_train_the_same_bits_every_run_and_stay_near_the_flat_order() {
    let Some(hosts) = Hosts::pair("hier_ranks_on_two_hosts") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut runs = Vec::new();
    for run_index in 0..2 {
        let (p, s) = out_dir(dir.path(), &format!("hier{run_index}"));
        let job = start_job(
            &hosts,
            2,
            &train_args(dir.path(), &s, "hier", &["--max-steps", "4"]),
        );
        for (h, child) in job.into_iter().enumerate() {
            ok(
                &finish(child, LIMIT, &format!("host {h}")),
                &format!("hier host {h}, run {run_index}"),
            );
        }
        runs.push(checkpoint(&p, 4));
    }
    assert_bitwise(
        &runs[0].params,
        &runs[1].params,
        "hier on 2 hosts x 2 ranks, two runs",
    );
    let (lp, ls) = out_dir(dir.path(), "flat");
    let flat = train_args(
        dir.path(),
        &ls,
        "local",
        &["--max-steps", "4", "--ranks", "4"],
    );
    ok(&run(ffn(&flat), LIMIT), "4 local ranks");
    let rel = rel_dist(&runs[0].params, &checkpoint(&lp, 4).params);
    eprintln!("hier (2 hosts x 2) vs flat rank order after 4 steps: relative distance {rel:.3e}");
    assert!(rel <= 1e-5, "hier differs from the flat order by {rel:e}");
}
