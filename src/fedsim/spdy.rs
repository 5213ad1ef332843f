//! A minimal SPDY/3.1 server: the frame codec (zlib header blocks with the SPDY/3 dictionary,
//! via flate2's zlib-rs backend) and a session over any byte stream that accepts the
//! client's streams, as kubectl's exec, attach and port-forward open them (moby/spdystream
//! on the other end). Uses no other fedctl module.
//!
//! Frames (draft 3.1): control frames `1 | version(15) | type(16) | flags(8) | length(24) |
//! data`, data frames `0 | stream id(31) | flags(8) | length(24) | data`. Header blocks are
//! `count(32)` then `len(32) name len(32) value` pairs (names lowercase, several values of
//! one name NUL-separated), deflated with one zlib stream per direction for the session's
//! life, each block ended by a sync flush. Flow control is not enforced in either direction
//! (spdystream neither sends nor honours WINDOW_UPDATE).

use std::collections::HashMap;
use std::sync::OnceLock;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// The protocol version this codec speaks.
pub const VERSION: u16 = 3;
/// `FLAG_FIN` of data, SYN_STREAM, SYN_REPLY and HEADERS frames.
pub const FLAG_FIN: u8 = 0x01;
/// `FLAG_UNIDIRECTIONAL` of SYN_STREAM.
pub const FLAG_UNIDIRECTIONAL: u8 = 0x02;
/// Largest frame payload accepted (bytes): the 24-bit length field's limit.
pub const MAX_FRAME: usize = (1 << 24) - 1;
/// Data frames written are split at this size (bytes).
const WRITE_CHUNK: usize = 32 * 1024;
/// Largest decompressed header block accepted (bytes).
const MAX_HEADER_BLOCK: usize = 1 << 20;

/// RST_STREAM status `PROTOCOL_ERROR`.
pub const RST_PROTOCOL_ERROR: u32 = 1;
/// RST_STREAM status `REFUSED_STREAM`.
pub const RST_REFUSED_STREAM: u32 = 3;
/// RST_STREAM status `CANCEL`.
pub const RST_CANCEL: u32 = 5;

/// Errors of the codec and the session.
#[derive(Debug, thiserror::Error)]
pub enum SpdyError {
    /// A frame that does not parse (bad version, short payload, bad header block).
    #[error("SPDY protocol error: {0}")]
    Protocol(String),
    /// zlib failed on a header block.
    #[error("SPDY header compression: {0}")]
    Compression(String),
    /// The connection failed.
    #[error("SPDY connection: {0}")]
    Io(#[from] std::io::Error),
}

/// Header name/value pairs of a SYN_STREAM, SYN_REPLY or HEADERS frame, in order.
pub type Headers = Vec<(String, String)>;

/// One SPDY frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// SYN_STREAM: a new stream from the peer.
    SynStream { stream_id: u32, associated: u32, priority: u8, flags: u8, headers: Headers },
    /// SYN_REPLY: the answer to a stream.
    SynReply { stream_id: u32, flags: u8, headers: Headers },
    /// RST_STREAM with its status code.
    RstStream { stream_id: u32, status: u32 },
    /// SETTINGS: `(flags, id, value)` entries.
    Settings { flags: u8, entries: Vec<(u8, u32, u32)> },
    /// PING with its id.
    Ping { id: u32 },
    /// GOAWAY.
    GoAway { last_good: u32, status: u32 },
    /// HEADERS on an open stream.
    Headers { stream_id: u32, flags: u8, headers: Headers },
    /// WINDOW_UPDATE.
    WindowUpdate { stream_id: u32, delta: u32 },
    /// DATA.
    Data { stream_id: u32, flags: u8, data: Bytes },
}

