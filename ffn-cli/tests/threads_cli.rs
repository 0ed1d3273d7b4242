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

/// The SIMD kernels a process runs: the widest this CPU has, capped by `--simd` or `FFN_SIMD`
/// (the flag wins); a level the CPU lacks runs the widest one below it; a bad name is an error
/// naming the variable.
#[test]
fn simd_cap_comes_from_the_flag_or_the_environment() {
    let report = |args: &[&str], vars: &[(&str, &str)]| {
        let out = Command::new(FFN)
            .args(args)
            .args(["selfcheck", "--json"])
            .env_remove("FFN_SIMD")
            .envs(vars.iter().copied())
            .output()
            .expect("run ffn selfcheck");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "selfcheck failed: {stderr}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
        v
    };
    let free = report(&[], &[]);
    let supported: Vec<String> = free["simd_supported"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect();
    eprintln!("this CPU runs {supported:?}");
    assert_eq!(free["simd"], *supported.last().unwrap());
    assert_eq!(report(&["--simd", "portable"], &[])["simd"], "portable");
    assert_eq!(report(&[], &[("FFN_SIMD", "portable")])["simd"], "portable");
    let flag_wins = report(&["--simd", "portable"], &[("FFN_SIMD", "avx512")]);
    assert_eq!(flag_wins["simd"], "portable");
    let widest_below = |cap: &str| {
        let rank = |s: &str| ["portable", "avx2", "avx512"].iter().position(|x| *x == s);
        supported
            .iter()
            .rfind(|s| rank(s) <= rank(cap))
            .unwrap()
            .clone()
    };
    for cap in ["avx2", "avx512"] {
        assert_eq!(report(&["--simd", cap], &[])["simd"], widest_below(cap));
    }
    let out = Command::new(FFN)
        .args(["selfcheck"])
        .env("FFN_SIMD", "sse9")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("FFN_SIMD") && err.contains("`sse9`"),
        "{err}"
    );
}
