//! Killing a process while it writes checkpoints leaves the previous checkpoint loadable.
//!
//! The test starts this test binary again as a child running the ignored `child_writer` helper, which
//! saves checkpoints in a loop; the parent kills it (SIGKILL) at varying moments and then loads what
//! is on disk.

use ffn_core::model_spec::ModelConfig;
use ffn_io::checkpoint::{
    Checkpoint, latest_checkpoint, list_checkpoints, load_checkpoint, save_checkpoint_in_dir,
};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const DIR_VAR: &str = "FFN_IO_CRASH_TEST_DIR";

/// The checkpoint of `step`: every value derived from the step, so a loaded file can be verified.
fn checkpoint_for(step: u64) -> Checkpoint {
    let model = ModelConfig {
        depth: 12,
        ..ModelConfig::default()
    };
    let params: Vec<f32> = (0..model.num_params())
        .map(|i| (i as u64 ^ step) as f32)
        .collect();
    Checkpoint {
        model,
        optimizer: vec![("velocity".into(), vec![step as f32; 1000])],
        params,
        step,
        rng_state: [step, step + 1, step + 2, step + 3],
        training_config: serde_json::json!({ "step_written": step }),
    }
}

/// Helper run only as the child of `killed_writer_leaves_a_loadable_checkpoint`.
#[test]
#[ignore = "helper: started by killed_writer_leaves_a_loadable_checkpoint"]
fn child_writer() {
    let dir = std::env::var(DIR_VAR).expect("child_writer is started by the crash test");
    let start = Instant::now();
    let mut step = 1;
    while start.elapsed() < Duration::from_secs(30) {
        save_checkpoint_in_dir(Path::new(&dir), &checkpoint_for(step), 2).unwrap();
        step += 1;
    }
}

#[test]
fn killed_writer_leaves_a_loadable_checkpoint() {
    let exe = std::env::current_exe().unwrap();
    let mut seen_temp = 0;
    for round in 0..6u64 {
        let tmp = tempfile::tempdir().unwrap();
        let mut child = Command::new(&exe)
            .args([
                "child_writer",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(DIR_VAR, tmp.path())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while list_checkpoints(tmp.path()).unwrap().len() < 2 {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "child wrote no checkpoints"
            );
            assert!(child.try_wait().unwrap().is_none(), "child exited early");
            std::thread::sleep(Duration::from_millis(2));
        }
        // Kill at a different moment of the write cycle each round.
        std::thread::sleep(Duration::from_millis(round * 7 + 1));
        child.kill().unwrap();
        child.wait().unwrap();

        let names: Vec<String> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        seen_temp += names.iter().filter(|n| n.contains(".tmp-")).count();
        let listed = list_checkpoints(tmp.path()).unwrap();
        assert!(
            !listed.is_empty(),
            "round {round}: no checkpoint left: {names:?}"
        );
        for (step, path) in &listed {
            let c = load_checkpoint(path).unwrap_or_else(|e| panic!("round {round}: {e}"));
            assert_eq!(
                c,
                checkpoint_for(*step),
                "round {round}: {}",
                path.display()
            );
        }
        let latest = latest_checkpoint(tmp.path()).unwrap().unwrap();
        assert_eq!(latest, listed.last().unwrap().1);
    }
    eprintln!("temp files of interrupted writes seen over 6 kills: {seen_temp}");
}
