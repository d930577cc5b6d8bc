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

/// A fuzzer's first steps on stable Rust: every target takes 2,000 mutations of its corpus
/// (bits flipped, bytes cut, inserted or copied) without a panic, so a decoder change that
/// breaks on near-valid input fails here before any fuzzing run.
#[test]
fn mutations_of_the_corpus_are_handled() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for (name, target) in scion_fuzzing::TARGETS {
        let inputs: Vec<Vec<u8>> = std::fs::read_dir(root.join(name))
            .unwrap()
            .map(|e| std::fs::read(e.unwrap().path()).unwrap())
            .filter(|d| d.len() <= 64 << 10)
            .collect();
        if inputs.is_empty() {
            continue;
        }
        for _ in 0..2000 {
            let mut d = inputs[(next() % inputs.len() as u64) as usize].clone();
            for _ in 0..1 + next() % 4 {
                let at = if d.is_empty() { 0 } else { (next() % d.len() as u64) as usize };
                match next() % 4 {
                    0 if !d.is_empty() => d[at] ^= 1 << (next() % 8),
                    1 => d.truncate(at),
                    2 => d.insert(at, next() as u8),
                    _ if !d.is_empty() => {
                        let from = (next() % d.len() as u64) as usize;
                        let b = d[from];
                        d[at] = b;
                    }
                    _ => {}
                }
            }
            target(&d);
        }
    }
}