/// The SPDY/3 zlib dictionary (draft 3 §2.6.10.1): 1423 bytes, the 65 length-prefixed
/// words below followed by the status codes, reasons and common values as one run.
pub fn dictionary() -> &'static [u8] {
    static DICT: OnceLock<Vec<u8>> = OnceLock::new();
    DICT.get_or_init(|| {
        const WORDS: [&str; 65] = [
            "options",
            "head",
            "post",
            "put",
            "delete",
            "trace",
            "accept",
            "accept-charset",
            "accept-encoding",
            "accept-language",
            "accept-ranges",
            "age",
            "allow",
            "authorization",
            "cache-control",
            "connection",
            "content-base",
            "content-encoding",
            "content-language",
            "content-length",
            "content-location",
            "content-md5",
            "content-range",
            "content-type",
            "date",
            "etag",
            "expect",
            "expires",
            "from",
            "host",
            "if-match",
            "if-modified-since",
            "if-none-match",
            "if-range",
            "if-unmodified-since",
            "last-modified",
            "location",
            "max-forwards",
            "pragma",
            "proxy-authenticate",
            "proxy-authorization",
            "range",
            "referer",
            "retry-after",
            "server",
            "te",
            "trailer",
            "transfer-encoding",
            "upgrade",
            "user-agent",
            "vary",
            "via",
            "warning",
            "www-authenticate",
            "method",
            "get",
            "status",
            "200 OK",
            "version",
            "HTTP/1.1",
            "url",
            "public",
            "set-cookie",
            "keep-alive",
            "origin",
        ];
        const RUN: &str = concat!(
            "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505",
            "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized",
            "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable",
            "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT",
            "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,",
            "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.",
        );
        let mut d = Vec::with_capacity(1423);
        for w in WORDS {
            d.extend_from_slice(&(w.len() as u32).to_be_bytes());
            d.extend_from_slice(w.as_bytes());
        }
        d.extend_from_slice(RUN.as_bytes());
        d
    })
}

/// The value of header `name` (lowercase) in `headers`, if any.
pub fn header<'a>(headers: &'a Headers, name: &str) -> Option<&'a str> {
    headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// Encodes frames; holds the sending direction's header compressor.
pub struct Encoder {
    z: Compress,
}

impl Default for Encoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Encoder {
    /// A fresh encoder (its zlib stream primed with [`dictionary`]).
    pub fn new() -> Encoder {
        let mut z = Compress::new(Compression::default(), true);
        z.set_dictionary(dictionary()).expect("a zlib-rs compressor takes a dictionary");
        Encoder { z }
    }

    fn header_block(&mut self, headers: &Headers) -> Result<Vec<u8>, SpdyError> {
        let mut raw = Vec::with_capacity(64);
        raw.put_u32(headers.len() as u32);
        for (n, v) in headers {
            raw.put_u32(n.len() as u32);
            raw.extend_from_slice(n.to_ascii_lowercase().as_bytes());
            raw.put_u32(v.len() as u32);
            raw.extend_from_slice(v.as_bytes());
        }
        // a sync flush is complete when it leaves room in the output (zlib's contract)
        let mut out = Vec::with_capacity(raw.len() + raw.len() / 2 + 128);
        let start = self.z.total_in();
        loop {
            let consumed = (self.z.total_in() - start) as usize;
            self.z.compress_vec(&raw[consumed..], &mut out, FlushCompress::Sync).map_err(|e| SpdyError::Compression(e.to_string()))?;
            if (self.z.total_in() - start) as usize == raw.len() && out.len() < out.capacity() {
                break;
            }
            out.reserve(out.capacity().max(256));
        }
        Ok(out)
    }

