//! `ffn infer-tiled` on a volume far larger than the memory the process may use: a synthetic Zarr
//! volume of boxes, segmented with the oracle predictor under an address-space limit
//! (`RLIMIT_AS`) of a tenth of the volume's size as uint64 ids (what a merge holding the volume
//! would allocate), Zarr in and out. The result is checked block by block against the truth: every
//! box is one segment and no two boxes share one. (The truth is the stricter reference: an untiled
//! oracle run with moves of 4 voxels can itself split a box, where its FOV path misses a corner.)
//! On a small copy with moves of one voxel, the tiled run equals the untiled one voxel for voxel.

mod support;

use std::collections::HashMap;

use ffn_io::VolumeSpec;
use ffn_io::region_writer::write_labels_by_region;

/// The volume, `[z, y, x]`: 384 x 512 x 640 = 126 M voxels, 1.0 GB as uint64.
const SHAPE: [usize; 3] = [384, 512, 640];
/// The address-space limit of the segmenting process: under a tenth of the uint64 volume.
const LIMIT_BYTES: u64 = 96 << 20;

/// Box boundaries along an axis of `len` voxels: sides of 10 to 25 voxels, irregular.
fn edges(len: usize, salt: usize) -> Vec<usize> {
    let mut e = vec![0];
    let mut k = salt;
    while *e.last().unwrap() < len {
        k = (k * 7 + 3) % 16;
        let next = e.last().unwrap() + 10 + k;
        e.push(next.min(len));
    }
    // A last sliver thinner than 10 voxels joins the box before it.
    if e.len() > 2 && e[e.len() - 1] - e[e.len() - 2] < 10 {
        e.remove(e.len() - 2);
    }
    e
}

/// The box grid: boundaries per axis and, per voxel coordinate, the box index along that axis.
struct Boxes {
    index: [Vec<usize>; 3],
    counts: [usize; 3],
}

impl Boxes {
    fn new() -> Self {
        let index = [0, 1, 2].map(|a| {
            let e = edges(SHAPE[a], a + 1);
            let mut idx = vec![0; SHAPE[a]];
            for b in 0..e.len() - 1 {
                idx[e[b]..e[b + 1]].fill(b);
            }
            idx
        });
        let counts = [0, 1, 2].map(|a| index[a][SHAPE[a] - 1] + 1);
        Self { index, counts }
    }

    /// The box holding a voxel, numbered z-major.
    fn of(&self, z: usize, y: usize, x: usize) -> usize {
        (self.index[0][z] * self.counts[1] + self.index[1][y]) * self.counts[2] + self.index[2][x]
    }

    /// The image value (what the oracle reads as the label id): boxes that touch, even at a corner,
    /// differ in their box index on some axis by one, so `1 + (iz % 3) * 9 + (iy % 3) * 3 + ix % 3`
    /// never gives two touching boxes the same value.
    fn value(&self, z: usize, y: usize, x: usize) -> u64 {
        let i = [self.index[0][z], self.index[1][y], self.index[2][x]];
        1 + (i[0] % 3 * 9 + i[1] % 3 * 3 + i[2] % 3) as u64
    }
}

/// Writes the image of `boxes` in the box `offset + shape` as a uint8 Zarr array, one z slab of
/// 16 at a time (the test process never holds the volume either).
fn write_image(spec: &VolumeSpec, boxes: &Boxes, offset: [usize; 3], shape: [usize; 3]) {
    write_labels_by_region(spec, shape, 255, |w| {
        for z0 in (0..shape[0]).step_by(16) {
            let nz = 16.min(shape[0] - z0);
            let mut slab = Vec::with_capacity(nz * shape[1] * shape[2]);
            for z in z0..z0 + nz {
                for y in 0..shape[1] {
                    for x in 0..shape[2] {
                        slab.push(boxes.value(offset[0] + z, offset[1] + y, offset[2] + x));
                    }
                }
            }
            w.write([z0, 0, 0], [nz, shape[1], shape[2]], &slab)?;
        }
        Ok(())
    })
    .unwrap();
}

fn oracle_args<'a>(image: &'a str, out: &'a str, tile: &'a str) -> Vec<&'a str> {
    support::tiled::tiled_args(
        image,
        out,
        tile,
        &[
            "--oracle",
            "--fov",
            "9,9,9",
            "--deltas",
            "4,4,4",
            "--seed-policy",
            "grid",
            "--grid-step",
            "4",
            "--min-segment-size",
            "1",
            "--min-boundary-dist",
            "0",
        ],
    )
}

