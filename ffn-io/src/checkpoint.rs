//! Checkpoints of ffn-core models: safetensors with JSON metadata, written atomically.
//!
//! # File layout
//! One `.safetensors` file (readable by PyTorch's `safetensors.torch.load_file`):
//! - one `F32` tensor per network parameter, named and shaped as in
//!   [`ModelConfig::param_specs`] (`conv0_a/weights` `[3,3,3,2,32]`, ...; TF layout
//!   `[kz, ky, kx, in, out]`);
//! - one 1-D `F32` tensor per optimiser buffer, named `optimizer/NAME`;
//! - header metadata (string -> string): `format` = `ffn-rs checkpoint`, `format_version` = `1`,
//!   `model` (JSON: depth, features, fov, deltas), `step`, `rng_state` (JSON array of 4 u64),
//!   `optimizer` (JSON array of buffer names, in order), `training_config` (free-form JSON) and
//!   `tensors_crc32c` (CRC-32C of the tensors' bytes: the parameters in spec order, then the
//!   optimiser buffers in order; 8 hex digits). Files without the checksum (written before it
//!   existed) still load; a checksum that does not match is an error.
//!
//! Loading checks every tensor's name, type and shape against the metadata, the checksum, and that
//! every parameter is finite; nothing is allocated beyond what the file holds.
//!
//! # Crash safety
//! [`save_checkpoint`] writes a temp file in the destination folder, fsyncs it, renames it over the
//! destination and fsyncs the folder. A crash at any point leaves either the old file or the new one,
//! never a partial file under the checkpoint's name; a leftover temp file (`.NAME.tmp-*`) is ignored
//! by [`list_checkpoints`] and removed by the next [`save_checkpoint_in_dir`].

use crate::error::IoError;
use crate::tf_bundle;
use ffn_core::model_spec::ModelConfig;
use safetensors::{Dtype, SafeTensors, tensor::TensorView};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

/// Value of the `format` metadata key.
pub const FORMAT: &str = "ffn-rs checkpoint";
/// Value of the `format_version` metadata key.
pub const FORMAT_VERSION: &str = "1";
/// Prefix of optimiser-buffer tensor names.
pub const OPTIMIZER_PREFIX: &str = "optimizer/";
/// Metadata key of the tensors' CRC-32C.
pub const CRC_KEY: &str = "tensors_crc32c";
/// File-name extension of checkpoints.
pub const EXTENSION: &str = "safetensors";

/// Everything needed to resume training (or to run inference, using `model` and `params`).
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    /// The network architecture.
    pub model: ModelConfig,
    /// Flat parameters in [`ModelConfig::param_specs`] order.
    pub params: Vec<f32>,
    /// Optimiser state as named flat buffers (from `Optimizer::state`), in order.
    pub optimizer: Vec<(String, Vec<f32>)>,
    /// Training steps done.
    pub step: u64,
    /// State of the training RNG (`ffn_core::rng::Rng::state`).
    pub rng_state: [u64; 4],
    /// The training configuration, free-form.
    pub training_config: Value,
}

fn bad(path: &Path, reason: impl Into<String>) -> IoError {
    IoError::Checkpoint {
        path: path.into(),
        reason: reason.into(),
    }
}

fn model_json(m: &ModelConfig) -> Value {
    json!({ "depth": m.depth, "features": m.features, "fov": m.fov, "deltas": m.deltas })
}

