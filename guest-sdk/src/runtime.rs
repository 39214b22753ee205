//! The runtime a `no_std` plugin needs on wasm32: an allocator, a panic handler and the
//! canonical ABI's `cabi_realloc` (which `std` plugins get from wasi-libc).

/// Installs the SDK runtime in a `no_std` plugin crate: a global allocator (talc, a third the
/// code of dlmalloc: the host compiles a plugin ~20% faster, so hot swaps are quicker), a panic
/// handler that logs the panic at error level through [`log`](crate::log) and then traps, and
/// the `cabi_realloc` export the component model needs. Expands to nothing off wasm32, so
/// native `cargo test` keeps `std`.
///
/// Use it once, at the crate root, in a crate that is `no_std` on wasm32:
///
/// ```ignore
/// #![cfg_attr(target_arch = "wasm32", no_std)]
/// eventpipe_guest::no_std_runtime!();
/// ```
///
/// A `std` crate must not use it (its allocator, panic handler and `cabi_realloc` come from
/// `std` and wasi-libc; the duplicates fail to link).
#[macro_export]
macro_rules! no_std_runtime {
    () => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            #[global_allocator]
            static ALLOCATOR: $crate::__private::talc::wasm::WasmDynamicTalc =
                $crate::__private::talc::wasm::new_wasm_dynamic_allocator();

            // wasi-libc's string functions (`memcmp`, …), which compiled code may call and a
            // `std` build gets from `std`'s own link to libc. Only the members used are linked.
            #[link(name = "c")]
            unsafe extern "C" {}

            #[panic_handler]
            fn panic(info: &::core::panic::PanicInfo<'_>) -> ! {
                $crate::__private::panic(info)
            }

            /// The canonical ABI allocator export (`cabi_realloc`).
            #[unsafe(no_mangle)]
            unsafe extern "C" fn cabi_realloc(
                old_ptr: *mut u8,
                old_len: usize,
                align: usize,
                new_len: usize,
            ) -> *mut u8 {
                // SAFETY: the caller (the component model's lowering) follows `cabi_realloc`'s
                // contract, which is the contract of `__private::cabi_realloc`.
                unsafe { $crate::__private::cabi_realloc(old_ptr, old_len, align, new_len) }
            }
        };
    };
}

/// Logs the panic at error level (message and location, at most 512 bytes, no allocation),
/// then traps. A panic while logging traps at once.
#[cold]
pub fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    use core::sync::atomic::{AtomicBool, Ordering};
    static PANICKING: AtomicBool = AtomicBool::new(false);
    if !PANICKING.swap(true, Ordering::Relaxed) {
        let mut buf = StackBuf { bytes: [0; 512], len: 0 };
        let _ = core::fmt::write(&mut buf, format_args!("plugin panicked: {info}"));
        crate::log::log_fields(crate::log::Level::Error, buf.as_str(), &[]);
    }
    trap()
}

fn trap() -> ! {
    #[cfg(target_arch = "wasm32")]
    core::arch::wasm32::unreachable();
    #[cfg(not(target_arch = "wasm32"))]
    loop {
        core::hint::spin_loop();
    }
}

/// A fixed buffer that keeps the first 512 bytes written (cut at a character boundary).
struct StackBuf {
    bytes: [u8; 512],
    len: usize,
}

impl StackBuf {
    fn as_str(&self) -> &str {
        // Only whole `&str`s (or their char-boundary prefixes) are copied in.
        core::str::from_utf8(&self.bytes[..self.len]).unwrap_or("plugin panicked")
    }
}

impl core::fmt::Write for StackBuf {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let room = self.bytes.len() - self.len;
        let mut n = s.len().min(room);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        self.bytes[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// The canonical ABI allocator (`cabi_realloc`) on the global allocator: allocates when
/// `old_len == 0`, reallocates otherwise; traps when memory is exhausted.
///
/// # Safety
/// `align` is a power of two and `new_len`, rounded up to `align`, does not overflow `isize`;
/// when `old_len != 0`, `old_ptr` was returned by this function with `old_len` and `align`.
pub unsafe fn cabi_realloc(old_ptr: *mut u8, old_len: usize, align: usize, new_len: usize) -> *mut u8 {
    use alloc::alloc::{Layout, alloc, realloc};
    if old_len == 0 && new_len == 0 {
        return align as *mut u8;
    }
    // SAFETY: the layout rules are the caller's contract (see `# Safety`).
    let ptr = unsafe {
        if old_len == 0 {
            alloc(Layout::from_size_align_unchecked(new_len, align))
        } else {
            realloc(old_ptr, Layout::from_size_align_unchecked(old_len, align), new_len)
        }
    };
    if ptr.is_null() {
        trap();
    }
    ptr
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::fmt::Write;

    #[test]
    fn stack_buf_truncates_at_char_boundaries() {
        let mut b = StackBuf { bytes: [0; 512], len: 0 };
        for _ in 0..300 {
            b.write_str("é").unwrap();
        }
        assert_eq!(b.len, 512);
        assert_eq!(b.as_str().chars().count(), 256);
        b.write_str("more").unwrap();
        assert_eq!(b.len, 512);
    }

    #[test]
    fn cabi_realloc_allocates_and_grows() {
        unsafe {
            let p = cabi_realloc(core::ptr::null_mut(), 0, 8, 16);
            assert!(!p.is_null());
            p.write_bytes(7, 16);
            let q = cabi_realloc(p, 16, 8, 64);
            assert_eq!(*q.add(15), 7);
            alloc::alloc::dealloc(q, alloc::alloc::Layout::from_size_align(64, 8).unwrap());
            assert_eq!(cabi_realloc(core::ptr::null_mut(), 0, 4, 0) as usize, 4);
        }
    }
}
