//! The send stream's codec is `scion_fs::stream` (the engine applies streams); this adds
//! what needs zstd: reading a whole stream in memory, compressed or not.

pub use scion_fs::stream::*;
use std::io::Read;

/// Every frame of a whole stream in memory (tests and the fuzz target).
pub fn decode_all(b: &[u8]) -> Result<Vec<Frame>, String> {
    let mut r = b;
    let flags = read_header(&mut r)?;
    if flags & FLAG_NEGOTIATE != 0 {
        read_offer(&mut r)?;
    }
    let body: Box<dyn Read> = if flags & FLAG_ZSTD != 0 {
        Box::new(zstd::stream::read::Decoder::new(r).map_err(|e| e.to_string())?)
    } else {
        Box::new(r)
    };
    let mut s = StreamReader::new(body.take(1 << 30));
    let mut out = Vec::new();
    while let Some(f) = s.next().map_err(String::from)? {
        out.push(f);
        if out.len() > 1 << 20 {
            return Err("too many frames".into());
        }
    }
    s.expect_eof()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames() -> Vec<Frame> {
        let meta = Meta {
            perm: 0o4755,
            uid: 1000,
            gid: 100,
            mtime_sec: 1_700_000_000,
            mtime_nsec: 5,
            xattrs: vec![(b"user.a".to_vec(), b"v".to_vec())],
        };
        vec![
            Frame::Begin { base: Some([1; 32]), root: [2; 32], name: b"snap".to_vec(), entries: 9, bytes: 1 << 20 },
            Frame::Copy { path: b"moved".to_vec(), from: b"a/old".to_vec() },
            Frame::Delete { path: b"a/old".to_vec() },
            Frame::Dir { path: b"d".to_vec() },
            Frame::File { path: b"d/f".to_vec(), size: 100_000, fresh: true, meta: meta.clone() },
            Frame::Data { offset: 65536, bytes: vec![7; 1000] },
            Frame::Hole { offset: 0, len: 65536 },
            Frame::Block { offset: 131072, hash: [5; 32] },
            Frame::Symlink { path: b"l".to_vec(), target: b"d/f".to_vec(), meta: meta.clone() },
            Frame::Special { path: b"p".to_vec(), kind: 4, rdev: 0, meta: meta.clone() },
            Frame::Link { path: b"d/g".to_vec(), target: b"d/f".to_vec() },
            Frame::Meta { path: Vec::new(), meta },
        ]
    }

    fn stream(flags: u8) -> Vec<u8> {
        let mut raw = Vec::new();
        write_header(&mut raw, flags).unwrap();
        let body: Vec<u8> = {
            let mut w = StreamWriter::new(Vec::new());
            for f in frames() {
                w.put(&f).unwrap();
            }
            w.finish([2; 32]).unwrap()
        };
        if flags & FLAG_ZSTD != 0 {
            raw.extend_from_slice(&zstd::encode_all(&body[..], 3).unwrap());
        } else {
            raw.extend_from_slice(&body);
        }
        raw
    }

    #[test]
    fn frames_round_trip_compressed_or_not() {
        for flags in [0, FLAG_ZSTD] {
            let got = decode_all(&stream(flags)).unwrap();
            let mut want = frames();
            want.push(Frame::End { frames: 11, hash: [0; 32], root: [2; 32] });
            assert_eq!(got.len(), want.len());
            assert_eq!(&got[..11], &want[..11]);
        }
    }

    /// The encodings made in place (a borrowed data piece; a frame appended to a buffer
    /// holding others) are the frames' own, and decode back to them.
    #[test]
    fn frames_encoded_in_place_are_the_frames_encodings() {
        let bytes: Vec<u8> = (0..70_000u32).map(|i| (i * 7) as u8).collect();
        let mut out = vec![9, 9, 9];
        encode_data_into(65536, &bytes, 4, &mut out);
        let want = encode_frame(&Frame::Data { offset: 65536, bytes: bytes.clone() }, 4);
        assert_eq!(&out[3..], &want[..]);
        let mut batch = Vec::new();
        for f in frames() {
            let before = batch.len();
            encode_frame_into(&f, 0, &mut batch);
            assert_eq!(&batch[before..], &encode_frame(&f, 0)[..]);
        }
        assert_eq!(decode_frames(&batch).unwrap(), frames());
    }

    /// A stream written again from frame 4 on, where a reader that stopped there kept its
    /// place, reads to a valid end; from another place, or for another stream, it does not.
    /// The negotiation of a two-way channel: an offer and its answer round-trip; cut or with
    /// a byte flipped, either is refused; a negotiated stream's offer is read before its frames.
    #[test]
    fn offers_and_answers_round_trip_and_damage_is_refused() {
        let hashes: Vec<[u8; 32]> = (0..20u8).map(|i| [i; 32]).collect();
        let held: Vec<bool> = (0..20).map(|i| i % 3 == 0).collect();
        let (mut offer, mut answer) = (Vec::new(), Vec::new());
        write_offer(&mut offer, &hashes).unwrap();
        write_answer(&mut answer, &held).unwrap();
        assert_eq!(read_offer(&mut &offer[..]).unwrap(), hashes);
        assert_eq!(read_answer(&mut &answer[..], 20).unwrap(), held);
        assert!(read_answer(&mut &answer[..], 21).is_err(), "an answer for another offer");
        for cut in 0..offer.len() {
            assert!(read_offer(&mut &offer[..cut]).is_err(), "offer cut at {cut}");
        }
        for cut in 0..answer.len() {
            assert!(read_answer(&mut &answer[..cut], 20).is_err(), "answer cut at {cut}");
        }
        for i in 0..offer.len() {
            let mut bad = offer.clone();
            bad[i] ^= 0x10;
            assert!(read_offer(&mut &bad[..]).is_err(), "offer byte {i} flipped");
        }
        for i in 0..answer.len() {
            let mut bad = answer.clone();
            bad[i] ^= 0x10;
            assert!(read_answer(&mut &bad[..], 20).is_err(), "answer byte {i} flipped");
        }
        let mut s = Vec::new();
        write_header(&mut s, FLAG_NEGOTIATE).unwrap();
        s.extend_from_slice(&offer);
        s.extend_from_slice(&stream(0)[10..]);
        assert_eq!(decode_all(&s).unwrap().len(), frames().len() + 1);
    }

    #[test]
    fn a_resumed_stream_goes_on_where_the_first_stopped() {
        let whole = {
            let mut w = StreamWriter::new(Vec::new());
            for f in frames() {
                w.put(&f).unwrap();
            }
            w.finish([2; 32]).unwrap()
        };
        let mut r = StreamReader::new(&whole[..]);
        for _ in 0..5 {
            r.next().unwrap();
        }
        let (from, chain) = r.position();
        assert_eq!(from, 4);
        let token = resume_token(from, &chain, &[2; 32]);
        let (f2, c2, root) = parse_token(&token).unwrap();
        let rest = {
            let mut w = StreamWriter::resume_at(Vec::new(), f2, c2, root);
            for f in frames() {
                w.put(&f).unwrap();
            }
            w.finish(root).unwrap()
        };
        assert!(rest.len() < whole.len());
        let mut r = StreamReader::new(&rest[..]);
        let mut n = 0;
        while let Some(f) = r.next().unwrap() {
            if n == 0 {
                assert_eq!(f, Frame::Resume { root, from: 4, chain: c2 });
            }
            n += 1;
        }
        assert_eq!(n, 1 + (frames().len() - 4) + 1, "Resume, frames 4.., End");
        // Another chain at that point: the sender refuses.
        let mut w = StreamWriter::resume_at(Vec::new(), 4, [9; 32], root);
        let r: std::io::Result<()> = frames().iter().try_for_each(|f| w.put(f));
        assert!(r.is_err());
        assert!(parse_token("scion1:00").is_err() && parse_token("nope").is_err());
    }

    #[test]
    fn a_stream_cut_damaged_reordered_or_duplicated_is_refused() {
        let s = stream(0);
        for cut in 0..s.len() {
            assert!(decode_all(&s[..cut]).is_err(), "cut at {cut}");
        }
        for i in 10..s.len() {
            let mut d = s.clone();
            d[i] ^= 0x40;
            assert!(decode_all(&d).is_err(), "byte {i} flipped");
        }
        // Frames swapped or repeated, each whole and checked on its own.
        let body = &s[10..];
        let mut spans = Vec::new();
        let mut at = 0;
        while at < body.len() {
            let len = u32::from_le_bytes(body[at + 9..at + 13].try_into().unwrap()) as usize;
            spans.push(at..at + 13 + len + 4);
            at += 13 + len + 4;
        }
        let mut swapped = s[..10].to_vec();
        for k in [0, 2, 1] {
            swapped.extend_from_slice(&body[spans[k].clone()]);
        }
        for sp in &spans[3..] {
            swapped.extend_from_slice(&body[sp.clone()]);
        }
        assert!(decode_all(&swapped).unwrap_err().contains("reordered"));
        let mut dup = s[..10].to_vec();
        dup.extend_from_slice(&body[spans[0].clone()]);
        dup.extend_from_slice(&body[spans[0].clone()]);
        assert!(decode_all(&dup).is_err());
        assert!(check_path(b"a/../b").is_err() && check_path(b"/a").is_err() && check_path(b"a//b").is_err());
        assert!(check_path(b"").is_ok() && check_path(b"a/b").is_ok());
    }
}