    /// The wire form of `f`. Errors: header compression failed, or a payload over
    /// [`MAX_FRAME`].
    pub fn encode(&mut self, f: &Frame) -> Result<Vec<u8>, SpdyError> {
        let (ty, flags, payload): (u16, u8, Vec<u8>) = match f {
            Frame::Data { stream_id, flags, data } => {
                if data.len() > MAX_FRAME {
                    return Err(SpdyError::Protocol("data frame too large".into()));
                }
                let mut out = Vec::with_capacity(8 + data.len());
                out.put_u32(stream_id & 0x7fff_ffff);
                out.put_u32(((*flags as u32) << 24) | data.len() as u32);
                out.extend_from_slice(data);
                return Ok(out);
            }
            Frame::SynStream { stream_id, associated, priority, flags, headers } => {
                let mut p = Vec::new();
                p.put_u32(stream_id & 0x7fff_ffff);
                p.put_u32(associated & 0x7fff_ffff);
                p.put_u8((priority & 0x7) << 5);
                p.put_u8(0);
                p.extend_from_slice(&self.header_block(headers)?);
                (1, *flags, p)
            }
            Frame::SynReply { stream_id, flags, headers } => {
                let mut p = Vec::new();
                p.put_u32(stream_id & 0x7fff_ffff);
                p.extend_from_slice(&self.header_block(headers)?);
                (2, *flags, p)
            }
            Frame::RstStream { stream_id, status } => {
                let mut p = Vec::new();
                p.put_u32(stream_id & 0x7fff_ffff);
                p.put_u32(*status);
                (3, 0, p)
            }
            Frame::Settings { flags, entries } => {
                let mut p = Vec::new();
                p.put_u32(entries.len() as u32);
                for (fl, id, v) in entries {
                    p.put_u32(((*fl as u32) << 24) | (id & 0x00ff_ffff));
                    p.put_u32(*v);
                }
                (4, *flags, p)
            }
            Frame::Ping { id } => (6, 0, id.to_be_bytes().to_vec()),
            Frame::GoAway { last_good, status } => {
                let mut p = Vec::new();
                p.put_u32(last_good & 0x7fff_ffff);
                p.put_u32(*status);
                (7, 0, p)
            }
            Frame::Headers { stream_id, flags, headers } => {
                let mut p = Vec::new();
                p.put_u32(stream_id & 0x7fff_ffff);
                p.extend_from_slice(&self.header_block(headers)?);
                (8, *flags, p)
            }
            Frame::WindowUpdate { stream_id, delta } => {
                let mut p = Vec::new();
                p.put_u32(stream_id & 0x7fff_ffff);
                p.put_u32(delta & 0x7fff_ffff);
                (9, 0, p)
            }
        };
        if payload.len() > MAX_FRAME {
            return Err(SpdyError::Protocol("control frame too large".into()));
        }
        let mut out = Vec::with_capacity(8 + payload.len());
        out.put_u16(0x8000 | VERSION);
        out.put_u16(ty);
        out.put_u32(((flags as u32) << 24) | payload.len() as u32);
        out.extend_from_slice(&payload);
        Ok(out)
    }
}

/// Decodes frames from a byte buffer; holds the receiving direction's header decompressor.
pub struct Decoder {
    z: Decompress,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder {
    /// A fresh decoder.
    pub fn new() -> Decoder {
        Decoder { z: Decompress::new(true) }
    }

    fn header_block(&mut self, compressed: &[u8]) -> Result<Headers, SpdyError> {
        let mut out: Vec<u8> = Vec::with_capacity(compressed.len() * 4 + 256);
        let start = self.z.total_in();
        loop {
            let consumed = (self.z.total_in() - start) as usize;
            match self.z.decompress_vec(&compressed[consumed..], &mut out, FlushDecompress::Sync) {
                Ok(Status::StreamEnd) => break,
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.z.set_dictionary(dictionary()).map_err(|e| SpdyError::Compression(e.to_string()))?;
                    continue;
                }
                Err(e) => return Err(SpdyError::Compression(e.to_string())),
            }
            if (self.z.total_in() - start) as usize == compressed.len() && out.len() < out.capacity() {
                break;
            }
            if out.len() >= MAX_HEADER_BLOCK {
                return Err(SpdyError::Protocol("header block too large".into()));
            }
            out.reserve(out.capacity().max(256));
        }
        parse_header_block(&out)
    }

