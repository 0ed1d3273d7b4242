//! Label maps: FlyEM-style ground truth, where a `stack` dataset holds supervoxel ids and a
//! `transforms` dataset a `(supervoxel, body)` table of shape `[N, 2]`, flattened to body labels.
//! Gzip-compressed HDF5 files (`.h5.gz`, recognised by their gzip magic) are read directly: they are
//! decompressed to a temp file that is deleted afterwards.

use crate::error::{IoError, one_line};
use crate::volume::{VolumeSpec, open_dataset, read_labels};
use hdf5::types::TypeDescriptor;
use ndarray::{Array2, Array3};
use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// An HDF5 file ready to open: the file itself, or a decompressed temp copy of a gzip file (deleted
/// when this value is dropped).
#[derive(Debug)]
pub struct LocalHdf5 {
    path: PathBuf,
    temp: bool,
}

impl LocalHdf5 {
    /// The path to open with HDF5.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for LocalHdf5 {
    fn drop(&mut self) {
        if self.temp {
            let _ = fs::remove_file(&self.path);
        }
    }
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Returns `path` itself, or, when it starts with the gzip magic bytes, a decompressed temp copy.
pub fn open_maybe_gzip(path: &Path) -> Result<LocalHdf5, IoError> {
    let mut file = fs::File::open(path).map_err(|e| IoError::os(path, e))?;
    let mut magic = [0u8; 2];
    let n = file.read(&mut magic).map_err(|e| IoError::os(path, e))?;
    if n < 2 || magic != [0x1f, 0x8b] {
        return Ok(LocalHdf5 {
            path: path.to_path_buf(),
            temp: false,
        });
    }
    let file = fs::File::open(path).map_err(|e| IoError::os(path, e))?;
    let k = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let tmp = std::env::temp_dir().join(format!("ffn-io-{}-{k}.h5", std::process::id()));
    let local = LocalHdf5 {
        path: tmp.clone(),
        temp: true,
    };
    let mut out = fs::File::create(&tmp).map_err(|e| IoError::os(&tmp, e))?;
    let mut gz = flate2::read::GzDecoder::new(std::io::BufReader::new(file));
    std::io::copy(&mut gz, &mut out).map_err(|e| IoError::Image {
        path: path.into(),
        reason: format!(
            "gzip data cannot be decompressed (truncated or damaged): {}",
            one_line(&e.to_string())
        ),
    })?;
    out.flush().map_err(|e| IoError::os(&tmp, e))?;
    Ok(local)
}

/// Reads a `(supervoxel, body)` table of shape `[N, 2]` (any integer type). Negative ids, other
/// shapes and a supervoxel listed twice with two bodies are errors.
pub fn read_body_table(spec: &VolumeSpec) -> Result<HashMap<u64, u64>, IoError> {
    let ds = open_dataset(spec)?;
    let shape = ds.shape();
    if shape.len() != 2 || shape[1] != 2 {
        return Err(IoError::LabelTable {
            spec: spec.to_string(),
            reason: format!(
                "expected a table of shape [N, 2] (rows of supervoxel, body), found shape {shape:?}"
            ),
        });
    }
    let hdf = |e: hdf5::Error| IoError::Hdf5 {
        spec: spec.to_string(),
        detail: one_line(&e.to_string()),
    };
    let dtype = ds.dtype().and_then(|t| t.to_descriptor()).map_err(hdf)?;
    let table: Array2<u64> = match dtype {
        TypeDescriptor::Unsigned(_) => ds.read_2d::<u64>().map_err(hdf)?,
        TypeDescriptor::Integer(_) => {
            let t = ds.read_2d::<i64>().map_err(hdf)?;
            if let Some(((r, c), &v)) = t.indexed_iter().find(|(_, v)| **v < 0) {
                return Err(IoError::NegativeLabel {
                    spec: spec.to_string(),
                    index: vec![r, c],
                    value: v,
                });
            }
            t.mapv(|v| v as u64)
        }
        other => {
            return Err(IoError::WrongDtype {
                spec: spec.to_string(),
                expected: "an integer (supervoxel, body) table".into(),
                found: format!("{other}"),
            });
        }
    };
    let mut map = HashMap::with_capacity(table.nrows());
    for row in table.rows() {
        let (sv, body) = (row[0], row[1]);
        if let Some(prev) = map.insert(sv, body)
            && prev != body
        {
            return Err(IoError::LabelTable {
                spec: spec.to_string(),
                reason: format!("supervoxel {sv} is mapped to two bodies, {prev} and {body}"),
            });
        }
    }
    Ok(map)
}

/// Maps every supervoxel of `stack` to its body. A supervoxel missing from the table is an error
/// (naming it and how many are missing); `table_name` is used in that message.
pub fn apply_body_table(
    stack: &Array3<u64>,
    table: &HashMap<u64, u64>,
    table_name: &str,
) -> Result<Array3<u64>, IoError> {
    let mut missing: HashSet<u64> = HashSet::new();
    let mut last = (u64::MAX, 0u64);
    let bodies = stack.mapv(|sv| {
        if sv == last.0 {
            return last.1;
        }
        match table.get(&sv) {
            Some(&b) => {
                last = (sv, b);
                b
            }
            None => {
                missing.insert(sv);
                0
            }
        }
    });
    if !missing.is_empty() {
        let mut m: Vec<u64> = missing.into_iter().collect();
        m.sort_unstable();
        let shown: Vec<String> = m.iter().take(5).map(u64::to_string).collect();
        return Err(IoError::LabelTable {
            spec: table_name.to_string(),
            reason: format!(
                "{} supervoxel ids of the stack are not in the table (e.g. {})",
                m.len(),
                shown.join(", ")
            ),
        });
    }
    Ok(bodies)
}

/// Number of distinct non-zero labels.
pub fn count_objects(labels: &Array3<u64>) -> usize {
    let mut ids: Vec<u64> = labels.iter().copied().filter(|&x| x != 0).collect();
    ids.sort_unstable();
    ids.dedup();
    ids.len()
}

/// Reads label volume `stack` from `input` (HDF5 or gzip-compressed HDF5) and, when `transforms`
/// is given, maps it through that `(supervoxel, body)` table. The returned volume has axes z,y,x.
pub fn read_flyem_labels(
    input: &Path,
    stack: &str,
    transforms: Option<&str>,
) -> Result<Array3<u64>, IoError> {
    let local = open_maybe_gzip(input)?;
    // Messages name the file the user gave, not the temp copy.
    let rename = |e: IoError| rename_path(e, local.path(), input);
    let stack_spec = VolumeSpec::new(local.path(), stack);
    let supervoxels = read_labels(&stack_spec).map_err(rename)?;
    let Some(tname) = transforms else {
        return Ok(supervoxels);
    };
    let table = read_body_table(&VolumeSpec::new(local.path(), tname)).map_err(rename)?;
    apply_body_table(
        &supervoxels,
        &table,
        &VolumeSpec::new(input, tname).to_string(),
    )
}

/// Replaces the temp path in an error by the user's path.
fn rename_path(e: IoError, from: &Path, to: &Path) -> IoError {
    if from == to {
        return e;
    }
    let text = e
        .to_string()
        .replace(&from.display().to_string(), &to.display().to_string());
    match e {
        IoError::MissingDataset {
            dataset, available, ..
        } => IoError::MissingDataset {
            path: to.into(),
            dataset,
            available,
        },
        IoError::NotHdf5 { detail, .. } => IoError::NotHdf5 {
            path: to.into(),
            detail,
        },
        _ => IoError::LabelTable {
            spec: to.display().to_string(),
            reason: strip_prefix(&text, to),
        },
    }
}

fn strip_prefix(text: &str, path: &Path) -> String {
    let p = path.display().to_string();
    text.strip_prefix(&p)
        .map(|t| t.trim_start_matches(':').trim_start().to_string())
        .unwrap_or_else(|| text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdf5::File;

    fn write_gt(path: &Path, stack: &Array3<i32>, table: &Array2<i32>) {
        let f = File::create(path).unwrap();
        f.new_dataset_builder()
            .with_data(stack)
            .create("stack")
            .unwrap();
        f.new_dataset_builder()
            .with_data(table)
            .create("transforms")
            .unwrap();
    }

    fn gzip(src: &Path, dst: &Path) {
        let mut enc = flate2::write::GzEncoder::new(
            fs::File::create(dst).unwrap(),
            flate2::Compression::fast(),
        );
        enc.write_all(&fs::read(src).unwrap()).unwrap();
        enc.finish().unwrap();
    }

    #[test]
    fn flattens_supervoxels_from_plain_and_gzip_files() {
        let dir = tempfile::tempdir().unwrap();
        let h5 = dir.path().join("gt.h5");
        let stack =
            Array3::from_shape_fn((2, 3, 4), |(z, y, x)| (z * 12 + y * 4 + x) as i32 % 5 + 10);
        let table =
            Array2::from_shape_vec((5, 2), vec![10, 0, 11, 7, 12, 7, 13, 9, 14, 100_000]).unwrap();
        write_gt(&h5, &stack, &table);
        let gz = dir.path().join("gt.h5.gz");
        gzip(&h5, &gz);
        for input in [&h5, &gz] {
            let bodies = read_flyem_labels(input, "stack", Some("transforms")).unwrap();
            let expect = stack.mapv(|s| [0u64, 7, 7, 9, 100_000][(s - 10) as usize]);
            assert_eq!(bodies, expect);
            assert_eq!(count_objects(&bodies), 3);
            let raw = read_flyem_labels(input, "stack", None).unwrap();
            assert_eq!(raw, stack.mapv(|s| s as u64));
        }
        // The temp copy is gone.
        let leftovers = fs::read_dir(std::env::temp_dir())
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("ffn-io-{}-", std::process::id()))
            })
            .count();
        assert_eq!(leftovers, 0);
        // Errors name the user's file, not the temp copy.
        let e = read_flyem_labels(&gz, "stak", Some("transforms"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("gt.h5.gz: no dataset 'stak'; datasets in the file: stack, transforms"),
            "{e}"
        );
    }

