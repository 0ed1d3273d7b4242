//! A rank killed in the middle of data-parallel training: the others exit with an error naming it
//! within the communication timeout, and the last checkpoint is intact and resumable.

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::dist::*;
use support::*;

#[test]
fn a_killed_rank_stops_the_others_and_the_last_checkpoint_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let base = with(
        &prepare(dir.path()),
        &[
            "--batch-size",
            "1",
            "--checkpoint-every",
            "5",
            "--keep-checkpoints",
            "2",
        ],
    );
    let (out, so) = out_dir(dir.path(), "run");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let shm = format!("ffn-test-kill-{}-{port}", std::process::id());
    let args = with(
        &base,
        &[
            "--out",
            &so,
            "--max-steps",
            "1000000",
            "--comm",
            "shm",
            "--comm-timeout",
            "4",
        ],
    );
    let mut children: Vec<_> = (0..2)
        .map(|r| {
            let mut c = Command::new(FFN);
            c.args(&args)
                .env("RANK", r.to_string())
                .env("WORLD_SIZE", "2")
                .env("MASTER_PORT", port.to_string())
                .env("FFN_SHM_NAME", &shm)
                .env("RAYON_NUM_THREADS", "1")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            c.spawn().unwrap()
        })
        .collect();
    // Wait for a checkpoint or two, then kill rank 1.
    wait_for_checkpoints(&mut children, &out, 2);
    let ckpts = out.join("checkpoints");
    let mut rank1 = children.pop().unwrap();
    rank1.kill().unwrap();
    let _ = rank1.wait();
    let killed = Instant::now();
    let f = finish(
        children.pop().unwrap(),
        LIMIT,
        "rank 0 after rank 1 was killed",
    );
    assert_ne!(f.code, 0, "rank 0 must fail: {}", f.stderr);
    assert!(
        killed.elapsed() < Duration::from_secs(30),
        "rank 0 took {:?} to notice",
        killed.elapsed()
    );
    assert!(
        f.stderr.contains("rank 1") || f.stderr.contains("peer"),
        "the error names the lost peer: {}",
        f.stderr
    );
    // The newest checkpoint is whole and loads; training resumes from it, on 2 ranks and on 1.
    let (step, path) = ffn_io::checkpoint::list_checkpoints(&ckpts)
        .unwrap()
        .pop()
        .unwrap();
    let ck = ffn_io::checkpoint::load_checkpoint(&path).unwrap();
    assert_eq!(ck.step, step);
    let two = with(
        &base,
        &[
            "--out",
            &so,
            "--max-steps",
            &(step + 2).to_string(),
            "--resume",
            "--comm",
            "local",
            "--ranks",
            "2",
        ],
    );
    ok(&run(ffn(&two), LIMIT), "resume on 2 ranks");
    let one = with(
        &base,
        &[
            "--out",
            &so,
            "--max-steps",
            &(step + 4).to_string(),
            "--resume",
        ],
    );
    ok(&run(ffn(&one), LIMIT), "resume on 1 rank");
    assert_eq!(checkpoint(&out, step + 4).step, step + 4);
}
