//! The Helm library's C ABI (`libhelm_c.so`): handles are `u64`, inputs and outputs are
//! JSON strings, every returned string is freed with `helm_free_string`, and calls return
//! an `int32` status (0 = OK) with a detail message in an error out-parameter.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_char, c_void};
use std::path::Path;

use super::HelmError;

type Str = *const c_char;
type Out = *mut *mut c_char;

/// Function pointers resolved from the library; valid while `_lib` is loaded.
pub(super) struct Ffi {
    free_string: unsafe extern "C" fn(*mut c_void),
    c_version: unsafe extern "C" fn() -> *mut c_char,
    config_new: unsafe extern "C" fn(Str, *mut u64, Out) -> i32,
    config_free: unsafe extern "C" fn(u64, Out) -> i32,
    chart_load: unsafe extern "C" fn(Str, *mut u64, Out) -> i32,
    chart_free: unsafe extern "C" fn(u64, Out) -> i32,
    render: unsafe extern "C" fn(u64, Str, Str, Out, Out) -> i32,
    install: unsafe extern "C" fn(u64, u64, u64, Str, Str, Str, Str, Out, Out) -> i32,
    upgrade: unsafe extern "C" fn(u64, u64, u64, Str, Str, Str, Str, Out, Out) -> i32,
    uninstall: unsafe extern "C" fn(u64, Str, Str, Out, Out) -> i32,
    list: unsafe extern "C" fn(u64, Str, Out, Out) -> i32,
    status: unsafe extern "C" fn(u64, Str, Str, Out, Out) -> i32,
    history: unsafe extern "C" fn(u64, Str, Str, Out, Out) -> i32,
    _lib: libloading::Library,
}

/// Status codes of `helm_error_code` (append-only upstream).
pub(super) const NOT_FOUND: i32 = -7;

fn cstring(s: &str, what: &str) -> Result<CString, HelmError> {
    CString::new(s).map_err(|_| HelmError::InvalidInput(format!("{what} contains a NUL byte")))
}

fn opt_ptr(s: &Option<CString>) -> Str {
    s.as_ref().map_or(std::ptr::null(), |c| c.as_ptr())
}

