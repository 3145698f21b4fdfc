//! Links the leader-exec binary as a position-dependent executable on Linux (bench/MEMORY.md).
//!
//! A position-independent executable is relocated when it starts: the dynamic loader writes the
//! run-time addresses into the binary's read-only-after-relocation data (vtables, tables of
//! string slices, tracing's call-site metadata: about 180 KB here), so every process gets its
//! own anonymous copy of those pages. Linked at a fixed address, the linker resolves them once
//! and they stay clean pages of the file, shared by every instance on the host: a host runs one
//! waiter per cron job, and each waiter (with its supervisor) holds about 1.10 MB of anonymous
//! memory as a PIE and 0.77 MB without. The cost: the executable's own code is not placed at a
//! random address (the stack, heap, libc and every other mapping still are). Remove this file
//! to go back to a PIE; nothing else depends on it.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
