//! The receiver's apply (`scion_fuzzing::apply_frames`) over random frame programs, on stable
//! Rust in every CI run: what the fuzz target checks, for inputs no corpus holds yet.

/// Random programs from a fixed seed (`APPLY_PROGRAMS=N` for more, `APPLY_SEED=S` for others).
#[test]
fn random_frame_programs_leave_the_store_clean() {
    let n: u64 = std::env::var("APPLY_PROGRAMS").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    let mut seed: u64 = std::env::var("APPLY_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x2545_f491_4f6c_dd1d);
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for i in 0..n {
        let data = program(&mut next);
        let r = std::panic::catch_unwind(|| scion_fuzzing::apply_frames(&data));
        assert!(r.is_ok(), "program {i} failed: {data:?}");
    }
}

/// A program in `apply_program`'s encoding, mostly well formed (names that exist or will,
/// data after a file), so that frames get past the first refusal and build trees; a byte in
/// sixteen is anything.
fn program(next: &mut dyn FnMut() -> u64) -> Vec<u8> {
    let mut out = vec![next() as u8];
    let frames = 1 + next() % 40;
    for _ in 0..frames {
        let mut r = || next();
        let b = |good: &[u8], r: &mut dyn FnMut() -> u64| {
            let x = r();
            if x % 16 == 0 { (x >> 8) as u8 } else { good[((x >> 8) % good.len() as u64) as usize] }
        };
        let path = |out: &mut Vec<u8>, r: &mut dyn FnMut() -> u64| {
            let n = b(&[0, 0, 0, 1, 1, 2], r);
            out.push(n);
            for _ in 0..1 + n % 3 {
                out.push(b(&[0, 1, 2, 3, 4, 5], r));
            }
        };
        let meta = |out: &mut Vec<u8>, r: &mut dyn FnMut() -> u64| {
            for _ in 0..7 {
                out.push(r() as u8);
            }
        };
        // Opcodes: 0 Delete, 1 Dir, 2 File, 3 Data, 4 Hole, 5 Symlink, 6 Special, 7 Link,
        // 8 Copy, 9 Meta, 10 Block, 11 End, 12 a new batch.
        let op = b(&[1, 1, 2, 2, 2, 3, 3, 3, 4, 10, 0, 5, 6, 7, 8, 9, 12], &mut r);
        out.push(op);
        match op % 13 {
            0 | 1 => path(&mut out, &mut r),
            2 => {
                // (a new name at the top or in `a` mostly, so that its data finds it open)
                let n = b(&[0, 0, 1], &mut r);
                out.push(n);
                for _ in 0..1 + n % 3 {
                    out.push(b(&[5, 5, 2, 0], &mut r));
                }
                out.push(b(&[0, 2, 3, 5, 6, 7, 8, 9], &mut r));
                out.push(r() as u8);
                meta(&mut out, &mut r);
                // and its data, mostly
                for _ in 0..r() % 3 {
                    out.push(b(&[3, 3, 4, 10], &mut r));
                    out.push(b(&[0, 4, 5, 6, 7, 8], &mut r));
                    out.push(r() as u8);
                    out.push(r() as u8);
                }
            }
            3 | 4 | 10 => {
                out.push(b(&[0, 4, 5, 6, 7, 8], &mut r));
                out.push(r() as u8);
                out.push(r() as u8);
            }
            5 | 6 => {
                path(&mut out, &mut r);
                out.push(r() as u8);
                out.push(r() as u8);
                meta(&mut out, &mut r);
            }
            7 | 8 => {
                path(&mut out, &mut r);
                path(&mut out, &mut r);
            }
            9 => {
                out.push(r() as u8);
                path(&mut out, &mut r);
                meta(&mut out, &mut r);
            }
            _ => {}
        }
    }
    out
}
