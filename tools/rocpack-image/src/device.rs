//! A byte scan for HIP device code in files the analyses do not read
//! (the fallback of the seam for an image it refuses, whatever its format).

use rocpack_bundle::BUNDLE_MAGIC;

/// Whether bytes an analysis could not handle still hold HIP device code
/// (a `.hip_fatbin` section name or an offload bundle magic). `split`
/// refuses such a file rather than keep its device code in a generic
/// package, and `verify` reports one found there.
pub fn carries_device_code(data: &[u8]) -> bool {
    DEVICE_CODE_NEEDLES
        .iter()
        .any(|n| memchr::memmem::find(data, n).is_some())
}

/// What [`carries_device_code`] looks for.
const DEVICE_CODE_NEEDLES: [&[u8]; 2] = [b".hip_fatbin", BUNDLE_MAGIC];

/// [`carries_device_code`] of the `len` bytes of `file` at `offset` (fewer
/// when the file ends first), read in 1 MiB pieces that overlap by a
/// needle's length: memory and address space stay at a piece whatever the
/// file's size (nothing is mapped).
pub fn file_carries_device_code(
    file: &std::fs::File,
    offset: u64,
    len: u64,
) -> std::io::Result<bool> {
    use std::os::unix::fs::FileExt;
    const PIECE: usize = 1 << 20;
    let keep = DEVICE_CODE_NEEDLES
        .iter()
        .map(|n| n.len())
        .max()
        .unwrap_or(1)
        - 1;
    let mut buf = vec![0u8; PIECE + keep];
    let end = offset.saturating_add(len);
    let (mut pos, mut have) = (offset, 0usize);
    while pos < end {
        let want = usize::try_from(end - pos).map_or(PIECE, |n| n.min(PIECE));
        let n = match file.read_at(&mut buf[have..have + want], pos) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        pos += n as u64;
        have += n;
        if carries_device_code(&buf[..have]) {
            return Ok(true);
        }
        // A needle may straddle two pieces: its start is carried over.
        let tail = have.min(keep);
        buf.copy_within(have - tail..have, 0);
        have = tail;
    }
    Ok(false)
}
