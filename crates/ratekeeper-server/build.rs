//! Compiles Envoy's rate limit service API (proto/) into Rust with
//! tonic-prost-build, parsing the .proto files with protox: no system
//! `protoc` is needed.

use std::path::Path;

const PROTO_ROOT: &str = "proto";
const RLS: &str = "envoy/service/ratelimit/v3/rls.proto";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed={PROTO_ROOT}");
    let files = protox::compile([RLS], [PROTO_ROOT])?;
    for file in &files.file {
        if let Some(name) = &file.name {
            let path = Path::new(PROTO_ROOT).join(name);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    tonic_prost_build::configure()
        // The client takes any tonic transport (a `Channel` in tests and
        // benches), so the library needs no client transport itself.
        .build_transport(false)
        .build_server(true)
        .build_client(true)
        .compile_fds(files)?;
    Ok(())
}