    #[test]
    fn bad_tables_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let h5 = dir.path().join("gt.h5");
        let stack = Array3::from_elem((1, 1, 3), 5i32);
        write_gt(
            &h5,
            &stack,
            &Array2::from_shape_vec((1, 2), vec![6, 1]).unwrap(),
        );
        let e = read_flyem_labels(&h5, "stack", Some("transforms"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(
                "gt.h5:transforms: 1 supervoxel ids of the stack are not in the table (e.g. 5)"
            ),
            "{e}"
        );
        write_gt(
            &h5,
            &stack,
            &Array2::from_shape_vec((2, 2), vec![5, 1, 5, 2]).unwrap(),
        );
        let e = read_flyem_labels(&h5, "stack", Some("transforms"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("supervoxel 5 is mapped to two bodies, 1 and 2"),
            "{e}"
        );
        write_gt(
            &h5,
            &stack,
            &Array2::from_shape_vec((1, 2), vec![5, -3]).unwrap(),
        );
        let e = read_flyem_labels(&h5, "stack", Some("transforms"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("negative label -3 at [0, 1]"), "{e}");
        write_gt(
            &h5,
            &stack,
            &Array2::from_shape_vec((1, 3), vec![5, 1, 1]).unwrap(),
        );
        let e = read_flyem_labels(&h5, "stack", Some("transforms"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("gt.h5:transforms: expected a table of shape [N, 2]")
                && e.contains("found shape [1, 3]"),
            "{e}"
        );
        let bad_gz = dir.path().join("bad.h5.gz");
        let mut bytes = fs::read(&h5).unwrap();
        bytes.truncate(100);
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&bytes).unwrap();
        let gzbytes = enc.finish().unwrap();
        fs::write(&bad_gz, &gzbytes[..gzbytes.len() / 2]).unwrap();
        let e = read_flyem_labels(&bad_gz, "stack", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("bad.h5.gz") && e.contains("gzip"), "{e}");
    }
}
