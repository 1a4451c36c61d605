//! The protobuf encoding the direct replay needs, by hand: etcd's `mvccpb.KeyValue` and
//! `leasepb.Lease` are stored in its database as protobuf, and only varints and
//! length-delimited fields occur. Field numbers are etcd's (`api/mvccpb/kv.proto`,
//! `server/lease/leasepb/lease.proto`), unchanged from 3.4 to 3.5.

/// Appends `value` as a varint.
pub fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Appends field `field` as a varint (wire type 0).
pub fn put_varint_field(out: &mut Vec<u8>, field: u32, value: u64) {
    put_varint(out, u64::from(field) << 3);
    put_varint(out, value);
}

/// Appends field `field` as length-delimited bytes (wire type 2).
pub fn put_bytes_field(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    put_varint(out, (u64::from(field) << 3) | 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// A decoded field's value.
#[derive(Clone, Copy, Debug)]
pub enum Value<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 2.
    Bytes(&'a [u8]),
    /// Wire types 1 and 5 (skipped).
    Fixed,
}

impl<'a> Value<'a> {
    /// The varint, or an error naming the wire type found.
    pub fn varint(self) -> Result<u64, String> {
        match self {
            Value::Varint(v) => Ok(v),
            other => Err(format!("expected a varint, found {other:?}")),
        }
    }

    /// The bytes, or an error naming the wire type found.
    pub fn bytes(self) -> Result<&'a [u8], String> {
        match self {
            Value::Bytes(b) => Ok(b),
            other => Err(format!("expected bytes, found {other:?}")),
        }
    }
}

/// Walks a message's fields.
#[derive(Debug)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// A reader over one encoded message.
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, at: 0 }
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let Some(&b) = self.bytes.get(self.at) else {
                return Err("truncated varint".to_string());
            };
            self.at += 1;
            value |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(value);
            }
        }
        Err("varint longer than 10 bytes".to_string())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(|| format!("a field of {n} bytes runs past the message"))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    /// The next field number and value; `None` at the end.
    pub fn next_field(&mut self) -> Result<Option<(u32, Value<'a>)>, String> {
        if self.at >= self.bytes.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let field = (key >> 3) as u32;
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Value::Fixed
            }
            2 => {
                let n = self.varint()? as usize;
                Value::Bytes(self.take(n)?)
            }
            5 => {
                self.take(4)?;
                Value::Fixed
            }
            other => return Err(format!("unsupported wire type {other}")),
        };
        Ok(Some((field, value)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_fields_round_trip() {
        let mut out = Vec::new();
        put_varint_field(&mut out, 3, 300);
        put_bytes_field(&mut out, 100, b"ab");
        put_varint_field(&mut out, 1, u64::MAX);
        // 300 = 0xac 0x02; field 100, wire type 2 = 802 = 0xa2 0x06.
        assert_eq!(&out[..5], &[0x18, 0xac, 0x02, 0xa2, 0x06]);
        let mut r = Reader::new(&out);
        assert_eq!(r.next_field().unwrap().unwrap().1.varint().unwrap(), 300);
        let (field, value) = r.next_field().unwrap().unwrap();
        assert_eq!((field, value.bytes().unwrap()), (100, &b"ab"[..]));
        assert_eq!(
            r.next_field().unwrap().unwrap().1.varint().unwrap(),
            u64::MAX
        );
        assert!(r.next_field().unwrap().is_none());
        assert!(Reader::new(&[0x0a, 0x05, 1]).next_field().is_err());
    }
}
