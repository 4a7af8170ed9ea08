//! Criterion benches of the pure algorithms (placeholder replaced below).
fn main() {}
