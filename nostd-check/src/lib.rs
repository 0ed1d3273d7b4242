//! A `#![no_std]` static library that calls into ffn-core. It owns the panic handler and the global
//! allocator; if anything pulls `std` in, the panic handler clashes with std's and the build fails.
#![no_std]

extern crate alloc;

use core::alloc::{GlobalAlloc, Layout};
use ffn_core::model_spec::ModelConfig;

unsafe extern "C" {
    fn aligned_alloc(alignment: usize, size: usize) -> *mut u8;
    fn free(ptr: *mut u8);
}

struct LibcAllocator;

unsafe impl GlobalAlloc for LibcAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let align = layout.align().max(core::mem::size_of::<usize>());
        let size = layout.size().div_ceil(align) * align;
        unsafe { aligned_alloc(align, size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        unsafe { free(ptr) }
    }
}

#[global_allocator]
static ALLOCATOR: LibcAllocator = LibcAllocator;

#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

/// Number of parameters of a `convstack_3d` of the given depth and features (FOV 33^3).
#[unsafe(no_mangle)]
pub extern "C" fn ffn_nostd_num_params(depth: usize, features: usize) -> usize {
    let cfg = ModelConfig { depth, features, ..ModelConfig::default() };
    let mut rng = ffn_core::rng::Rng::new(depth as u64);
    let _ = rng.truncated_normal(0.01);
    cfg.num_params()
}
