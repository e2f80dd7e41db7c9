//! Builds the XDP program `bpf/relay_xdp.c` with clang into `$OUT_DIR/relay_xdp.o`, which
//! `src/program.rs` embeds with `include_bytes!` (why C and not Rust: its module docs).
//!
//! The build fails, saying what to install, when clang or the BPF headers are missing.
//! `CLANG` names another compiler (e.g. `clang-16`).

use std::path::PathBuf;
use std::process::Command;

const SOURCE: &str = "bpf/relay_xdp.c";

fn main() {
    println!("cargo:rerun-if-changed={SOURCE}");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CLANG");

    let manifest_dir = env("CARGO_MANIFEST_DIR");
    let out = PathBuf::from(env("OUT_DIR")).join("relay_xdp.o");
    let arch = env("CARGO_CFG_TARGET_ARCH");
    // Debian keeps <asm/types.h> (included by <linux/types.h>) under the multiarch
    // directory, which `-target bpf` does not search.
    let multiarch = match arch.as_str() {
        "x86_64" => "x86_64-linux-gnu".to_owned(),
        "aarch64" => "aarch64-linux-gnu".to_owned(),
        "x86" => "i386-linux-gnu".to_owned(),
        "arm" => "arm-linux-gnueabihf".to_owned(),
        other => format!("{other}-linux-gnu"),
    };
    // The object's byte order is the target's, which matters when cross-compiling
    // (`-target bpf` alone means the build machine's).
    let target = match env("CARGO_CFG_TARGET_ENDIAN").as_str() {
        "big" => "bpfeb",
        _ => "bpfel",
    };
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".to_owned());

    let mut cmd = Command::new(&clang);
    cmd.args(["-O2", "-g", "-Wall", "-Werror", "-target", target])
        .arg(format!("-I/usr/include/{multiarch}"))
        // Reproducible objects: no absolute build paths in the debug info.
        .arg(format!("-fdebug-prefix-map={manifest_dir}=."))
        .current_dir(&manifest_dir)
        .args(["-c", SOURCE, "-o"])
        .arg(&out);
    let help = "the XDP program is built with clang; install clang and libbpf-dev \
                (`make deps` installs them; on Debian: apt-get install clang libbpf-dev)";
    match cmd.output() {
        Err(e) => fail(&format!("could not run `{clang}`: {e}\n{help}")),
        Ok(o) if !o.status.success() => fail(&format!(
            "`{clang}` failed to build {SOURCE} ({}):\n{}\n{help}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim_end()
        )),
        Ok(_) => {}
    }
}

fn env(key: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| fail(&format!("{key} is not set (run by cargo?)")))
}

fn fail(msg: &str) -> ! {
    eprintln!("relay-xdp build: {msg}");
    std::process::exit(1);
}