    /// Takes one whole frame off the front of `buf`, `Ok(None)` when `buf` does not hold one
    /// yet. Errors: a malformed frame (the session ends with GOAWAY).
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, SpdyError> {
        if buf.len() < 8 {
            return Ok(None);
        }
        let len = (u32::from_be_bytes([0, buf[5], buf[6], buf[7]])) as usize;
        if buf.len() < 8 + len {
            return Ok(None);
        }
        let first = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        let flags = buf[4];
        buf.advance(8);
        let mut p = buf.split_to(len);
        if first & 0x8000_0000 == 0 {
            return Ok(Some(Frame::Data { stream_id: first & 0x7fff_ffff, flags, data: p.freeze() }));
        }
        let version = ((first >> 16) & 0x7fff) as u16;
        if version != VERSION {
            return Err(SpdyError::Protocol(format!("unsupported version {version}")));
        }
        let ty = (first & 0xffff) as u16;
        let short = |need: usize, p: &BytesMut| if p.len() < need { Err(SpdyError::Protocol(format!("control frame type {ty} too short"))) } else { Ok(()) };
        let frame = match ty {
            1 => {
                short(10, &p)?;
                let stream_id = p.get_u32() & 0x7fff_ffff;
                let associated = p.get_u32() & 0x7fff_ffff;
                let priority = p.get_u8() >> 5;
                p.get_u8();
                Frame::SynStream { stream_id, associated, priority, flags, headers: self.header_block(&p)? }
            }
            2 => {
                short(4, &p)?;
                let stream_id = p.get_u32() & 0x7fff_ffff;
                Frame::SynReply { stream_id, flags, headers: self.header_block(&p)? }
            }
            3 => {
                short(8, &p)?;
                Frame::RstStream { stream_id: p.get_u32() & 0x7fff_ffff, status: p.get_u32() }
            }
            4 => {
                short(4, &p)?;
                let n = p.get_u32() as usize;
                short(n.saturating_mul(8), &p)?;
                let entries = (0..n)
                    .map(|_| {
                        let a = p.get_u32();
                        ((a >> 24) as u8, a & 0x00ff_ffff, p.get_u32())
                    })
                    .collect();
                Frame::Settings { flags, entries }
            }
            6 => {
                short(4, &p)?;
                Frame::Ping { id: p.get_u32() }
            }
            7 => {
                short(8, &p)?;
                Frame::GoAway { last_good: p.get_u32() & 0x7fff_ffff, status: p.get_u32() }
            }
            8 => {
                short(4, &p)?;
                let stream_id = p.get_u32() & 0x7fff_ffff;
                Frame::Headers { stream_id, flags, headers: self.header_block(&p)? }
            }
            9 => {
                short(8, &p)?;
                Frame::WindowUpdate { stream_id: p.get_u32() & 0x7fff_ffff, delta: p.get_u32() & 0x7fff_ffff }
            }
            // unknown control frames are ignored (draft 3 §2.2.1)
            _ => return self.decode(buf),
        };
        Ok(Some(frame))
    }
}

fn parse_header_block(raw: &[u8]) -> Result<Headers, SpdyError> {
    let bad = || SpdyError::Protocol("malformed header block".into());
    let mut b = raw;
    if b.len() < 4 {
        return Err(bad());
    }
    let n = b.get_u32() as usize;
    let mut out = Vec::with_capacity(n.min(64));
    for _ in 0..n {
        let mut field = || -> Result<String, SpdyError> {
            if b.len() < 4 {
                return Err(bad());
            }
            let l = b.get_u32() as usize;
            if b.len() < l {
                return Err(bad());
            }
            let s = String::from_utf8_lossy(&b[..l]).into_owned();
            b.advance(l);
            Ok(s)
        };
        let name = field()?;
        let value = field()?;
        out.push((name.to_ascii_lowercase(), value));
    }
    Ok(out)
}

/// One stream the client opened: its headers, the data it sends (the receiver ends at its
/// FIN or RST_STREAM) and a writer for our half.
pub struct Stream {
    /// The stream id (odd: client-initiated).
    pub id: u32,
    /// The SYN_STREAM's headers (lowercase names).
    pub headers: Headers,
    /// Data from the client, in order; `None` once it half-closed or reset the stream.
    pub rx: mpsc::Receiver<Bytes>,
    /// Our half of the stream.
    pub writer: StreamWriter,
}

