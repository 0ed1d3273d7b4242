//! `--resume` of data-parallel runs: on the same number of ranks it continues bitwise as if never
//! stopped (every rank's example state is in rank 0's checkpoint); on another number of ranks (and
//! from / to a single-rank run) it continues from the same weights and optimiser state.

mod dist_support;

use dist_support::*;
use std::path::Path;

fn common(dir: &Path) -> Vec<String> {
    // Deltas 2: examples span several steps, so the per-rank example states matter on resume.
    with(&prepare(dir), &["--batch-size", "2", "--checkpoint-every", "3"])
}

fn train(base: &[String], out: &str, extra: &[&str]) -> Finished {
    let mut e = vec!["--out", out];
    e.extend(extra);
    let f = run(ffn(&with(base, &e)), LIMIT);
    ok(&f, &format!("train {extra:?}"));
    f
}

#[test]
fn resume_on_the_same_number_of_ranks_is_bitwise_exact() {
    let dir = tempfile::tempdir().unwrap();
    let base = common(dir.path());
    let (a, sa) = out_dir(dir.path(), "a");
    let (b, sb) = out_dir(dir.path(), "b");
    train(&base, &sa, &["--max-steps", "8", "--comm", "local", "--ranks", "2"]);
    train(&base, &sb, &["--max-steps", "4", "--comm", "local", "--ranks", "2"]);
    train(&base, &sb, &["--max-steps", "8", "--comm", "local", "--ranks", "2", "--resume"]);
    let (ca, cb) = (checkpoint(&a, 8), checkpoint(&b, 8));
    assert_bitwise(&cb.params, &ca.params, "weights after resume");
    assert_eq!(ca.optimizer.len(), cb.optimizer.len());
    for ((na, va), (nb, vb)) in ca.optimizer.iter().zip(&cb.optimizer) {
        assert_eq!(na, nb);
        assert_bitwise(vb, va, na);
    }
    assert!(ca.optimizer.iter().any(|(n, _)| n == "trainer_state.rank1"));
    assert_eq!(ca.training_config["distributed"]["world_size"], 2);
    // The resumed run's log continues the first one's rows (loss and metrics agree).
    let rows = |d: &Path| -> Vec<String> {
        std::fs::read_to_string(d.join("train_log.csv"))
            .unwrap()
            .lines()
            .map(|l| l.split(',').take(7).collect::<Vec<_>>().join(","))
            .collect()
    };
    assert_eq!(rows(&a), rows(&b));
}

#[test]
fn resume_on_another_number_of_ranks_continues_from_the_same_weights() {
    let dir = tempfile::tempdir().unwrap();
    let base = common(dir.path());
    let (o, so) = out_dir(dir.path(), "o");
    train(&base, &so, &["--max-steps", "3", "--comm", "local", "--ranks", "2"]);
    let c3 = checkpoint(&o, 3);
    // 2 -> 3 ranks.
    let f = train(&base, &so, &["--max-steps", "6", "--comm", "local", "--ranks", "3", "--resume"]);
    assert!(f.stderr.contains("resuming a 2-rank checkpoint on 3 ranks"), "{}", f.stderr);
    let c6 = checkpoint(&o, 6);
    assert_eq!(c6.training_config["distributed"]["world_size"], 3);
    assert_eq!(c6.optimizer.iter().filter(|(n, _)| n.starts_with("trainer_state")).count(), 3);
    assert!(rel_dist(&c6.params, &c3.params) > 0.0, "training went on");
    assert!(rel_dist(&c6.params, &c3.params) < 0.5, "from the saved weights, not a fresh start");
    // 3 -> 1 rank (no --comm), then 1 -> 2 ranks over shm processes.
    train(&base, &so, &["--max-steps", "9", "--resume"]);
    let c9 = checkpoint(&o, 9);
    assert!(c9.training_config.get("distributed").is_none());
    let f = run(launch(2, &with(&base, &["--out", &so, "--max-steps", "12", "--comm", "shm", "--resume"])), LIMIT);
    ok(&f, "1 -> 2 ranks over shm");
    assert_eq!(checkpoint(&o, 12).training_config["distributed"]["world_size"], 2);
}
