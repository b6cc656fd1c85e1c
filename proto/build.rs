//! Compiles `cairn/v1/worker.proto` with protox (pure Rust; no `protoc` needed on any machine).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=cairn/v1/worker.proto");
    let descriptors = protox::compile(["cairn/v1/worker.proto"], ["."])?;
    tonic_prost_build::configure().build_client(true).build_server(true).compile_fds(descriptors)?;
    Ok(())
}
