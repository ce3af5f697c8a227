"""Side-by-side benchmarks: MTP off vs on (several draft lengths), interleaved."""
