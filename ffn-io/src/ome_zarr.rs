//! OME-Zarr (OME-NGFF) multiscale metadata: a group whose attributes list its scale levels
//! (`multiscales[0].datasets[i].path`, full resolution first), as NGFF 0.4 writes it (`multiscales`
//! at the top of the attributes, Zarr v2) and NGFF 0.5 (`ome.multiscales`, Zarr v3).
//!
//! - Reading: a spec naming such a group (`image.ome.zarr`, `store.zarr/group`) reads its first,
//!   full-resolution level; a level by path is the array itself (`image.ome.zarr/1`).
//! - Writing: an array written as a numbered level of a `.ome.zarr` store (`out.ome.zarr/0`,
//!   `out.ome.zarr/labels/2`) is recorded in its group's NGFF 0.5 metadata, axes z, y, x (space),
//!   with a scale of 1 per voxel for level 0 and, for other levels, the ratio of level 0's shape to
//!   theirs.

use serde_json::{Map, Value, json};

/// The `multiscales` list of the attributes, NGFF 0.5 (`ome.multiscales`) or 0.4 (`multiscales`).
fn multiscales(attrs: &Map<String, Value>) -> Option<&Vec<Value>> {
    attrs
        .get("ome")
        .and_then(|o| o.get("multiscales"))
        .or_else(|| attrs.get("multiscales"))
        .and_then(Value::as_array)
}

/// The path of the first dataset (the full-resolution level) of the group's first multiscale
/// image, if its attributes have OME multiscales metadata.
pub(crate) fn first_level(attrs: &Map<String, Value>) -> Option<String> {
    multiscales(attrs)?
        .first()?
        .get("datasets")?
        .as_array()?
        .first()?
        .get("path")?
        .as_str()
        .map(|p| p.trim_matches('/').to_string())
        .filter(|p| !p.is_empty() && !p.split('/').any(|c| c == ".."))
}

/// Whether a store folder name is an OME-Zarr store (`*.ome.zarr`).
pub(crate) fn is_ome_store(name: &str) -> bool {
    name.trim_end_matches('/')
        .to_ascii_lowercase()
        .ends_with(".ome.zarr")
}

/// Records the level `path` (an array of `shape` in the group) in the group's NGFF 0.5
/// multiscales metadata, keeping the levels sorted by number; `level0` is the shape of level 0
/// when it exists (for the level's scale).
pub(crate) fn record_level(
    attrs: &mut Map<String, Value>,
    path: &str,
    shape: [usize; 3],
    level0: Option<[usize; 3]>,
) {
    let scale: Vec<f64> = (0..3)
        .map(|a| match level0 {
            Some(s0) if shape[a] > 0 => s0[a] as f64 / shape[a] as f64,
            _ => 1.0,
        })
        .collect();
    let dataset = json!({
        "path": path,
        "coordinateTransformations": [{"type": "scale", "scale": scale}],
    });
    let mut datasets: Vec<Value> = multiscales(attrs)
        .and_then(|m| m.first())
        .and_then(|m| m.get("datasets"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    datasets.retain(|d| d.get("path").and_then(Value::as_str) != Some(path));
    datasets.push(dataset);
    let number = |d: &Value| {
        d.get("path")
            .and_then(Value::as_str)
            .and_then(|p| p.parse::<u64>().ok())
            .unwrap_or(u64::MAX)
    };
    datasets.sort_by_key(number);
    let axes: Vec<Value> = ["z", "y", "x"]
        .iter()
        .map(|n| json!({"name": n, "type": "space"}))
        .collect();
    attrs.insert(
        "ome".into(),
        json!({
            "version": "0.5",
            "multiscales": [{"name": "ffn-rs", "axes": axes, "datasets": datasets}],
        }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_found_in_both_versions_and_recorded_in_order() {
        let v04 = json!({"multiscales": [{"version": "0.4", "datasets": [{"path": "s0"}, {"path": "s1"}]}]});
        assert_eq!(first_level(v04.as_object().unwrap()).as_deref(), Some("s0"));
        let mut attrs = Map::new();
        assert_eq!(first_level(&attrs), None);
        record_level(&mut attrs, "1", [8, 16, 16], Some([16, 32, 32]));
        record_level(&mut attrs, "0", [16, 32, 32], None);
        assert_eq!(first_level(&attrs).as_deref(), Some("0"));
        let ms = &attrs["ome"]["multiscales"][0];
        assert_eq!(ms["datasets"][1]["path"], "1");
        assert_eq!(
            ms["datasets"][1]["coordinateTransformations"][0]["scale"],
            json!([2.0, 2.0, 2.0])
        );
        assert_eq!(ms["axes"][2]["name"], "x");
        let bad = json!({"multiscales": [{"datasets": [{"path": "../up"}]}]});
        assert_eq!(first_level(bad.as_object().unwrap()), None);
        assert!(is_ome_store("a/img.OME.zarr") && !is_ome_store("img.zarr"));
    }
}
