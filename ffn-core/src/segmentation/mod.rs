//! Whole-volume segmentation bookkeeping: tiling plans, id relabelling, union-find, reconciliation
//! of tiles into global ids, consensus by intersection, and slice overlays for pictures.
//!
//! Everything here is pure computation on label buffers (`[z][y][x]` flattened, `u64` ids, 0 =
//! background); `ffn infer-tiled`, `ffn view` and `ffn export` add the files and processes.
//!
//! - [`tiling`]: overlapping sub-volumes of a volume, with the "core" each tile owns.
//! - [`reconcile`]: segments that meet in a tile overlap are matched by overlap size and merged into
//!   global ids ([`reconcile::MergeRule`] documents the rule and its thresholds).
//! - [`consensus`]: google/ffn's `split_segmentation_by_intersection`.
//! - [`relabel`]: contiguous ids, in a canonical order.
//! - [`union_find`]: disjoint sets over dense indices.
//! - [`overlay`]: a coloured segmentation slice blended over a grey image slice (RGB bytes).

pub mod consensus;
pub mod overlay;
pub mod reconcile;
pub mod relabel;
pub mod tiling;
pub mod union_find;

#[cfg(test)]
mod tests;

pub use consensus::split_segmentation_by_intersection;
pub use overlay::{render_overlay, segment_colour};
pub use reconcile::{
    MergeRule, PairStats, ReconcileSummary, Reconciler, Reconciliation, TileLabels, TileSource,
    reconcile, reconcile_ids,
};
pub use relabel::{relabel_first_appearance, relabel_sequential};
pub use tiling::{Tile, TilePlan};
pub use union_find::UnionFind;

use alloc::string::String;

/// Errors of the segmentation utilities; every variant names the field or buffer it checked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SegmentationError {
    /// A buffer has the wrong number of elements.
    #[error("{what}: expected {expected} values, found {actual}")]
    LengthMismatch {
        /// What the buffer is.
        what: String,
        /// Elements expected.
        expected: usize,
        /// Elements found.
        actual: usize,
    },
    /// A tiling or reconciliation parameter that cannot work.
    #[error("{field}: {reason}")]
    InvalidParameter {
        /// The parameter, e.g. `tile_overlap`.
        field: &'static str,
        /// What is wrong, with the expected and the found value.
        reason: String,
    },
}

fn prod(s: [usize; 3]) -> usize {
    s[0] * s[1] * s[2]
}