/// Writes our half of one stream (cheap to clone).
#[derive(Clone)]
pub struct StreamWriter {
    id: u32,
    out: mpsc::UnboundedSender<Out>,
}

impl StreamWriter {
    /// Sends `data` on the stream (split into frames of at most 32 KiB); `false` when the
    /// session is gone.
    pub fn write(&self, data: Bytes) -> bool {
        let mut data = data;
        while data.len() > WRITE_CHUNK {
            let head = data.split_to(WRITE_CHUNK);
            if self.out.send(Out::Frame(Frame::Data { stream_id: self.id, flags: 0, data: head })).is_err() {
                return false;
            }
        }
        data.is_empty() || self.out.send(Out::Frame(Frame::Data { stream_id: self.id, flags: 0, data })).is_ok()
    }

    /// Half-closes our side (an empty data frame with FIN).
    pub fn close(&self) {
        let _ = self.out.send(Out::Frame(Frame::Data { stream_id: self.id, flags: FLAG_FIN, data: Bytes::new() }));
    }

    /// Resets the stream with `status` (e.g. [`RST_CANCEL`]).
    pub fn reset(&self, status: u32) {
        let _ = self.out.send(Out::Frame(Frame::RstStream { stream_id: self.id, status }));
    }
}

enum Out {
    Frame(Frame),
    /// GOAWAY, flush and close the connection.
    Close,
}

/// A server session: the client's streams arrive on [`Session::incoming`] (each already
/// answered with SYN_REPLY); PINGs are answered. Dropping the session, or [`Session::close`],
/// ends the connection.
pub struct Session {
    /// Streams the client opens, in order.
    pub incoming: mpsc::Receiver<Stream>,
    out: mpsc::UnboundedSender<Out>,
    reader: tokio::task::JoinHandle<()>,
    writer: Option<tokio::task::JoinHandle<()>>,
}