/// Runs `ffn ARGS` with `limit` bytes of address space; returns stdout.
fn run_ffn(args: &[&str], limit: u64) -> String {
    let mut cmd = support::ffn_with_address_limit(args, limit);
    let out = cmd.output().expect("running ffn");
    assert!(
        out.status.success(),
        "ffn {args:?} failed ({:?}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_volume_ten_times_larger_than_the_memory_limit_is_segmented_in_tiles() {
    let volume_bytes = SHAPE.iter().product::<usize>() as u64 * 8;
    assert!(volume_bytes >= 10 * LIMIT_BYTES, "{volume_bytes}");
    let dir = tempfile::tempdir().unwrap();
    let boxes = Boxes::new();
    let image = VolumeSpec::new(dir.path().join("big.zarr"), "ids");
    write_image(&image, &boxes, [0; 3], SHAPE);
    let out = VolumeSpec::new(dir.path().join("seg.zarr"), "labels");
    let (image_s, out_s) = (image.to_string(), out.to_string());
    let stdout = run_ffn(&oracle_args(&image_s, &out_s, "96"), LIMIT_BYTES);
    let n_boxes = boxes.counts.iter().product::<usize>();
    assert!(
        stdout.contains(&format!("into {n_boxes} segments")),
        "{n_boxes} boxes: {stdout}"
    );

    // Block by block: every box has one id, and no id is on two boxes. Only voxels within 3 of
    // the volume's faces may stay unsegmented (FOV centres keep 4 voxels inside, moves are 4).
    let mut id_of_box: HashMap<usize, u64> = HashMap::new();
    let mut box_of_id: HashMap<u64, usize> = HashMap::new();
    for z0 in (0..SHAPE[0]).step_by(64) {
        let nz = 64.min(SHAPE[0] - z0);
        let seg = ffn_io::read_labels_region(&out, [z0, 0, 0], [nz, SHAPE[1], SHAPE[2]]).unwrap();
        for ((z, y, x), &id) in seg.indexed_iter() {
            let p = [z0 + z, y, x];
            if id == 0 {
                let inner = (0..3).all(|a| p[a] >= 3 && p[a] + 3 < SHAPE[a]);
                assert!(!inner, "voxel {p:?} unsegmented");
                continue;
            }
            let b = boxes.of(p[0], p[1], p[2]);
            assert_eq!(*id_of_box.entry(b).or_insert(id), id, "box {b} split");
            assert_eq!(*box_of_id.entry(id).or_insert(b), b, "id {id} on two boxes");
        }
    }
    assert_eq!(id_of_box.len(), n_boxes);

    // A small copy (the volume's first 32 x 48 x 64 voxels) with moves of one voxel, the exact
    // oracle: tiled with tiles as small relative to it, under the same limit, equals the untiled
    // run voxel for voxel.
    let shape = [32, 48, 64];
    let small = VolumeSpec::new(dir.path().join("small.zarr"), "ids");
    write_image(&small, &boxes, [0; 3], shape);
    let small_s = small.to_string();
    let segment = |out: &VolumeSpec, tile: &str| {
        let out_s = out.to_string();
        let mut args = vec![
            "infer-tiled",
            "--image",
            &small_s,
            "--out",
            &out_s,
            "--tile-size",
            tile,
            "--tile-overlap",
            "8",
        ];
        args.extend(support::tiled::ORACLE);
        run_ffn(&args, LIMIT_BYTES);
        ffn_io::read_labels(out).unwrap()
    };
    let untiled = segment(
        &VolumeSpec::new(dir.path().join("small.zarr"), "untiled"),
        "128",
    );
    let tiled = segment(
        &VolumeSpec::new(dir.path().join("small.zarr"), "tiled"),
        "20",
    );
    // Slivers of boxes cut by the copy's faces are too thin for an FOV; the rest is segmented.
    let segmented = untiled.iter().filter(|&&v| v != 0).count();
    assert!(
        segmented * 10 > untiled.len() * 9,
        "{segmented} of {}",
        untiled.len()
    );
    assert!(
        support::tiled::canonical(&untiled) == support::tiled::canonical(&tiled),
        "the small copy: tiled differs from untiled"
    );
}