fn model_from_json(path: &Path, v: &Value) -> Result<ModelConfig, IoError> {
    let uint = |key: &str| -> Result<usize, IoError> {
        v.get(key)
            .and_then(Value::as_u64)
            .and_then(|x| usize::try_from(x).ok())
            .ok_or_else(|| {
                bad(
                    path,
                    format!(
                        "metadata 'model.{key}': expected an unsigned integer, found {:?}",
                        v.get(key)
                    ),
                )
            })
    };
    let triple = |key: &str| -> Result<[usize; 3], IoError> {
        let err = || {
            bad(
                path,
                format!(
                    "metadata 'model.{key}': expected 3 unsigned integers, found {:?}",
                    v.get(key)
                ),
            )
        };
        let arr = v.get(key).and_then(Value::as_array).ok_or_else(err)?;
        let vals: Vec<usize> = arr
            .iter()
            .filter_map(|x| x.as_u64().and_then(|x| usize::try_from(x).ok()))
            .collect();
        <[usize; 3]>::try_from(vals).map_err(|_| err())
    };
    let m = ModelConfig {
        depth: uint("depth")?,
        features: uint("features")?,
        fov: triple("fov")?,
        deltas: triple("deltas")?,
    };
    m.validate()
        .map_err(|e| bad(path, format!("metadata {e}")))?;
    Ok(m)
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn bytes_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Serialises a checkpoint to the bytes of a safetensors file.
pub fn encode_checkpoint(ckpt: &Checkpoint) -> Result<Vec<u8>, String> {
    ckpt.model.validate()?;
    let specs = ckpt.model.param_specs();
    let expected = ckpt.model.num_params();
    if ckpt.params.len() != expected {
        return Err(format!(
            "params: expected {expected} values for {:?}, found {}",
            ckpt.model,
            ckpt.params.len()
        ));
    }
    let mut owned: Vec<(String, Vec<usize>, Vec<u8>)> =
        Vec::with_capacity(specs.len() + ckpt.optimizer.len());
    for s in &specs {
        owned.push((
            s.name.clone(),
            s.shape.clone(),
            f32_bytes(&ckpt.params[s.offset..s.offset + s.len()]),
        ));
    }
    let mut names = Vec::new();
    for (name, buf) in &ckpt.optimizer {
        if names.contains(name) {
            return Err(format!("optimizer buffer '{name}' appears twice"));
        }
        names.push(name.clone());
        owned.push((
            format!("{OPTIMIZER_PREFIX}{name}"),
            vec![buf.len()],
            f32_bytes(buf),
        ));
    }
    let crc = owned
        .iter()
        .fold(0, |crc, (_, _, data)| crate::crc32c::extend(crc, data));
    let mut views = Vec::with_capacity(owned.len());
    for (name, shape, data) in &owned {
        let view = TensorView::new(Dtype::F32, shape.clone(), data)
            .map_err(|e| format!("tensor {name}: {e}"))?;
        views.push((name.clone(), view));
    }
    let meta: HashMap<String, String> = [
        ("format", FORMAT.to_string()),
        ("format_version", FORMAT_VERSION.to_string()),
        ("model", model_json(&ckpt.model).to_string()),
        ("step", ckpt.step.to_string()),
        ("rng_state", json!(ckpt.rng_state).to_string()),
        ("optimizer", json!(names).to_string()),
        ("training_config", ckpt.training_config.to_string()),
        (CRC_KEY, format!("{crc:08x}")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let bytes = safetensors::serialize(views, Some(meta)).map_err(|e| e.to_string())?;
    with_sorted_header(bytes)
}

/// Rewrites the JSON header of safetensors bytes with its keys sorted, so that one checkpoint
/// always gives the same bytes (`safetensors` writes the metadata map in hash order, which differs
/// between runs). The sorted header has the same length, so the data offsets stay valid.
fn with_sorted_header(mut bytes: Vec<u8>) -> Result<Vec<u8>, String> {
    let len_bytes: [u8; 8] = bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or("safetensors output shorter than its header length")?;
    let len = usize::try_from(u64::from_le_bytes(len_bytes))
        .ok()
        .filter(|&n| 8 + n <= bytes.len())
        .ok_or("safetensors header length exceeds the output")?;
    let header = &bytes[8..8 + len];
    // BTreeMaps serialise their keys in order (serde_json's own map may keep insertion order).
    let mut entries: BTreeMap<String, Value> =
        serde_json::from_slice(header).map_err(|e| format!("header: {e}"))?;
    if let Some(meta) = entries.get_mut("__metadata__") {
        let sorted_meta: BTreeMap<String, Value> =
            serde_json::from_value(meta.take()).map_err(|e| format!("header metadata: {e}"))?;
        *meta = json!(sorted_meta);
    }
    let sorted = serde_json::to_vec(&entries).map_err(|e| format!("header: {e}"))?;
    let json_len = header.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
    if sorted.len() != json_len {
        return Err(format!(
            "header: sorting changed its length ({json_len} to {} bytes)",
            sorted.len()
        ));
    }
    bytes[8..8 + json_len].copy_from_slice(&sorted);
    Ok(bytes)
}

/// Parses the bytes of a checkpoint file (`path` is only used in error messages).
pub fn decode_checkpoint(path: &Path, bytes: &[u8]) -> Result<Checkpoint, IoError> {
    let st = SafeTensors::deserialize(bytes).map_err(|e| {
        bad(
            path,
            format!("not a safetensors file (truncated or another format): {e}"),
        )
    })?;
    let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| bad(path, e.to_string()))?;
    let meta = header.metadata().clone().unwrap_or_default();
    let get = |key: &str| {
        meta.get(key)
            .ok_or_else(|| bad(path, format!("metadata key '{key}' missing")))
    };
    let format = get("format")?;
    if format != FORMAT {
        return Err(bad(
            path,
            format!("metadata 'format': expected '{FORMAT}', found '{format}'"),
        ));
    }
    let version = get("format_version")?;
    if version != FORMAT_VERSION {
        return Err(bad(
            path,
            format!("format_version {version} is not supported (expected {FORMAT_VERSION})"),
        ));
    }
    let parse_json = |key: &str| -> Result<Value, IoError> {
        serde_json::from_str(get(key)?)
            .map_err(|e| bad(path, format!("metadata '{key}': invalid JSON: {e}")))
    };
    let model = model_from_json(path, &parse_json("model")?)?;
    let step = get("step")?
        .parse::<u64>()
        .map_err(|e| bad(path, format!("metadata 'step': {e}")))?;
    let rng_state: [u64; 4] = serde_json::from_value(parse_json("rng_state")?).map_err(|e| {
        bad(
            path,
            format!("metadata 'rng_state': expected 4 unsigned integers: {e}"),
        )
    })?;
    let opt_names: Vec<String> = serde_json::from_value(parse_json("optimizer")?).map_err(|e| {
        bad(
            path,
            format!("metadata 'optimizer': expected a list of names: {e}"),
        )
    })?;
    let training_config = parse_json("training_config")?;

    let crc = std::cell::Cell::new(0u32);
    let read = |name: &str, shape: &[usize]| -> Result<Vec<f32>, IoError> {
        let t = st
            .tensor(name)
            .map_err(|_| bad(path, format!("tensor '{name}' missing")))?;
        if t.dtype() != Dtype::F32 {
            return Err(bad(
                path,
                format!("tensor '{name}': expected F32, found {:?}", t.dtype()),
            ));
        }
        if t.shape() != shape {
            return Err(bad(
                path,
                format!(
                    "tensor '{name}': expected shape {shape:?}, found {:?}",
                    t.shape()
                ),
            ));
        }
        crc.set(crate::crc32c::extend(crc.get(), t.data()));
        Ok(bytes_f32(t.data()))
    };
    let specs = model.param_specs();
    // Grows with what the file holds: the metadata's architecture alone allocates nothing.
    let mut params = Vec::new();
    for s in &specs {
        let values = read(&s.name, &s.shape)?;
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            return Err(bad(
                path,
                format!(
                    "tensor '{}': value {} at index {i} is not finite (a diverged or damaged checkpoint)",
                    s.name, values[i]
                ),
            ));
        }
        params.extend(values);
    }
    let mut optimizer = Vec::with_capacity(opt_names.len());
    for name in &opt_names {
        let full = format!("{OPTIMIZER_PREFIX}{name}");
        let len = st
            .tensor(&full)
            .map(|t| t.shape().iter().product())
            .unwrap_or(0);
        optimizer.push((name.clone(), read(&full, &[len])?));
    }
    if let Some(stored) = meta.get(CRC_KEY) {
        let found = format!("{:08x}", crc.get());
        if *stored != found && !crate::crc32c::SKIP_IN_FUZZING {
            return Err(bad(
                path,
                format!(
                    "metadata '{CRC_KEY}': the tensors' checksum is {found}, the file says {stored}: damaged bytes"
                ),
            ));
        }
    }
    let known = specs.len() + opt_names.len();
    if st.len() != known {
        let mut extra: Vec<String> = st
            .names()
            .into_iter()
            .filter(|n| {
                !specs.iter().any(|s| s.name == *n)
                    && !opt_names
                        .iter()
                        .any(|o| format!("{OPTIMIZER_PREFIX}{o}") == *n)
            })
            .map(String::from)
            .collect();
        extra.sort();
        return Err(bad(
            path,
            format!("unexpected tensors for {:?}: {}", model, extra.join(", ")),
        ));
    }
    Ok(Checkpoint {
        model,
        params,
        optimizer,
        step,
        rng_state,
        training_config,
    })
}

/// Writes `bytes` to `path` atomically ([`crate::atomic`]). `crash_after` (tests only) stops after
/// writing that many bytes to the temporary file, as a kill would, and leaves that file behind.
fn write_atomic(path: &Path, bytes: &[u8], crash_after: Option<usize>) -> Result<(), IoError> {
    let Some(n) = crash_after else {
        return crate::atomic::write_atomic(path, bytes);
    };
    let tmp = crate::atomic::temp_path(path);
    fs::write(&tmp, &bytes[..n.min(bytes.len())]).map_err(|e| IoError::os(&tmp, e))?;
    Err(IoError::os(
        &tmp,
        std::io::Error::other("simulated crash before rename"),
    ))
}

/// Saves a checkpoint to `path` atomically (see the module docs). Fails without touching `path` if
/// the parameters do not match the model.
pub fn save_checkpoint(path: &Path, ckpt: &Checkpoint) -> Result<(), IoError> {
    let bytes = encode_checkpoint(ckpt).map_err(|r| bad(path, r))?;
    write_atomic(path, &bytes, None)
}

/// Loads a checkpoint, checking its metadata and every tensor's name, type and shape.
pub fn load_checkpoint(path: &Path) -> Result<Checkpoint, IoError> {
    let bytes = fs::read(path).map_err(|e| IoError::os(path, e))?;
    decode_checkpoint(path, &bytes)
}

/// Every difference between two architectures, as `model.FIELD: expected X, found Y` joined by `; `
/// (empty when they are equal).
pub fn architecture_diff(expected: &ModelConfig, found: &ModelConfig) -> String {
    let mut diffs = Vec::new();
    let mut cmp = |field: &str, e: String, f: String| {
        if e != f {
            diffs.push(format!("model.{field}: expected {e}, found {f}"));
        }
    };
    cmp("depth", expected.depth.to_string(), found.depth.to_string());
    cmp(
        "features",
        expected.features.to_string(),
        found.features.to_string(),
    );
    cmp(
        "fov",
        format!("{:?}", expected.fov),
        format!("{:?}", found.fov),
    );
    cmp(
        "deltas",
        format!("{:?}", expected.deltas),
        format!("{:?}", found.deltas),
    );
    diffs.join("; ")
}

/// Fails with [`IoError::Architecture`] (listing every difference and the parameter counts) unless
/// `found` equals `expected`.
pub fn check_architecture(
    path: &Path,
    expected: &ModelConfig,
    found: &ModelConfig,
) -> Result<(), IoError> {
    let diff = architecture_diff(expected, found);
    if diff.is_empty() {
        return Ok(());
    }
    Err(IoError::Architecture {
        path: path.into(),
        diff: format!(
            "{diff} ({} parameters expected, {} in the file)",
            expected.num_params(),
            found.num_params()
        ),
    })
}

/// Loads a checkpoint and checks that it holds the `expected` architecture.
pub fn load_checkpoint_for(path: &Path, expected: &ModelConfig) -> Result<Checkpoint, IoError> {
    let ckpt = load_checkpoint(path)?;
    check_architecture(path, expected, &ckpt.model)?;
    Ok(ckpt)
}

/// File name of the checkpoint of `step` inside a checkpoint folder.
pub fn checkpoint_file_name(step: u64) -> String {
    format!("ckpt-{step:010}.{EXTENSION}")
}

fn step_of(name: &str) -> Option<u64> {
    name.strip_prefix("ckpt-")?
        .strip_suffix(&format!(".{EXTENSION}"))?
        .parse()
        .ok()
}

/// The checkpoints in a folder (files named `ckpt-STEP.safetensors`), sorted by step. Temp files of
/// interrupted writes are not listed.
pub fn list_checkpoints(dir: &Path) -> Result<Vec<(u64, PathBuf)>, IoError> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| IoError::os(dir, e))? {
        let entry = entry.map_err(|e| IoError::os(dir, e))?;
        if let Some(step) = entry.file_name().to_str().and_then(step_of) {
            out.push((step, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// The checkpoint of the highest step in a folder, if any.
pub fn latest_checkpoint(dir: &Path) -> Result<Option<PathBuf>, IoError> {
    Ok(list_checkpoints(dir)?.pop().map(|(_, p)| p))
}

/// A checkpoint of a folder that did not load, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct SkippedCheckpoint {
    /// The file.
    pub path: PathBuf,
    /// The load error.
    pub reason: String,
}

/// What [`newest_valid_checkpoint`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct NewestValid {
    /// The newest checkpoint that loads and its path; `None` when none does.
    pub found: Option<(PathBuf, Checkpoint)>,
    /// The newer ones that did not load, newest first.
    pub skipped: Vec<SkippedCheckpoint>,
}

/// The newest checkpoint of a folder that loads (a damaged or truncated newer one is skipped and
/// reported, so that a resume falls back to the one before).
pub fn newest_valid_checkpoint(dir: &Path) -> Result<NewestValid, IoError> {
    let mut skipped = Vec::new();
    for (_, path) in list_checkpoints(dir)?.into_iter().rev() {
        match load_checkpoint(&path) {
            Ok(ck) => {
                let found = Some((path, ck));
                return Ok(NewestValid { found, skipped });
            }
            Err(e) => skipped.push(SkippedCheckpoint {
                path,
                reason: e.to_string(),
            }),
        }
    }
    Ok(NewestValid {
        found: None,
        skipped,
    })
}

/// Saves `ckpt` as `dir/ckpt-STEP.safetensors` (atomically), then deletes all but the newest
/// `keep_last` checkpoints (`0` keeps all) and temp files left by interrupted writes of this
/// process's earlier runs. Returns the new file's path.
pub fn save_checkpoint_in_dir(
    dir: &Path,
    ckpt: &Checkpoint,
    keep_last: usize,
) -> Result<PathBuf, IoError> {
    fs::create_dir_all(dir).map_err(|e| IoError::os(dir, e))?;
    let path = dir.join(checkpoint_file_name(ckpt.step));
    save_checkpoint(&path, ckpt)?;
    let all = list_checkpoints(dir)?;
    if keep_last > 0 && all.len() > keep_last {
        for (_, old) in &all[..all.len() - keep_last] {
            fs::remove_file(old).map_err(|e| IoError::os(old, e))?;
        }
    }
    remove_stale_temps(dir);
    Ok(path)
}

/// Removes temp files of interrupted checkpoint writes whose writer process no longer exists.
fn remove_stale_temps(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(".ckpt-") else {
            continue;
        };
        let Some((_, tail)) = rest.split_once(".tmp-") else {
            continue;
        };
        let pid = tail.split('-').next().and_then(|p| p.parse::<u32>().ok());
        let alive = pid
            .is_some_and(|p| p == std::process::id() || Path::new(&format!("/proc/{p}")).exists());
        if !alive {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Name, element type and shape of one stored tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSummary {
    /// Tensor name as stored.
    pub name: String,
    /// Element type (`float32`, `int64`, ...).
    pub dtype: String,
    /// Shape (empty for scalars).
    pub shape: Vec<usize>,
}

/// What a checkpoint file holds, for `ffn inspect`.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointListing {
    /// `ffn-rs safetensors` or `TensorFlow tensor bundle`.
    pub format: &'static str,
    /// Every tensor, sorted by name.
    pub tensors: Vec<TensorSummary>,
    /// Header metadata (ffn-rs checkpoints) or `num_tensors` (TF bundles).
    pub metadata: BTreeMap<String, String>,
    /// The network the file holds, when it is an FFN model (checked the way a load would check it).
    pub model: Result<ModelConfig, String>,
}

fn st_dtype_name(d: Dtype) -> String {
    match d {
        Dtype::F32 => "float32".into(),
        Dtype::F64 => "float64".into(),
        Dtype::F16 => "float16".into(),
        Dtype::BF16 => "bfloat16".into(),
        Dtype::I64 => "int64".into(),
        Dtype::I32 => "int32".into(),
        Dtype::U8 => "uint8".into(),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// Lists the tensors of a checkpoint of either format (crc-checking every TF tensor).
pub fn inspect_checkpoint(path: &Path) -> Result<CheckpointListing, IoError> {
    if tf_bundle::is_tf_checkpoint(path) {
        let bundle = tf_bundle::TfBundle::open(path)?;
        for e in bundle.entries() {
            bundle.read_raw(&e.name)?;
        }
        let tensors = bundle
            .entries()
            .iter()
            .map(|e| TensorSummary {
                name: e.name.clone(),
                dtype: e.dtype.name(),
                shape: e.shape.clone(),
            })
            .collect();
        let mut metadata = BTreeMap::new();
        metadata.insert(
            "num_tensors".to_string(),
            bundle.entries().len().to_string(),
        );
        let model = tf_bundle::load_tf_model(path)
            .map(|(m, _)| m)
            .map_err(|e| e.to_string());
        return Ok(CheckpointListing {
            format: "TensorFlow tensor bundle",
            tensors,
            metadata,
            model,
        });
    }
    let bytes = fs::read(path).map_err(|e| IoError::os(path, e))?;
    let st = SafeTensors::deserialize(&bytes).map_err(|e| {
        bad(
            path,
            format!("neither a TensorFlow checkpoint nor a safetensors file: {e}"),
        )
    })?;
    let (_, header) = SafeTensors::read_metadata(&bytes).map_err(|e| bad(path, e.to_string()))?;
    let metadata: BTreeMap<String, String> = header
        .metadata()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    let mut tensors: Vec<TensorSummary> = st
        .iter()
        .map(|(name, t)| TensorSummary {
            name: name.to_string(),
            dtype: st_dtype_name(t.dtype()),
            shape: t.shape().to_vec(),
        })
        .collect();
    tensors.sort_by(|a, b| a.name.cmp(&b.name));
    let model = decode_checkpoint(path, &bytes)
        .map(|c| c.model)
        .map_err(|e| e.to_string());
    Ok(CheckpointListing {
        format: "ffn-rs safetensors",
        tensors,
        metadata,
        model,
    })
}

/// A checkpoint of `model` with zero weights, saved at `path`, for tests of code that loads models.
#[cfg(test)]
pub(crate) fn save_zero_checkpoint(path: &Path, model: ModelConfig) {
    let ck = Checkpoint {
        model,
        params: vec![0.0; model.num_params()],
        optimizer: vec![],
        step: 0,
        rng_state: [1, 2, 3, 4],
        training_config: serde_json::json!({}),
    };
    save_checkpoint(path, &ck).unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load_any_model;

    fn sample(depth: usize, step: u64) -> Checkpoint {
        let model = ModelConfig {
            depth,
            features: 4,
            fov: [9, 11, 13],
            deltas: [2, 3, 4],
        };
        let params: Vec<f32> = (0..model.num_params())
            .map(|i| (i as f32 * 0.37).sin())
            .collect();
        Checkpoint {
            model,
            optimizer: vec![
                ("momentum".into(), params.iter().map(|p| p * 0.5).collect()),
                ("t".into(), vec![step as f32]),
            ],
            params,
            step,
            rng_state: [1, u64::MAX, 3, 0x1234_5678_9abc_def0],
            training_config: json!({ "lr": 0.001, "optimizer": "momentum", "batch": 4 }),
        }
    }

    #[test]
    fn round_trip_keeps_everything() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.safetensors");
        let c = sample(2, 17);
        save_checkpoint(&path, &c).unwrap();
        assert_eq!(load_checkpoint(&path).unwrap(), c);
        assert_eq!(load_any_model(&path).unwrap(), (c.model, c.params.clone()));
        // No temp file left behind.
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
        // Tensors carry model_spec names and shapes.
        let bytes = fs::read(&path).unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        assert_eq!(
            st.tensor("conv0_a/weights").unwrap().shape(),
            [3, 3, 3, 2, 4]
        );
        assert_eq!(
            st.tensor("conv_lom/weights").unwrap().shape(),
            [1, 1, 1, 4, 1]
        );
        assert_eq!(st.tensor("optimizer/t").unwrap().shape(), [1]);
        // The header is the plain safetensors layout other readers (PyTorch) expect: u64 length,
        // JSON with dtype/shape/data_offsets per tensor and string metadata.
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
        assert_eq!(header["__metadata__"]["format"], FORMAT);
        assert_eq!(header["__metadata__"]["step"], "17");
        let w = &header["conv0_b/biases"];
        assert_eq!(
            (w["dtype"].as_str(), w["shape"].clone()),
            (Some("F32"), json!([4]))
        );
        let (a, b) = (
            w["data_offsets"][0].as_u64().unwrap() as usize,
            w["data_offsets"][1].as_u64().unwrap() as usize,
        );
        let spec = &c.model.param_specs()[3];
        assert_eq!(spec.name, "conv0_b/biases");
        assert_eq!(
            bytes_f32(&bytes[8 + n + a..8 + n + b]),
            c.params[spec.offset..spec.offset + 4]
        );
    }

    #[test]
    fn params_of_wrong_length_are_refused_before_writing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.safetensors");
        let mut c = sample(2, 1);
        c.params.pop();
        let e = save_checkpoint(&path, &c).unwrap_err().to_string();
        assert!(
            e.contains("params: expected") && e.contains("a.safetensors"),
            "{e}"
        );
        assert!(!path.exists());
    }

    #[test]
    fn one_checkpoint_always_gives_the_same_bytes() {
        let c = sample(2, 3);
        let first = encode_checkpoint(&c).unwrap();
        for _ in 0..8 {
            assert!(encode_checkpoint(&c).unwrap() == first, "other bytes");
        }
        let (_, header) = SafeTensors::read_metadata(&first).unwrap();
        let n = u64::from_le_bytes(first[..8].try_into().unwrap()) as usize;
        let text = std::str::from_utf8(&first[8..8 + n]).unwrap();
        let mut by_position: Vec<(usize, &str)> = header
            .metadata()
            .as_ref()
            .unwrap()
            .keys()
            .map(|k| (text.find(&format!("\"{k}\":")).unwrap(), k.as_str()))
            .collect();
        by_position.sort_unstable();
        let in_file: Vec<&str> = by_position.iter().map(|&(_, k)| k).collect();
        let mut sorted = in_file.clone();
        sorted.sort_unstable();
        assert_eq!(in_file.len(), 8);
        assert_eq!(in_file, sorted, "metadata keys in file order");
        assert_eq!(
            decode_checkpoint(Path::new("c.safetensors"), &first).unwrap(),
            c
        );
    }

    #[test]
    fn crash_before_rename_keeps_previous_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(checkpoint_file_name(5));
        let old = sample(2, 5);
        save_checkpoint(&path, &old).unwrap();
        let new = sample(2, 5);
        let mut newer = new.clone();
        newer.params[0] = 42.0;
        let bytes = encode_checkpoint(&newer).unwrap();
        for cut in [0, 7, bytes.len() / 2, bytes.len() - 1, bytes.len()] {
            assert!(write_atomic(&path, &bytes, Some(cut)).is_err());
            assert_eq!(load_checkpoint(&path).unwrap(), old, "cut at {cut}");
            assert_eq!(
                list_checkpoints(dir.path()).unwrap(),
                vec![(5, path.clone())]
            );
        }
        // The temp files of the "crashed" writes are still there, and are ignored.
        assert!(fs::read_dir(dir.path()).unwrap().count() > 1);
        // A truncated file under the real name (not something we write) is a clear error.
        let bad_path = dir.path().join("truncated.safetensors");
        fs::write(&bad_path, &bytes[..bytes.len() / 2]).unwrap();
        let e = load_checkpoint(&bad_path).unwrap_err().to_string();
        assert!(
            e.contains("truncated.safetensors") && e.contains("not a safetensors file"),
            "{e}"
        );
    }

    #[test]
    fn keep_last_n_and_latest() {
        let dir = tempfile::tempdir().unwrap();
        // A temp file left by a dead writer (a pid above the kernel limit never exists).
        let stale = dir
            .path()
            .join(".ckpt-0000000001.safetensors.tmp-4294967295-0");
        fs::write(&stale, b"partial").unwrap();
        for step in [10, 20, 30, 40] {
            save_checkpoint_in_dir(dir.path(), &sample(1, step), 2).unwrap();
        }
        let steps: Vec<u64> = list_checkpoints(dir.path())
            .unwrap()
            .into_iter()
            .map(|(s, _)| s)
            .collect();
        assert_eq!(steps, [30, 40]);
        assert_eq!(
            latest_checkpoint(dir.path()).unwrap().unwrap(),
            dir.path().join(checkpoint_file_name(40))
        );
        assert!(!stale.exists());
        assert_eq!(load_any_model(dir.path()).unwrap().0.depth, 1);
    }

    #[test]
    fn architecture_mismatch_lists_every_difference() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.safetensors");
        let c = sample(2, 1);
        save_checkpoint(&path, &c).unwrap();
        assert!(load_checkpoint_for(&path, &c.model).is_ok());
        let want = ModelConfig {
            depth: 12,
            features: 32,
            fov: [9, 11, 13],
            deltas: [8, 8, 8],
        };
        let e = load_checkpoint_for(&path, &want).unwrap_err().to_string();
        assert!(
            e.contains("a.safetensors: checkpoint architecture differs"),
            "{e}"
        );
        assert!(e.contains("model.depth: expected 12, found 2"), "{e}");
        assert!(e.contains("model.features: expected 32, found 4"), "{e}");
        assert!(
            e.contains("model.deltas: expected [8, 8, 8], found [2, 3, 4]"),
            "{e}"
        );
        assert!(!e.contains("model.fov"), "{e}");
    }

    #[test]
    fn tampered_files_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.safetensors");
        let c = sample(1, 1);
        // A tensor of the wrong shape under a model_spec name.
        let mut views = Vec::new();
        let w = f32_bytes(&[0.0; 8]);
        views.push((
            "conv0_a/weights".to_string(),
            TensorView::new(Dtype::F32, vec![8], &w).unwrap(),
        ));
        let mut meta = HashMap::new();
        meta.insert("format".to_string(), FORMAT.to_string());
        meta.insert("format_version".to_string(), "1".to_string());
        meta.insert("model".to_string(), model_json(&c.model).to_string());
        meta.insert("step".to_string(), "1".to_string());
        meta.insert("rng_state".to_string(), "[1,2,3,4]".to_string());
        meta.insert("optimizer".to_string(), "[]".to_string());
        meta.insert("training_config".to_string(), "{}".to_string());
        fs::write(
            &path,
            safetensors::serialize(views, Some(meta.clone())).unwrap(),
        )
        .unwrap();
        let e = load_checkpoint(&path).unwrap_err().to_string();
        assert!(
            e.contains("tensor 'conv0_a/weights': expected shape [3, 3, 3, 2, 4], found [8]"),
            "{e}"
        );
        // A plain safetensors file of somebody else.
        meta.insert("format".to_string(), "pt".to_string());
        fs::write(
            &path,
            safetensors::serialize(Vec::<(String, TensorView)>::new(), Some(meta)).unwrap(),
        )
        .unwrap();
        let e = load_checkpoint(&path).unwrap_err().to_string();
        assert!(
            e.contains("metadata 'format': expected 'ffn-rs checkpoint', found 'pt'"),
            "{e}"
        );
        let e = load_checkpoint(&dir.path().join("none.safetensors"))
            .unwrap_err()
            .to_string();
        assert!(e.ends_with("none.safetensors: file not found"), "{e}");
    }

    #[test]
    fn damaged_bytes_nan_weights_and_huge_architectures_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.safetensors");
        let c = sample(1, 1);
        save_checkpoint(&path, &c).unwrap();
        let mut bytes = fs::read(&path).unwrap();
        // The first data byte (lowest mantissa byte of the first value): still finite.
        let header = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        bytes[8 + header] ^= 1;
        fs::write(&path, &bytes).unwrap();
        let e = load_checkpoint(&path).unwrap_err().to_string();
        assert!(
            e.contains("tensors_crc32c") && e.contains("damaged bytes"),
            "{e}"
        );

        let mut nan = c.clone();
        nan.params[5] = f32::NAN;
        save_checkpoint(&path, &nan).unwrap();
        let e = load_checkpoint(&path).unwrap_err().to_string();
        assert!(e.contains("at index 5 is not finite"), "{e}");

        // Metadata declaring 10^7 features over a file without tensors: an error, no allocation.
        let mut meta = HashMap::new();
        for (k, v) in [
            ("format", FORMAT),
            ("format_version", FORMAT_VERSION),
            (
                "model",
                r#"{"depth":1,"features":10000000,"fov":[9,9,9],"deltas":[2,2,2]}"#,
            ),
            ("step", "1"),
            ("rng_state", "[1,2,3,4]"),
            ("optimizer", "[]"),
            ("training_config", "{}"),
        ] {
            meta.insert(k.to_string(), v.to_string());
        }
        let empty = Vec::<(String, TensorView)>::new();
        fs::write(&path, safetensors::serialize(empty, Some(meta)).unwrap()).unwrap();
        let e = load_checkpoint(&path).unwrap_err().to_string();
        assert!(e.contains("tensor 'conv0_a/weights' missing"), "{e}");
    }

    #[test]
    fn resume_falls_back_past_a_truncated_newest_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        save_checkpoint_in_dir(dir.path(), &sample(1, 4), 0).unwrap();
        let newest = save_checkpoint_in_dir(dir.path(), &sample(1, 8), 0).unwrap();
        let bytes = fs::read(&newest).unwrap();
        fs::write(&newest, &bytes[..bytes.len() / 2]).unwrap();
        let NewestValid { found, skipped } = newest_valid_checkpoint(dir.path()).unwrap();
        let (path, ck) = found.unwrap();
        assert_eq!(
            (ck.step, path.file_name().unwrap().to_str().unwrap()),
            (4, "ckpt-0000000004.safetensors")
        );
        assert_eq!(skipped.len(), 1);
        assert_eq!(skipped[0].path, newest);
        assert!(
            skipped[0].reason.contains("truncated"),
            "{}",
            skipped[0].reason
        );
        fs::write(dir.path().join("ckpt-0000000004.safetensors"), b"junk").unwrap();
        let NewestValid { found, skipped } = newest_valid_checkpoint(dir.path()).unwrap();
        assert!(found.is_none() && skipped.len() == 2);
    }

    /// Metadata keys of a checkpoint declaring `model` (JSON), without tensors.
    fn bare_checkpoint(model: &str) -> Vec<u8> {
        let meta: HashMap<String, String> = [
            ("format", FORMAT),
            ("format_version", FORMAT_VERSION),
            ("model", model),
            ("step", "1"),
            ("rng_state", "[1,2,3,4]"),
            ("optimizer", "[]"),
            ("training_config", "{}"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let empty = Vec::<(String, TensorView)>::new();
        safetensors::serialize(empty, Some(meta)).unwrap()
    }

    /// Found while writing the `checkpoint` fuzz target: metadata declaring depth 10^12 listed
    /// 4 * 10^12 parameter specs (an allocation abort) and 2^62 features overflowed the
    /// parameter count (a panic in debug builds), before any tensor was looked at.
    #[test]
    fn fuzz_metadata_of_huge_depth_or_width_is_refused() {
        let p = Path::new("m.safetensors");
        let deep = r#"{"depth":1000000000000,"features":1,"fov":[9,9,9],"deltas":[2,2,2]}"#;
        let e = decode_checkpoint(p, &bare_checkpoint(deep))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("m.safetensors") && e.contains("model.depth: expected at most 1024"),
            "{e}"
        );
        let wide = r#"{"depth":1,"features":4611686018427387904,"fov":[9,9,9],"deltas":[2,2,2]}"#;
        let e = decode_checkpoint(p, &bare_checkpoint(wide))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("model.features") && e.contains("overflows"),
            "{e}"
        );
    }
}
