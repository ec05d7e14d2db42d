//! The driver half of [`cuda_status`](super::cuda_status): `libcuda.so.1`, checked with our
//! own `dlopen` before cudarc is touched.
//!
//! cudarc's dynamic loading panics when it finds no `libcuda` (`culib()`) or a function is
//! missing from it. So `libcuda.so.1` is opened here first: if that fails, cudarc is never
//! called and the `dlopen` error is the answer. If it opens, cudarc's own search (whose
//! candidates include `libcuda.so.1`) cannot fail, and every function about to be called is
//! looked up in the library cudarc picked before calling it. No `catch_unwind` is needed.

use std::ffi::{CStr, c_int, c_void};

use cudarc::driver::{result, sys};

use super::status::LibStatus;

/// The CUDA driver's soname.
pub(super) const SONAME: &str = "libcuda.so.1";

/// The driver functions the probe calls, looked up before cudarc calls them.
const FUNCTIONS: [&str; 5] = [
    "cuDriverGetVersion",
    "cuInit",
    "cuDeviceGetCount",
    "cuGetErrorName",
    "cuGetErrorString",
];

/// Probes the driver: its library, version, `cuInit(0)`, and the device count.
pub(super) fn probe() -> (LibStatus, Option<u32>) {
    let mut status = LibStatus {
        source: Some("system".to_string()),
        ..LibStatus::default()
    };
    // Held until cudarc has its own handle, so that its dlopen finds this one.
    // SAFETY: loading the NVIDIA driver runs its initialisers, which is what using it means.
    let presence = unsafe {
        libloading::os::unix::Library::open(
            Some(SONAME),
            libloading::os::unix::RTLD_LAZY | libloading::os::unix::RTLD_LOCAL,
        )
    };
    if let Err(error) = presence {
        let text = error.to_string();
        status.error = Some(if text.contains("No such file") {
            format!("{SONAME} not found: no NVIDIA driver on this machine (dlopen: {text})")
        } else {
            format!("{SONAME} could not be loaded: {text}")
        });
        return (status, None);
    }
    // SAFETY: libcuda.so.1 opened above and is still open, and it is one of culib()'s
    // candidates, so culib() finds a library instead of panicking.
    let library = unsafe { sys::culib() };
    let mut address: *mut c_void = std::ptr::null_mut();
    let mut missing = None;
    for name in FUNCTIONS {
        // SAFETY: only the symbol's address is read.
        match unsafe { library.get::<*mut c_void>(name.as_bytes()) } {
            Ok(symbol) if address.is_null() => address = *symbol,
            Ok(_) => {}
            Err(_) => missing = missing.or(Some(name)),
        }
    }
    status.path = if address.is_null() {
        None
    } else {
        loaded_path(address)
    };
    if let Some(name) = missing {
        status.error = Some(format!(
            "the CUDA driver library {} lacks {name} (too old, or not the driver)",
            status.path.as_deref().unwrap_or(SONAME)
        ));
        return (status, None);
    }
    status.found = true;

    let mut code: c_int = 0;
    // SAFETY: present (checked above); writes one int.
    match unsafe { sys::cuDriverGetVersion(&mut code) }.result() {
        Ok(()) => status.version = Some(format!("{}.{}", code / 1000, code % 1000 / 10)),
        Err(error) => {
            status.error = Some(format!("cuDriverGetVersion failed: {}", describe(error)));
            return (status, None);
        }
    }
    if let Err(error) = result::init() {
        let no_device = error.0 == sys::CUresult::CUDA_ERROR_NO_DEVICE;
        status.error = Some(format!("cuInit failed: {}", describe(error)));
        return (status, no_device.then_some(0));
    }
    match result::device::get_count() {
        Ok(count) => (status, Some(u32::try_from(count).unwrap_or(0))),
        Err(error) => {
            status.error = Some(format!("cuDeviceGetCount failed: {}", describe(error)));
            (status, None)
        }
    }
}

/// `CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected`.
fn describe(error: result::DriverError) -> String {
    let text = |c: Result<&CStr, result::DriverError>| {
        c.map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "?".to_string())
    };
    format!(
        "{} ({}): {}",
        text(error.error_name()),
        error.0 as u32,
        text(error.error_string())
    )
}

/// The file holding `address`, from `dladdr`.
fn loaded_path(address: *mut c_void) -> Option<String> {
    // SAFETY: Dl_info is plain data; dladdr only writes it.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: any address may be asked about.
    let found = unsafe { libc::dladdr(address, &mut info) } != 0;
    if !found || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: non-null, NUL-terminated, owned by the loader while the library is mapped.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    Some(name.to_string_lossy().into_owned())
}
