//! Compact object bodies for the cache: zstd frames compressed against a dictionary trained per kind.
//!
//! Objects of one kind share most of their bytes (field names, image names, labels of one
//! owner, the same `managedFields` shapes), so a dictionary trained on a sample of them lets
//! each object be compressed on its own — still randomly accessible, streamable one by one —
//! to a small fraction of its JSON. Measured on fedsim's pods generated from the captured
//! objects: ~3.5 KB of JSON → ~230 bytes with a 110 KiB dictionary at level 3, ~5 µs to
//! decompress (see BENCHMARKS.md, "cache memory").
//!
//! A [`Codec`] is immutable once built; a kind's store swaps in a newly trained codec by
//! re-encoding its objects (each body remembers which codec made it through [`Codec::id`]).
//! [`Codec::plain`] is the untrained codec (no dictionary: zstd alone), used until enough
//! samples have been seen.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use zstd::zstd_safe::{self, CCtx, CDict, DCtx, DDict};

/// zstd level used for object bodies (3 is zstd's default: ~10 µs per 3.5 KB pod, and higher
/// levels buy ~10% at 6× the CPU).
pub const LEVEL: i32 = 3;

/// Dictionary size trained by [`Codec::train`] (bytes); 110 KiB is zstd's own default.
pub const DICT_SIZE: usize = 112_640;

/// Objects of a kind sampled before its dictionary is trained (the first ones ingested).
pub const TRAIN_SAMPLES: usize = 2_000;

/// Errors of the codec.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// Training the dictionary failed (too few or too uniform samples).
    #[error("training a dictionary: {0}")]
    Train(String),
    /// zstd refused to compress (should not happen for in-memory buffers).
    #[error("compress: {0}")]
    Compress(&'static str),
    /// A body is not a frame of this codec (corrupt, or made by another codec).
    #[error("decompress: {0}")]
    Decompress(String),
}

static NEXT_ID: AtomicU32 = AtomicU32::new(1);

/// A dictionary (or none) with pooled zstd contexts; `Send + Sync`, shared behind an `Arc`.
pub struct Codec {
    id: u32,
    dict_len: usize,
    cdict: Option<CDict<'static>>,
    ddict: Option<DDict<'static>>,
    cctx: Mutex<Vec<CCtx<'static>>>,
    dctx: Mutex<Vec<DCtx<'static>>>,
}

impl std::fmt::Debug for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Codec").field("id", &self.id).field("dict_len", &self.dict_len).finish()
    }
}

impl Codec {
    /// The codec without a dictionary (zstd at [`LEVEL`] alone).
    pub fn plain() -> Codec {
        Codec::with_dict(None)
    }

    /// Trains a dictionary of at most `dict_size` bytes from `samples` (a few hundred to a few
    /// thousand encoded objects of one kind; zstd wants ≳ 100× the dictionary size in samples
    /// for its best results, but works with less). Errors: [`CodecError::Train`].
    pub fn train<S: AsRef<[u8]>>(samples: &[S], dict_size: usize) -> Result<Codec, CodecError> {
        let dict = zstd::dict::from_samples(samples, dict_size).map_err(|e| CodecError::Train(e.to_string()))?;
        Ok(Codec::with_dict(Some(&dict)))
    }

    /// A codec over a dictionary made elsewhere (e.g. loaded from disk); `None` = [`Codec::plain`].
    pub fn with_dict(dict: Option<&[u8]>) -> Codec {
        Codec {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            dict_len: dict.map_or(0, <[u8]>::len),
            cdict: dict.map(|d| CDict::create(d, LEVEL)),
            ddict: dict.map(DDict::create),
            cctx: Mutex::new(Vec::new()),
            dctx: Mutex::new(Vec::new()),
        }
    }

    /// Process-unique id of this codec (stores tag bodies with it).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Dictionary size in bytes (0 for [`Codec::plain`]).
    pub fn dict_len(&self) -> usize {
        self.dict_len
    }

    /// Memory held by the codec: dictionary copies inside zstd (compression and decompression
    /// forms) and pooled contexts, in bytes.
    pub fn heap_bytes(&self) -> usize {
        let dicts = self.cdict.as_ref().map_or(0, CDict::sizeof) + self.ddict.as_ref().map_or(0, DDict::sizeof);
        let c: usize = self.cctx.lock().expect("lock").iter().map(CCtx::sizeof).sum();
        let d: usize = self.dctx.lock().expect("lock").iter().map(DCtx::sizeof).sum();
        dicts + c + d
    }

