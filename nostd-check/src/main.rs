//! A `#![no_std]` program that runs real ffn-core work: it builds a small FFN network, runs a forward
//! pass and a flood fill on a synthetic in-memory volume ([`work::run`]) and prints the results
//! through libc's `write`. It owns the panic handler and the global allocator (libc's
//! `aligned_alloc` / `free`); if anything pulls `std` in, the panic handler clashes with std's and
//! the build fails. Exit status 0 on success, 1 on an error, abort on a panic.
#![no_std]
#![no_main]

extern crate alloc;

mod work;

use core::alloc::{GlobalAlloc, Layout};
use core::fmt::{self, Write};

#[link(name = "c")]
unsafe extern "C" {
    fn aligned_alloc(alignment: usize, size: usize) -> *mut u8;
    fn free(ptr: *mut u8);
    fn write(fd: i32, buf: *const u8, count: usize) -> isize;
    fn abort() -> !;
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

/// A file descriptor written through libc.
struct Fd(i32);

impl Write for Fd {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut b = s.as_bytes();
        while !b.is_empty() {
            let n = unsafe { write(self.0, b.as_ptr(), b.len()) };
            if n <= 0 {
                return Err(fmt::Error);
            }
            b = &b[n as usize..];
        }
        Ok(())
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    let _ = writeln!(Fd(2), "ffn-nostd-check: {info}");
    unsafe { abort() }
}

// The prebuilt `alloc` and `core` are compiled with unwinding, so their cleanup code refers to the
// unwinder's entry points even though this program aborts on panic (panic = "abort") and never
// unwinds. Without std nothing provides them; these stubs are never called.

/// Stub of the unwinder's resume entry point: unreachable with panic = "abort".
#[unsafe(no_mangle)]
pub extern "C" fn _Unwind_Resume() -> ! {
    unsafe { abort() }
}

/// Stub of Rust's personality routine: unreachable with panic = "abort".
#[unsafe(no_mangle)]
pub extern "C" fn rust_eh_personality() {}

/// The C entry point (no Rust runtime: `#![no_main]`).
#[unsafe(no_mangle)]
pub extern "C" fn main(_argc: i32, _argv: *const *const u8) -> i32 {
    match work::run() {
        Ok(report) => match work::print(&report, &mut Fd(1)) {
            Ok(()) => 0,
            Err(_) => 1,
        },
        Err(e) => {
            let _ = writeln!(Fd(2), "ffn-nostd-check: {e}");
            1
        }
    }
}
