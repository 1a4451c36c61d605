//! The few protobuf messages the WAL replay writes and reads, encoded by hand: etcd's
//! `InternalRaftRequest` is not part of its client API (no crate ships it), and the WAL's
//! frames need only varints and length-delimited fields.
//!
//! Field numbers are etcd's (`api/etcdserverpb/raft_internal.proto`, `rpc.proto`,
//! `raft/raftpb/raft.proto`, `wal/walpb/record.proto`), unchanged from 3.4 to 3.5.

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

/// One operation of a replayed txn.
#[derive(Clone, Copy, Debug)]
pub enum TxnOp<'a> {
    /// `PutRequest { key = 1, value = 2, lease = 3 }`.
    Put {
        /// The key.
        key: &'a [u8],
        /// The value.
        value: &'a [u8],
        /// The lease ID, 0 for none.
        lease: i64,
    },
    /// `DeleteRangeRequest { key = 1 }` (one key).
    Delete {
        /// The key.
        key: &'a [u8],
    },
}

/// `InternalRaftRequest { header = 100 { ID = 1 }, ID = 1, txn = 6 { success = 2 } }`: one
/// txn without compares; etcd applies it as one revision.
pub fn txn_request(id: u64, ops: &[TxnOp<'_>]) -> Vec<u8> {
    let mut txn = Vec::new();
    let mut op = Vec::new();
    let mut inner = Vec::new();
    for o in ops {
        op.clear();
        inner.clear();
        match *o {
            TxnOp::Put { key, value, lease } => {
                put_bytes_field(&mut inner, 1, key);
                put_bytes_field(&mut inner, 2, value);
                if lease != 0 {
                    put_varint_field(&mut inner, 3, lease as u64);
                }
                put_bytes_field(&mut op, 2, &inner); // RequestOp.request_put
            }
            TxnOp::Delete { key } => {
                put_bytes_field(&mut inner, 1, key);
                put_bytes_field(&mut op, 3, &inner); // RequestOp.request_delete_range
            }
        }
        put_bytes_field(&mut txn, 2, &op); // TxnRequest.success
    }
    request(id, 6, &txn)
}

/// `InternalRaftRequest { lease_grant = 8 { TTL = 1, ID = 2 } }`.
pub fn lease_grant_request(id: u64, lease: i64, ttl: i64) -> Vec<u8> {
    let mut grant = Vec::new();
    put_varint_field(&mut grant, 1, ttl as u64);
    put_varint_field(&mut grant, 2, lease as u64);
    request(id, 8, &grant)
}

fn request(id: u64, field: u32, body: &[u8]) -> Vec<u8> {
    let mut header = Vec::new();
    put_varint_field(&mut header, 1, id);
    let mut out = Vec::with_capacity(body.len() + 24);
    put_bytes_field(&mut out, 100, &header);
    put_varint_field(&mut out, 1, id);
    put_bytes_field(&mut out, field, body);
    out
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

    #[test]
    fn a_txn_request_nests_ops_as_etcd_expects() {
        let bytes = txn_request(
            9,
            &[
                TxnOp::Put {
                    key: b"k",
                    value: b"v",
                    lease: 5,
                },
                TxnOp::Delete { key: b"d" },
            ],
        );
        let mut r = Reader::new(&bytes);
        let mut txn = None;
        while let Some((field, value)) = r.next_field().unwrap() {
            if field == 6 {
                txn = Some(value.bytes().unwrap());
            }
        }
        let mut ops = Reader::new(txn.expect("txn field 6"));
        let (f, put) = ops.next_field().unwrap().unwrap();
        assert_eq!(f, 2);
        let mut put = Reader::new(put.bytes().unwrap());
        assert_eq!(put.next_field().unwrap().unwrap().0, 2); // request_put
        let (f, del) = ops.next_field().unwrap().unwrap();
        assert_eq!(f, 2);
        let mut del = Reader::new(del.bytes().unwrap());
        assert_eq!(del.next_field().unwrap().unwrap().0, 3); // request_delete_range
    }
}