    /// Compresses one encoded object into an exactly-sized boxed frame (the frame records the
    /// original length). Errors: [`CodecError::Compress`].
    pub fn compress(&self, raw: &[u8]) -> Result<Box<[u8]>, CodecError> {
        let mut cctx = self.cctx.lock().expect("lock").pop().unwrap_or_else(CCtx::create);
        let mut out: Vec<u8> = Vec::with_capacity(zstd_safe::compress_bound(raw.len()));
        let res = match &self.cdict {
            Some(cdict) => cctx.compress_using_cdict(&mut out, raw, cdict),
            None => cctx.compress(&mut out, raw, LEVEL),
        };
        self.cctx.lock().expect("lock").push(cctx);
        res.map_err(|code| CodecError::Compress(zstd_safe::get_error_name(code)))?;
        Ok(out.into_boxed_slice())
    }

    /// Length of the object in `packed` once decompressed. Errors: [`CodecError::Decompress`].
    pub fn raw_len(packed: &[u8]) -> Result<usize, CodecError> {
        match zstd_safe::get_frame_content_size(packed) {
            Ok(Some(n)) => usize::try_from(n).map_err(|_| CodecError::Decompress("frame too large".into())),
            Ok(None) => Err(CodecError::Decompress("frame without content size".into())),
            Err(_) => Err(CodecError::Decompress("not a zstd frame".into())),
        }
    }

    /// Appends the decompressed object to `out`. Errors: [`CodecError::Decompress`] (corrupt
    /// frame, or a frame made with another dictionary); `out` is left as it was.
    pub fn decompress_into(&self, packed: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
        let n = Codec::raw_len(packed)?;
        let start = out.len();
        out.reserve(n);
        let mut dctx = self.dctx.lock().expect("lock").pop().unwrap_or_else(DCtx::create);
        // written into the spare capacity after `start` (no zero-fill first)
        let mut at_end = std::io::Cursor::new(&mut *out);
        at_end.set_position(start as u64);
        let res = match &self.ddict {
            Some(ddict) => dctx.decompress_using_ddict(&mut at_end, packed, ddict),
            None => dctx.decompress(&mut at_end, packed),
        };
        self.dctx.lock().expect("lock").push(dctx);
        match res {
            Ok(written) if written == n => Ok(()),
            Ok(written) => {
                out.truncate(start);
                Err(CodecError::Decompress(format!("frame says {n} bytes, got {written}")))
            }
            Err(code) => {
                out.truncate(start);
                Err(CodecError::Decompress(zstd_safe::get_error_name(code).to_string()))
            }
        }
    }

    /// [`Codec::decompress_into`] a new buffer.
    pub fn decompress(&self, packed: &[u8]) -> Result<Vec<u8>, CodecError> {
        let mut out = Vec::new();
        self.decompress_into(packed, &mut out)?;
        Ok(out)
    }
}

/// Objects of a kind after which its dictionary is trained again, from a uniform sample of all
/// of them (the first objects of a member's LIST are often the pods of a few owners, which
/// makes a poor dictionary for the rest).
pub const RETRAIN_AT: u64 = 50_000;

/// The process's codecs, one per kind (keyed by `apiVersion/kind`), shared by every shard and
/// ingest of that kind. A kind starts with [`Codec::plain`]; after its first [`TRAIN_SAMPLES`]
/// objects a dictionary is trained from them, and after [`RETRAIN_AT`] objects a second one
/// from a uniform sample (reservoir sampling) of those; each becomes the kind's codec for every
/// object encoded afterwards. Objects keep the `Arc<Codec>` that encoded them, so nothing is
/// re-encoded when the codec changes.
#[derive(Default)]
pub struct Dictionaries {
    kinds: Mutex<HashMap<String, KindCodec>>,
}

struct KindCodec {
    current: Arc<Codec>,
    /// The reservoir; `None` once the last dictionary is trained.
    samples: Option<Vec<Vec<u8>>>,
    seen: u64,
    rng: u64,
}

impl KindCodec {
    fn train(&mut self, kind: &str) {
        let Some(samples) = &self.samples else { return };
        match Codec::train(samples, DICT_SIZE) {
            Ok(c) => {
                tracing::debug!(kind, dict = c.dict_len(), seen = self.seen, "trained the cache dictionary");
                self.current = Arc::new(c);
            }
            Err(e) => tracing::warn!(kind, error = %e, "cache dictionary not trained; objects are compressed with the previous codec"),
        }
    }
}

