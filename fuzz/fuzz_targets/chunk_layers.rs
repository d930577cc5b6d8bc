#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| scion_fuzzing::chunk_layers(data));
