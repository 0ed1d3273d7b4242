//! `ffn consensus A B --out C`: the consensus of two segmentations by intersection
//! (google/ffn's `split_segmentation_by_intersection`; the rule is documented in
//! `ffn_core::segmentation::consensus`).

use anyhow::{Context, Result, bail};
use ffn_core::segmentation::consensus::split_segmentation_by_intersection;
use ffn_io::VolumeSpec;
use ndarray::Array3;

/// Arguments of `ffn consensus`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The first segmentation, FILE.h5:DATASET: its ids are kept where they win their largest overlap.
    pub first: String,
    /// The second segmentation, FILE.h5:DATASET, of the same shape.
    pub second: String,
    /// Output segmentation, FILE.h5:DATASET (smallest unsigned type that fits, chunked, compressed).
    #[arg(long)]
    pub out: String,
    /// Pieces of fewer voxels than this become 0 (google/ffn's split_min_size).
    #[arg(long, default_value_t = 0)]
    pub split_min_size: u64,
}

/// Runs `ffn consensus`.
pub fn run(args: Args) -> Result<()> {
    let first_spec: VolumeSpec = args.first.parse().context("first segmentation")?;
    let second_spec: VolumeSpec = args.second.parse().context("second segmentation")?;
    let out_spec: VolumeSpec = args.out.parse().context("--out")?;
    let first = ffn_io::read_labels(&first_spec).context("reading the first segmentation")?;
    let second = ffn_io::read_labels(&second_spec).context("reading the second segmentation")?;
    if first.dim() != second.dim() {
        bail!(
            "{}: expected the shape of {} {:?} (z,y,x), found {:?}",
            args.second,
            args.first,
            first.dim(),
            second.dim()
        );
    }
    let shape = first.dim();
    let mut a: Vec<u64> = first.iter().copied().collect();
    let b: Vec<u64> = second.iter().copied().collect();
    let segments = split_segmentation_by_intersection(&mut a, &b, args.split_min_size)
        .map_err(|e| anyhow::anyhow!("consensus: {e}"))?;
    let result = Array3::from_shape_vec(shape, a).context("consensus result shape")?;
    ffn_io::write_labels(&out_spec, &result).with_context(|| format!("writing {}", args.out))?;
    println!("consensus: {segments} segments written to {}", args.out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_where_either_input_splits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("segs.h5");
        let spec = |name: &str| format!("{}:{name}", path.display());
        // a: one object in all 8 voxels; b: split in two halves along x.
        let a = Array3::from_elem((2, 2, 2), 5u64);
        let b = Array3::from_shape_fn((2, 2, 2), |(_, _, x)| x as u64 + 1);
        ffn_io::write_labels(&spec("a").parse().unwrap(), &a).unwrap();
        ffn_io::write_labels(&spec("b").parse().unwrap(), &b).unwrap();
        run(Args {
            first: spec("a"),
            second: spec("b"),
            out: spec("c"),
            split_min_size: 0,
        })
        .unwrap();
        let c = ffn_io::read_labels(&spec("c").parse().unwrap()).unwrap();
        // The larger-or-first piece keeps id 5, the other half gets a new id.
        let ids: std::collections::BTreeSet<u64> = c.iter().copied().collect();
        assert_eq!(ids.len(), 2);
        assert!(ids.contains(&5));
        assert!(
            c.iter()
                .zip(b.iter())
                .all(|(&ci, &bi)| (ci == 5) == (bi == 1))
        );
        // Shape mismatch is an error naming the input.
        let small = Array3::from_elem((1, 2, 2), 1u64);
        ffn_io::write_labels(&spec("small").parse().unwrap(), &small).unwrap();
        let err = run(Args {
            first: spec("a"),
            second: spec("small"),
            out: spec("d"),
            split_min_size: 0,
        })
        .unwrap_err();
        assert!(format!("{err:#}").contains("small"), "{err:#}");
    }
}
