//! Shared by the fuzz targets (each links it with `use ffn_fuzz as _;`): a global allocator that
//! refuses any single allocation over [`MAX_ALLOCATION`], so that Rust's allocation-failure
//! handler aborts and libFuzzer saves the input as a crash. libFuzzer's own `-malloc_limit_mb`
//! needs a sanitizer's malloc hooks, which a `-s none` build does not have; its `-rss_limit_mb`
//! still bounds the total.

use std::alloc::{GlobalAlloc, Layout, System};

/// The largest single allocation a parser may make on fuzz input (1 GiB, libFuzzer's
/// `-malloc_limit_mb=1024`).
pub const MAX_ALLOCATION: usize = 1 << 30;

/// The system allocator with a size limit per allocation.
pub struct Limited;

// SAFETY: every call is forwarded to `System` unchanged, or answered with null (allocation
// failure), which the `GlobalAlloc` contract allows.
unsafe impl GlobalAlloc for Limited {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > MAX_ALLOCATION {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout is passed on as it is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > MAX_ALLOCATION {
            return std::ptr::null_mut();
        }
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > MAX_ALLOCATION {
            return std::ptr::null_mut();
        }
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Limited = Limited;