impl Dictionaries {
    /// The process-wide set.
    pub fn global() -> &'static Dictionaries {
        static G: OnceLock<Dictionaries> = OnceLock::new();
        G.get_or_init(Dictionaries::default)
    }

    /// The codec to encode `raw` (an object of `kind`) with; `raw` may be kept as a training
    /// sample. Training runs inline, on the calls that complete a sample (tens of
    /// milliseconds, twice per kind); a training failure keeps the codec in use.
    pub fn codec_for(&self, kind: &str, raw: &[u8]) -> Arc<Codec> {
        let mut kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        if !kinds.contains_key(kind) {
            kinds.insert(kind.to_string(), KindCodec { current: Arc::new(Codec::plain()), samples: Some(Vec::new()), seen: 0, rng: 0x9E37_79B9_7F4A_7C15 });
        }
        let k = kinds.get_mut(kind).expect("inserted above");
        if let Some(samples) = &mut k.samples {
            k.seen += 1;
            if samples.len() < TRAIN_SAMPLES {
                samples.push(raw.to_vec());
            } else {
                // xorshift64: a cheap uniform index for reservoir sampling
                k.rng ^= k.rng << 13;
                k.rng ^= k.rng >> 7;
                k.rng ^= k.rng << 17;
                let j = (k.rng % k.seen) as usize;
                if j < TRAIN_SAMPLES {
                    samples[j] = raw.to_vec();
                }
            }
            if k.seen == TRAIN_SAMPLES as u64 {
                k.train(kind);
            } else if k.seen == RETRAIN_AT {
                k.train(kind);
                k.samples = None;
            }
        }
        k.current.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fedsim::generate::{GenConfig, PodGenerator};

    fn pods(n: usize) -> Vec<Vec<u8>> {
        let cfg = GenConfig { nodes: (n / 10).max(1), pods_per_node: 10, ..GenConfig::default() };
        let g = PodGenerator::new(&cfg);
        (0..n).map(|i| serde_json::to_vec(&g.initial_pod(i)).unwrap()).collect()
    }

    #[test]
    fn round_trips_byte_for_byte_with_and_without_a_dictionary() {
        let raw = pods(600);
        let trained = Codec::train(&raw[..400], DICT_SIZE).unwrap();
        let plain = Codec::plain();
        for codec in [&trained, &plain] {
            let mut out = b"prefix".to_vec();
            for r in &raw {
                let packed = codec.compress(r).unwrap();
                assert_eq!(Codec::raw_len(&packed).unwrap(), r.len());
                out.truncate(6);
                codec.decompress_into(&packed, &mut out).unwrap();
                assert_eq!(&out[..6], b"prefix");
                assert_eq!(&out[6..], &r[..]);
            }
        }
        // objects not in the training sample compress well too
        let unseen: usize = raw[400..].iter().map(|r| trained.compress(r).unwrap().len()).sum();
        let json: usize = raw[400..].iter().map(Vec::len).sum();
        assert!(unseen * 5 < json, "{unseen} compressed bytes for {json} JSON bytes");
        let alone: usize = raw[400..].iter().map(|r| plain.compress(r).unwrap().len()).sum();
        assert!(unseen < alone, "dictionary {unseen} vs none {alone}");
    }

    #[test]
    fn refuses_corrupt_or_foreign_frames_and_leaves_the_buffer() {
        let raw = pods(300);
        let a = Codec::train(&raw, 16_384).unwrap();
        let packed = a.compress(&raw[0]).unwrap();
        let mut out = b"keep".to_vec();
        assert!(a.decompress_into(b"not zstd", &mut out).is_err());
        let mut cut = packed.to_vec();
        cut.truncate(cut.len() / 2);
        assert!(a.decompress_into(&cut, &mut out).is_err());
        assert_eq!(out, b"keep");
        // a frame made against a dictionary cannot be read without it
        assert!(Codec::plain().decompress_into(&packed, &mut out).is_err());
        assert_eq!(out, b"keep");
    }

    #[test]
    fn dictionaries_train_per_kind_after_the_sample() {
        let raw = pods(TRAIN_SAMPLES + 10);
        let d = Dictionaries::default();
        let first = d.codec_for("v1/Pod", &raw[0]);
        assert_eq!(first.dict_len(), 0);
        let mut last = first.clone();
        for r in &raw[1..TRAIN_SAMPLES] {
            last = d.codec_for("v1/Pod", r);
        }
        assert!(last.dict_len() > 0, "trained on the sample's last object");
        assert_eq!(d.codec_for("v1/Pod", &raw[TRAIN_SAMPLES]).id(), last.id());
        assert_eq!(d.codec_for("v1/Node", &raw[0]).dict_len(), 0, "another kind has its own codec");
        // an object encoded before training still decodes with the codec it kept
        let packed = first.compress(&raw[0]).unwrap();
        assert_eq!(first.decompress(&packed).unwrap(), raw[0]);
    }

    #[test]
    fn training_on_nothing_is_an_error() {
        let none: Vec<Vec<u8>> = Vec::new();
        assert!(matches!(Codec::train(&none, DICT_SIZE), Err(CodecError::Train(_))));
    }
}
