//! The kernel thread count of `ffn` processes: all cores alone, a share of the cores per rank
//! when a launcher says how many ranks share the node, `RAYON_NUM_THREADS` when set; a malformed
//! setting is a one-line error.

use std::process::Command;

const FFN: &str = env!("CARGO_BIN_EXE_ffn");

/// `ffn selfcheck --json` with `vars` set (and the launcher variables of the test's own
/// environment removed); returns (success, stdout, stderr).
fn selfcheck(vars: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new(FFN);
    cmd.args(["selfcheck", "--json"]);
    for v in [
        "RAYON_NUM_THREADS",
        "LOCAL_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
        "MPI_LOCALNRANKS",
    ] {
        cmd.env_remove(v);
    }
    cmd.envs(vars.iter().copied());
    let out = cmd.output().expect("run ffn selfcheck");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn threads(vars: &[(&str, &str)]) -> usize {
    let (ok, stdout, stderr) = selfcheck(vars);
    assert!(ok, "selfcheck failed: {stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    v["threads"].as_u64().expect("threads") as usize
}

#[test]
fn ranks_sharing_a_node_split_its_cores() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(threads(&[]), cores);
    assert_eq!(threads(&[("LOCAL_WORLD_SIZE", "2")]), (cores / 2).max(1));
    assert_eq!(threads(&[("OMPI_COMM_WORLD_LOCAL_SIZE", "64")]), 1);
    assert_eq!(
        threads(&[("RAYON_NUM_THREADS", "3"), ("LOCAL_WORLD_SIZE", "2")]),
        3
    );
    let (ok, _, stderr) = selfcheck(&[("LOCAL_WORLD_SIZE", "many")]);
    assert!(!ok, "a malformed LOCAL_WORLD_SIZE was accepted");
    assert!(
        stderr.contains("LOCAL_WORLD_SIZE") && stderr.contains("many"),
        "{stderr}"
    );
}
