//! Replays the kept fuzz corpus (`fuzz/corpus/TARGET/*`) through every target, so what the
//! fuzzer once found interesting is checked on every run, on stable Rust.

use std::path::Path;

#[test]
fn corpus_replays_cleanly() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let mut total = 0;
    for (name, target) in scion_fuzzing::TARGETS {
        let dir = root.join(name);
        let entries: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("corpus of {name} ({}): {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        assert!(!entries.is_empty(), "the corpus of {name} is empty");
        for p in &entries {
            let data = std::fs::read(p).unwrap();
            target(&data);
        }
        println!("{name}: {} inputs", entries.len());
        total += entries.len();
    }
    println!("{total} corpus inputs replayed");
}
