//! Data-parallel equivalence: N ranks with batch b for K steps give the weights of one rank with
//! batch N*b on the same examples (to 1e-5 relative), and every backend gives the same bits.
//!
//! `--deltas 0,0,0` makes every example one FOV, so all example generators start new examples
//! together and N ranks read exactly the coordinates (and RNG streams) that one rank of batch N*b
//! reads; `--lr-scaling none` keeps the learning rate of the single rank.

mod support;

use std::path::Path;
use support::dist::*;
use support::*;

const STEPS: u64 = 4;
const BATCH: usize = 2;

fn common(dir: &Path) -> Vec<String> {
    with(
        &set(&prepare(dir), "--deltas", "0,0,0"),
        &["--max-steps", &STEPS.to_string(), "--lr-scaling", "none"],
    )
}

/// One rank with batch n*b: the reference.
fn reference(dir: &Path, base: &[String], n: usize) -> ffn_io::checkpoint::Checkpoint {
    let (p, s) = out_dir(dir, &format!("ref{n}"));
    ok(
        &run(
            ffn(&with(
                base,
                &["--out", &s, "--batch-size", &(n * BATCH).to_string()],
            )),
            LIMIT,
        ),
        "reference",
    );
    checkpoint(&p, STEPS)
}

/// Compares a distributed run with the reference and returns its parameters.
fn check(
    name: &str,
    dist: &ffn_io::checkpoint::Checkpoint,
    reference: &ffn_io::checkpoint::Checkpoint,
) -> Vec<f32> {
    assert_eq!(dist.step, STEPS);
    let rel = rel_dist(&dist.params, &reference.params);
    eprintln!("{name}: relative distance to one rank of batch N*b: {rel:.3e}");
    assert!(
        rel <= 1e-5,
        "{name}: parameters differ from the single-rank run by {rel:e} (relative)"
    );
    let opt = |c: &ffn_io::checkpoint::Checkpoint| -> Vec<(String, Vec<f32>)> {
        c.optimizer
            .iter()
            .filter(|(n, _)| !n.starts_with("trainer_state"))
            .cloned()
            .collect()
    };
    let (a, b) = (opt(dist), opt(reference));
    assert_eq!(a.len(), 1, "momentum keeps one buffer");
    assert_eq!(a[0].0, b[0].0);
    // The velocity is a sum of raw gradients, whose summation order differs between one batch of
    // N*b and N averaged batches of b: a looser bound than for the weights.
    let rel_m = rel_dist(&a[0].1, &b[0].1);
    assert!(
        rel_m <= 1e-4,
        "{name}: optimiser state differs by {rel_m:e}"
    );
    // The weights moved: the comparison is not between two untrained networks.
    assert!(
        reference
            .params
            .iter()
            .zip(&dist.params)
            .any(|(a, _)| *a != 0.0)
    );
    dist.params.clone()
}

fn local_run(dir: &Path, base: &[String], n: usize) -> ffn_io::checkpoint::Checkpoint {
    let (p, s) = out_dir(dir, &format!("local{n}"));
    let args = with(
        base,
        &[
            "--out",
            &s,
            "--batch-size",
            &BATCH.to_string(),
            "--comm",
            "local",
            "--ranks",
            &n.to_string(),
        ],
    );
    ok(
        &run(ffn(&args), LIMIT),
        &format!("--comm local --ranks {n}"),
    );
    checkpoint(&p, STEPS)
}

#[test]
fn local_and_shm_ranks_match_one_big_batch_and_each_other_bitwise() {
    let dir = tempfile::tempdir().unwrap();
    let base = common(dir.path());
    for n in [2, 3] {
        let r = reference(dir.path(), &base, n);
        let local = local_run(dir.path(), &base, n);
        let local_p = check(&format!("local x{n}"), &local, &r);
        let (p, s) = out_dir(dir.path(), &format!("shm{n}"));
        let args = with(
            &base,
            &[
                "--out",
                &s,
                "--batch-size",
                &BATCH.to_string(),
                "--comm",
                "shm",
            ],
        );
        ok(
            &run(launch(n, &args), LIMIT),
            &format!("ffn launch -n {n} -- train --comm shm"),
        );
        let shm = checkpoint(&p, STEPS);
        let shm_p = check(&format!("shm x{n}"), &shm, &r);
        assert_bitwise(&shm_p, &local_p, &format!("shm vs local, {n} ranks"));
        // Rank 0 alone wrote: one log, one curve; every rank's example state is in the checkpoint.
        assert!(p.join("train_log.csv").exists() && p.join("training_curve.png").exists());
        let states = shm
            .optimizer
            .iter()
            .filter(|(n, _)| n.starts_with("trainer_state"))
            .count();
        assert_eq!(states, n);
    }
}

#[test]
fn overlap_bucket_size_and_backend_do_not_change_a_bit() {
    let dir = tempfile::tempdir().unwrap();
    let base = common(dir.path());
    let local = local_run(dir.path(), &base, 2);
    for extra in [
        vec!["--no-overlap"],
        vec!["--bucket-kib", "0"],
        vec!["--bucket-kib", "100000"],
    ] {
        let (p, s) = out_dir(dir.path(), &format!("v{}", extra.join("")));
        let mut e = vec![
            "--out",
            s.as_str(),
            "--batch-size",
            "2",
            "--comm",
            "local",
            "--ranks",
            "2",
        ];
        e.extend(extra.iter().copied());
        ok(&run(ffn(&with(&base, &e)), LIMIT), &format!("{extra:?}"));
        assert_bitwise(
            &checkpoint(&p, STEPS).params,
            &local.params,
            &format!("{extra:?}"),
        );
    }
}

#[cfg(feature = "zmq")]
#[test]
fn zmq_ranks_match_one_big_batch() {
    let dir = tempfile::tempdir().unwrap();
    let base = common(dir.path());
    for n in [2, 3] {
        let r = reference(dir.path(), &base, n);
        let local = local_run(dir.path(), &base, n);
        let (p, s) = out_dir(dir.path(), &format!("zmq{n}"));
        let args = with(
            &base,
            &[
                "--out",
                &s,
                "--batch-size",
                &BATCH.to_string(),
                "--comm",
                "zmq",
            ],
        );
        ok(
            &run(launch(n, &args), LIMIT),
            &format!("ffn launch -n {n} -- train --comm zmq"),
        );
        let zp = check(&format!("zmq x{n}"), &checkpoint(&p, STEPS), &r);
        assert_bitwise(&zp, &local.params, &format!("zmq vs local, {n} ranks"));
    }
}

#[cfg(feature = "mpi")]
#[test]
fn mpi_ranks_under_mpirun_match_one_big_batch_without_a_comm_flag() {
    let dir = tempfile::tempdir().unwrap();
    let base = common(dir.path());
    for n in [2, 3] {
        let r = reference(dir.path(), &base, n);
        let local = local_run(dir.path(), &base, n);
        let (p, s) = out_dir(dir.path(), &format!("mpi{n}"));
        // No --comm: MPI is detected from mpirun's environment.
        let args = with(&base, &["--out", &s, "--batch-size", &BATCH.to_string()]);
        let f = run(mpirun(n, &args), LIMIT);
        ok(&f, &format!("mpirun -n {n} ffn train"));
        let mp = check(&format!("mpi x{n}"), &checkpoint(&p, STEPS), &r);
        assert_bitwise(&mp, &local.params, &format!("mpi vs local, {n} ranks"));
        // Only rank 0 printed the summary.
        assert_eq!(f.stdout.matches("checkpoint:").count(), 1, "{}", f.stdout);
    }
}
