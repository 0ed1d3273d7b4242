//! `ffn infer-tiled` on 2 and 3 ranks (shm under `ffn launch`, MPI under `mpirun`) gives the same
//! segmentation as 1 rank, with the tiles shared dynamically between the ranks.

mod support;
use support::mpirun_command;
use support::tiled::*;

fn tiled_args<'a>(img: &'a str, out: &'a str, store: &'a str, backend: &'a str) -> Vec<&'a str> {
    let mut args = vec![
        "infer-tiled",
        "--image",
        img,
        "--out",
        out,
        "--tile-size",
        "16",
        "--tile-store",
        store,
        "--backend",
        backend,
    ];
    args.extend(ORACLE);
    args
}

/// 30 voxels, tiles of 16 overlapping by 7 (step 9): 3 per axis, 27 tiles.
const TILES: usize = 27;

#[test]
fn two_and_three_shm_ranks_match_one_rank() {
    let dir = tempfile::tempdir().unwrap();
    let (img, truth) = write_boxes(dir.path(), [30, 30, 30], 21);
    let h5 = s(&dir.path().join("out.h5"));
    let one = format!("{h5}:one");
    let store = s(&dir.path().join("t1"));
    let stdout = ok(&tiled_args(&img, &one, &store, "local"));
    assert_eq!(computed(&stdout), vec![TILES]);
    let base = read_seg(&one);
    assert_eq!(arand(&truth, &base), 0.0);
    for n in [2usize, 3] {
        let out = format!("{h5}:shm{n}");
        let store = s(&dir.path().join(format!("t_shm{n}")));
        let mut args = vec![
            "launch".to_string(),
            "-n".into(),
            n.to_string(),
            "--timeout".into(),
            "300".into(),
            "--".into(),
        ];
        args.extend(
            tiled_args(&img, &out, &store, "shm")
                .into_iter()
                .map(String::from),
        );
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let stdout = ok(&argv);
        let per_rank = computed(&stdout);
        assert_eq!(per_rank.len(), n, "{stdout}");
        assert_eq!(
            per_rank.iter().sum::<usize>(),
            TILES,
            "every tile exactly once: {stdout}"
        );
        let got = read_seg(&out);
        assert!(got == base, "{n} shm ranks differ from 1 rank");
    }
}

#[test]
fn two_and_three_mpi_ranks_match_one_rank() {
    let mpirun = h5(|| {
        std::process::Command::new("mpirun")
            .arg("--version")
            .output()
    });
    if mpirun.is_err() {
        eprintln!("mpirun not found: MPI runs not tested");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img, truth) = write_boxes(dir.path(), [30, 30, 30], 22);
    let h5 = s(&dir.path().join("out.h5"));
    let one = format!("{h5}:one");
    ok(&tiled_args(&img, &one, &s(&dir.path().join("t1")), "local"));
    let base = read_seg(&one);
    assert_eq!(arand(&truth, &base), 0.0);
    for n in [2usize, 3] {
        let out = format!("{h5}:mpi{n}");
        let store = s(&dir.path().join(format!("t_mpi{n}")));
        let child = spawn(
            mpirun_command(n, &[], env!("CARGO_BIN_EXE_ffn"))
                .args(tiled_args(&img, &out, &store, "mpi")),
        );
        let output = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "mpirun -n {n}: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let per_rank = computed(&stdout);
        assert_eq!(per_rank.len(), n, "{stdout}");
        assert_eq!(per_rank.iter().sum::<usize>(), TILES, "{stdout}");
        assert!(read_seg(&out) == base, "{n} MPI ranks differ from 1 rank");
    }
}
