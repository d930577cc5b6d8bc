#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| scion_fuzzing::remote_tree_object(data));
