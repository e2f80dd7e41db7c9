//! Users and groups by name or number from the system's databases (getpwnam_r,
//! getgrnam_r): for `daemon.user`/`daemon.group` in the configuration and for the drop of
//! privileges. Below both.

use std::ffi::CString;

/// A user's uid and primary gid, by name or number.
pub fn lookup_user(name: &str) -> Result<(u32, u32), String> {
    let c = CString::new(name).map_err(|_| format!("user `{name}` contains a NUL byte"))?;
    let mut buf = vec![0u8; 16384];
    // SAFETY: zeroed passwd is a valid out-parameter for getpwnam_r.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut res: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: all pointers are valid for the call; buf outlives it.
    let rc = unsafe {
        libc::getpwnam_r(
            c.as_ptr(),
            &mut pw,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut res,
        )
    };
    if rc == 0 && !res.is_null() {
        return Ok((pw.pw_uid, pw.pw_gid));
    }
    if let Ok(uid) = name.parse::<u32>() {
        // SAFETY: as above.
        let rc =
            unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut res) };
        if rc == 0 && !res.is_null() {
            return Ok((pw.pw_uid, pw.pw_gid));
        }
        return Err(format!("no user with uid {uid} in the user database"));
    }
    Err(format!("no user `{name}` in the user database"))
}

/// A group's gid, by name or number.
pub fn lookup_group(name: &str) -> Result<u32, String> {
    if let Ok(gid) = name.parse::<u32>() {
        return Ok(gid);
    }
    let c = CString::new(name).map_err(|_| format!("group `{name}` contains a NUL byte"))?;
    let mut buf = vec![0u8; 65536];
    // SAFETY: zeroed group is a valid out-parameter for getgrnam_r.
    let mut gr: libc::group = unsafe { std::mem::zeroed() };
    let mut res: *mut libc::group = std::ptr::null_mut();
    // SAFETY: all pointers are valid for the call; buf outlives it.
    let rc = unsafe {
        libc::getgrnam_r(
            c.as_ptr(),
            &mut gr,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut res,
        )
    };
    if rc == 0 && !res.is_null() {
        Ok(gr.gr_gid)
    } else {
        Err(format!("no group `{name}` in the group database"))
    }
}