impl Ffi {
    pub(super) fn load(path: &Path) -> Result<Ffi, HelmError> {
        let fail = |e: libloading::Error| HelmError::Library {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
        // SAFETY: loading a shared library runs its initialisers; libhelm_c is a Go
        // c-shared library whose initialisers only start the Go runtime.
        let lib = unsafe { libloading::Library::new(path) }.map_err(fail)?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the signature matches the declaration in helm_c.h (mirrored by
                // the wheel's `_native.py`), and the pointer is only used while `lib` lives.
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }.map_err(fail)?
            };
        }
        Ok(Ffi {
            free_string: sym!("helm_free_string"),
            c_version: sym!("helm_c_version"),
            config_new: sym!("helm_config_new"),
            config_free: sym!("helm_config_free"),
            chart_load: sym!("helm_chart_load"),
            chart_free: sym!("helm_chart_free"),
            render: sym!("helm_render"),
            install: sym!("helm_install"),
            upgrade: sym!("helm_upgrade"),
            uninstall: sym!("helm_uninstall"),
            list: sym!("helm_list"),
            status: sym!("helm_status"),
            history: sym!("helm_history"),
            _lib: lib,
        })
    }

    /// Copies and frees a library-owned string.
    fn take(&self, ptr: *mut c_char) -> Option<String> {
        if ptr.is_null() {
            return None;
        }
        // SAFETY: the library returned a NUL-terminated string it allocated; we copy it
        // and then free it exactly once with the library's own deallocator.
        let s = unsafe { CStr::from_ptr(ptr) }
            .to_string_lossy()
            .into_owned();
        unsafe { (self.free_string)(ptr.cast()) };
        Some(s)
    }

    fn finish(
        &self,
        code: i32,
        out: *mut c_char,
        err: *mut c_char,
        action: &str,
    ) -> Result<String, HelmError> {
        let detail = self.take(err);
        let result = self.take(out);
        if code == 0 {
            return Ok(result.unwrap_or_default());
        }
        let message = detail.unwrap_or_else(|| format!("status {code}"));
        Err(if code == NOT_FOUND {
            HelmError::NotFound(message)
        } else {
            HelmError::Helm {
                action: action.to_string(),
                code,
                message,
            }
        })
    }

    pub(super) fn version(&self) -> String {
        // SAFETY: no arguments; returns a library-owned string or NULL.
        let p = unsafe { (self.c_version)() };
        self.take(p).unwrap_or_else(|| "unknown".into())
    }

    pub(super) fn config_new(&self, options: &str) -> Result<u64, HelmError> {
        let opts = cstring(options, "config options")?;
        let mut handle = 0u64;
        let mut err: *mut c_char = std::ptr::null_mut();
        // SAFETY: valid C string in; out-parameters point to live locals.
        let code = unsafe { (self.config_new)(opts.as_ptr(), &mut handle, &mut err) };
        self.finish(code, std::ptr::null_mut(), err, "config")?;
        Ok(handle)
    }

    pub(super) fn config_free(&self, handle: u64) {
        let mut err: *mut c_char = std::ptr::null_mut();
        // SAFETY: handle came from config_new and is freed once (by the owner's Drop).
        let code = unsafe { (self.config_free)(handle, &mut err) };
        let _ = self.finish(code, std::ptr::null_mut(), err, "config free");
    }

    /// Renders a chart directory offline: template path → manifest (JSON map).
    pub(super) fn render(
        &self,
        chart: &Path,
        values: &str,
        options: &str,
    ) -> Result<String, HelmError> {
        let path = cstring(&chart.to_string_lossy(), "chart path")?;
        let (values, options) = (
            cstring(values, "values")?,
            cstring(options, "render options")?,
        );
        let mut handle = 0u64;
        let mut err: *mut c_char = std::ptr::null_mut();
        // SAFETY: valid C strings in; out-parameters point to live locals.
        let code = unsafe { (self.chart_load)(path.as_ptr(), &mut handle, &mut err) };
        self.finish(code, std::ptr::null_mut(), err, "chart load")?;
        let (mut out, mut err): (*mut c_char, *mut c_char) =
            (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: the chart handle is live until chart_free below.
        let code = unsafe {
            (self.render)(
                handle,
                values.as_ptr(),
                options.as_ptr(),
                &mut out,
                &mut err,
            )
        };
        let result = self.finish(code, out, err, "render");
        let mut err: *mut c_char = std::ptr::null_mut();
        // SAFETY: frees the handle loaded above, once.
        let code = unsafe { (self.chart_free)(handle, &mut err) };
        let _ = self.finish(code, std::ptr::null_mut(), err, "chart free");
        result
    }

    /// `helm_install` or `helm_upgrade` with a chart reference (a local path).
    pub(super) fn install_or_upgrade(
        &self,
        upgrade: bool,
        config: u64,
        chart: &Path,
        name: &str,
        values: &str,
        options: &str,
    ) -> Result<String, HelmError> {
        let chart = cstring(&chart.to_string_lossy(), "chart path")?;
        let (name, values, options) = (
            cstring(name, "release name")?,
            cstring(values, "values")?,
            cstring(options, "options")?,
        );
        let (mut out, mut err): (*mut c_char, *mut c_char) =
            (std::ptr::null_mut(), std::ptr::null_mut());
        let f = if upgrade { self.upgrade } else { self.install };
        // SAFETY: config is a live handle; context and chart handles 0 mean "none"; all
        // strings are valid for the call; out-parameters point to live locals.
        let code = unsafe {
            f(
                config,
                0,
                0,
                chart.as_ptr(),
                name.as_ptr(),
                values.as_ptr(),
                options.as_ptr(),
                &mut out,
                &mut err,
            )
        };
        self.finish(code, out, err, if upgrade { "upgrade" } else { "install" })
    }

    /// Calls one of the `(config, name, options, out, err)` functions.
    pub(super) fn release_call(
        &self,
        which: ReleaseCall,
        config: u64,
        name: &str,
        options: &str,
    ) -> Result<String, HelmError> {
        let (name_c, options_c) = (cstring(name, "release name")?, cstring(options, "options")?);
        let opts: Option<CString> = (!options.is_empty()).then_some(options_c);
        let (mut out, mut err): (*mut c_char, *mut c_char) =
            (std::ptr::null_mut(), std::ptr::null_mut());
        let (f, action) = match which {
            ReleaseCall::Uninstall => (self.uninstall, "uninstall"),
            ReleaseCall::Status => (self.status, "status"),
            ReleaseCall::History => (self.history, "history"),
        };
        // SAFETY: config is a live handle; strings valid for the call (NULL options allowed).
        let code = unsafe { f(config, name_c.as_ptr(), opt_ptr(&opts), &mut out, &mut err) };
        self.finish(code, out, err, action)
    }

    pub(super) fn list(&self, config: u64, options: &str) -> Result<String, HelmError> {
        let opts = cstring(options, "options")?;
        let (mut out, mut err): (*mut c_char, *mut c_char) =
            (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: config is a live handle; strings valid for the call.
        let code = unsafe { (self.list)(config, opts.as_ptr(), &mut out, &mut err) };
        self.finish(code, out, err, "list")
    }
}

/// The release calls that share one signature.
#[derive(Clone, Copy)]
pub(super) enum ReleaseCall {
    Uninstall,
    Status,
    History,
}