impl Session {
    /// Starts serving SPDY on `io` (an upgraded connection).
    pub fn start<IO>(io: IO) -> Session
    where
        IO: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (mut rd, mut wr) = tokio::io::split(io);
        let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Out>();
        let (in_tx, in_rx) = mpsc::channel::<Stream>(16);
        let writer = tokio::spawn(async move {
            let mut enc = Encoder::new();
            while let Some(o) = out_rx.recv().await {
                let frame = match o {
                    Out::Frame(f) => f,
                    Out::Close => {
                        if let Ok(b) = enc.encode(&Frame::GoAway { last_good: 0, status: 0 }) {
                            let _ = wr.write_all(&b).await;
                        }
                        let _ = wr.flush().await;
                        let _ = wr.shutdown().await;
                        return;
                    }
                };
                let Ok(b) = enc.encode(&frame) else { return };
                if wr.write_all(&b).await.is_err() {
                    return;
                }
                // flush when nothing else is queued (a burst goes out in one write)
                if out_rx.is_empty() && wr.flush().await.is_err() {
                    return;
                }
            }
        });
        let out = out_tx.clone();
        let reader = tokio::spawn(async move {
            let mut dec = Decoder::new();
            let mut buf = BytesMut::with_capacity(16 * 1024);
            let mut streams: HashMap<u32, mpsc::Sender<Bytes>> = HashMap::new();
            loop {
                let frame = match dec.decode(&mut buf) {
                    Ok(Some(f)) => f,
                    Ok(None) => match rd.read_buf(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => continue,
                    },
                    Err(e) => {
                        tracing::debug!(error = %e, "SPDY session: bad frame; closing");
                        let _ = out.send(Out::Frame(Frame::GoAway { last_good: 0, status: 1 }));
                        let _ = out.send(Out::Close);
                        return;
                    }
                };
                match frame {
                    Frame::SynStream { stream_id, flags, headers, .. } => {
                        if stream_id % 2 == 0 || streams.contains_key(&stream_id) {
                            let _ = out.send(Out::Frame(Frame::RstStream { stream_id, status: RST_PROTOCOL_ERROR }));
                            continue;
                        }
                        let (tx, rx) = mpsc::channel::<Bytes>(64);
                        if flags & FLAG_FIN == 0 {
                            streams.insert(stream_id, tx);
                        }
                        let _ = out.send(Out::Frame(Frame::SynReply { stream_id, flags: 0, headers: vec![] }));
                        let s = Stream { id: stream_id, headers, rx, writer: StreamWriter { id: stream_id, out: out.clone() } };
                        if in_tx.send(s).await.is_err() {
                            let _ = out.send(Out::Frame(Frame::RstStream { stream_id, status: RST_REFUSED_STREAM }));
                        }
                    }
                    Frame::Data { stream_id, flags, data } => {
                        if let Some(tx) = streams.get(&stream_id) {
                            // the reader of a stream may be gone (its handler ended): drop
                            if !data.is_empty() && tx.send(data).await.is_err() {
                                streams.remove(&stream_id);
                            }
                        }
                        if flags & FLAG_FIN != 0 {
                            streams.remove(&stream_id);
                        }
                    }
                    Frame::RstStream { stream_id, .. } => {
                        streams.remove(&stream_id);
                    }
                    Frame::Headers { stream_id, flags, .. } => {
                        if flags & FLAG_FIN != 0 {
                            streams.remove(&stream_id);
                        }
                    }
                    Frame::Ping { id } => {
                        // answer the client's (odd) pings; ours are never sent
                        if id % 2 == 1 {
                            let _ = out.send(Out::Frame(Frame::Ping { id }));
                        }
                    }
                    Frame::GoAway { .. } => return,
                    Frame::SynReply { .. } | Frame::Settings { .. } | Frame::WindowUpdate { .. } => {}
                }
            }
        });
        Session { incoming: in_rx, out: out_tx, reader, writer: Some(writer) }
    }

    /// Ends the session: GOAWAY, then the connection is flushed and closed once every frame
    /// queued before is written.
    pub async fn close(mut self) {
        let _ = self.out.send(Out::Close);
        if let Some(w) = self.writer.take() {
            let _ = w.await;
        }
        self.reader.abort();
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.reader.abort();
        if self.writer.is_some() {
            let _ = self.out.send(Out::Close);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::Digest;

    #[test]
    fn the_dictionary_is_the_spdy3_one() {
        let d = dictionary();
        assert_eq!(d.len(), 1423);
        assert_eq!(hex::encode(sha2::Sha256::digest(d)), "51d27341373f923f3cd88e1eb7162aeaa3723d7585ff2399201dc06498407f02");
    }

    #[test]
    fn frames_round_trip() {
        let frames = vec![
            Frame::SynStream { stream_id: 1, associated: 0, priority: 2, flags: 0, headers: vec![("streamtype".into(), "error".into()), ("port".into(), "8080".into())] },
            Frame::SynReply { stream_id: 1, flags: 0, headers: vec![] },
            Frame::SynStream { stream_id: 3, associated: 0, priority: 0, flags: FLAG_FIN, headers: vec![("streamtype".into(), "stdin".into())] },
            Frame::Data { stream_id: 3, flags: FLAG_FIN, data: Bytes::from_static(b"hello") },
            Frame::RstStream { stream_id: 5, status: RST_CANCEL },
            Frame::Settings { flags: 0, entries: vec![(0, 7, 65536)] },
            Frame::Ping { id: 7 },
            Frame::GoAway { last_good: 3, status: 0 },
            Frame::Headers { stream_id: 3, flags: 0, headers: vec![("x".into(), "y".into())] },
            Frame::WindowUpdate { stream_id: 3, delta: 1000 },
        ];
        let mut enc = Encoder::new();
        let mut dec = Decoder::new();
        let mut buf = BytesMut::new();
        for f in &frames {
            buf.extend_from_slice(&enc.encode(f).unwrap());
        }
        // a partial frame is not taken
        let mut short = BytesMut::from(&buf[..5]);
        assert_eq!(Decoder::new().decode(&mut short).unwrap(), None);
        for f in &frames {
            assert_eq!(dec.decode(&mut buf).unwrap().as_ref(), Some(f));
        }
        assert!(buf.is_empty());
        assert_eq!(dec.decode(&mut buf).unwrap(), None);
    }

    /// A header block as zlib with the dictionary produces it (the way spdystream's Go
    /// framer writes one): our decoder reads it, and our encoder's output inflates with
    /// the dictionary to the same plain block.
    #[test]
    fn header_blocks_use_the_dictionary() {
        let headers: Headers = vec![("streamtype".into(), "data".into()), ("port".into(), "80".into()), ("requestid".into(), "0".into())];
        let mut enc = Encoder::new();
        let wire = enc.encode(&Frame::SynReply { stream_id: 1, flags: 0, headers: headers.clone() }).unwrap();
        let block = &wire[12..];
        // the zlib header announces a preset dictionary (FDICT) with the dictionary's adler32
        assert_eq!(block[1] & 0x20, 0x20, "FDICT set");
        let mut z = Decompress::new(true);
        let mut out = Vec::with_capacity(4096);
        let err = z.decompress_vec(block, &mut out, FlushDecompress::Sync).unwrap_err();
        assert!(err.needs_dictionary().is_some());
        z.set_dictionary(dictionary()).unwrap();
        let used = z.total_in() as usize;
        z.decompress_vec(&block[used..], &mut out, FlushDecompress::Sync).unwrap();
        assert_eq!(parse_header_block(&out).unwrap(), headers);
        // a second block continues the same zlib stream
        let wire2 = enc.encode(&Frame::SynReply { stream_id: 3, flags: 0, headers: headers.clone() }).unwrap();
        let mut dec = Decoder::new();
        let mut buf = BytesMut::from(&wire[..]);
        buf.extend_from_slice(&wire2);
        assert!(matches!(dec.decode(&mut buf).unwrap(), Some(Frame::SynReply { stream_id: 1, .. })));
        assert_eq!(dec.decode(&mut buf).unwrap(), Some(Frame::SynReply { stream_id: 3, flags: 0, headers }));
    }

    #[tokio::test]
    async fn a_session_replies_to_streams_and_pings_and_carries_data() {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let mut session = Session::start(server);
        let (mut crd, mut cwr) = tokio::io::split(client);
        let mut enc = Encoder::new();
        let mut dec = Decoder::new();
        let syn = Frame::SynStream { stream_id: 1, associated: 0, priority: 0, flags: 0, headers: vec![("streamtype".into(), "data".into())] };
        cwr.write_all(&enc.encode(&syn).unwrap()).await.unwrap();
        cwr.write_all(&enc.encode(&Frame::Ping { id: 1 }).unwrap()).await.unwrap();
        cwr.write_all(&enc.encode(&Frame::Data { stream_id: 1, flags: FLAG_FIN, data: Bytes::from_static(b"abc") }).unwrap()).await.unwrap();
        let mut s = session.incoming.recv().await.unwrap();
        assert_eq!(header(&s.headers, "streamtype"), Some("data"));
        assert_eq!(s.rx.recv().await.unwrap(), Bytes::from_static(b"abc"));
        assert_eq!(s.rx.recv().await, None, "FIN ends the client's half");
        s.writer.write(Bytes::from_static(b"xyz"));
        s.writer.close();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        while got.len() < 4 {
            match dec.decode(&mut buf).unwrap() {
                Some(f) => got.push(f),
                None => {
                    crd.read_buf(&mut buf).await.unwrap();
                }
            }
        }
        assert_eq!(got[0], Frame::SynReply { stream_id: 1, flags: 0, headers: vec![] });
        assert!(got.contains(&Frame::Ping { id: 1 }));
        assert!(got.contains(&Frame::Data { stream_id: 1, flags: 0, data: Bytes::from_static(b"xyz") }));
        assert!(got.contains(&Frame::Data { stream_id: 1, flags: FLAG_FIN, data: Bytes::new() }));
        session.close().await;
    }
}
