//! The release binary's code layout: the functions a run executes first, next to each other
//! (`link/order.txt`, made by `python3 bench/layout.py` from traces of real runs on every store).
//!
//! On a page fault in the binary's code the kernel maps up to 16 neighbouring pages that are in
//! the page cache (fault-around, 64 KB). In the linker's default order a run's code is spread
//! over the whole binary, among the code of the other stores, TLS, the HTTP server and
//! `generate-assets`, and nearly all of the code became resident; grouped, it shares its 64 KB
//! windows with itself (bench/MEMORY.md has the figures). The order changes where code sits,
//! never what it does; names the file lists that a build does not have are ignored, so a stale
//! file costs memory, not correctness.
//!
//! Only for release builds on x86_64-unknown-linux-gnu, where rustc links with its own lld
//! (`--symbol-ordering-file` is lld's); other targets link as before.

fn main() {
    println!("cargo:rerun-if-changed=link/order.txt");
    let release = std::env::var("PROFILE").as_deref() == Ok("release");
    let target = std::env::var("TARGET").unwrap_or_default();
    if release && target == "x86_64-unknown-linux-gnu" {
        let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
        println!("cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={dir}/link/order.txt");
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}
