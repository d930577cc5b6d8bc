#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| scion_fuzzing::hash_memo_file(data));
