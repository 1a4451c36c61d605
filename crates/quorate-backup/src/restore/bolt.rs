//! etcd's database file format (bbolt), read page by page and written in one pass.
//!
//! The direct replay reads the full snapshot's buckets in key order and writes a new file:
//! every bucket copied, the `key` bucket continued with the replayed revisions (their keys sort
//! after every key of the snapshot), the `lease` bucket merged with the leases the replay
//! grants. Writing a B+tree from sorted input needs no rebalancing: leaves are filled in
//! order, then each level of branch pages above them. `etcdctl snapshot restore` then opens,
//! checks and rewrites the file as it does any snapshot.
//!
//! The format (bbolt 1.3, the same in etcd 3.4 and 3.5), little-endian: a page is a 16-byte
//! header (`id` u64, `flags` u16, `count` u16, `overflow` u32: extra pages it spans) followed by
//! `count` 16-byte elements and their data. A leaf element is `flags` u32 (1: the value is a
//! bucket), `pos` u32 (from the element to its key), `ksize` u32, `vsize` u32, the value
//! following the key; a branch element is `pos` u32, `ksize` u32, `pgid` u64 (the child). Pages
//! 0 and 1 are meta pages (magic, version 2, page size, root bucket, freelist page, page count,
//! transaction ID, FNV-1a checksum); the one with the higher transaction ID counts. A bucket's
//! value is its root page ID and sequence, or, when the root is 0, the bucket's single page
//! inline after them.

use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use thiserror::Error;

const PAGE_HEADER: usize = 16;
const ELEMENT: usize = 16;
const BRANCH: u16 = 0x01;
const LEAF: u16 = 0x02;
const META: u16 = 0x04;
const FREELIST: u16 = 0x10;
const BUCKET_FLAG: u32 = 0x01;
const MAGIC: u32 = 0xED0C_DAED;
const VERSION: u32 = 2;

/// The file is not a bbolt database quorate can read, or could not be written.
#[derive(Debug, Error)]
pub enum BoltError {
    /// File trouble.
    #[error("{path}: {what}: {source}")]
    Io {
        /// The file.
        path: String,
        /// What was being done.
        what: &'static str,
        /// The cause.
        source: std::io::Error,
    },
    /// The content is not a valid database.
    #[error("{path} is not a valid etcd database: {problem}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        problem: String,
    },
}

/// Called with each key and value of a bucket; an error stops the walk.
pub type KeyValueVisitor<'a> = dyn FnMut(&[u8], &[u8]) -> Result<(), String> + 'a;
/// Called with each leaf element's flags, key and value.
type ElementVisitor<'a> = dyn FnMut(u32, &[u8], &[u8]) -> Result<(), String> + 'a;

/// A bucket of the root: its name and where its tree starts.
#[derive(Clone, Debug)]
pub struct BucketRef {
    /// The bucket's name (`key`, `lease`, `meta`, ...).
    pub name: Vec<u8>,
    /// Its sequence counter.
    pub sequence: u64,
    root: Root,
}

#[derive(Clone, Debug)]
enum Root {
    Page(u64),
    Inline(Vec<u8>),
}

/// A database file opened for reading, one page at a time.
#[derive(Debug)]
pub struct BoltReader {
    file: File,
    path: PathBuf,
    page_size: usize,
    pages: u64,
    root: u64,
}

impl BoltReader {
    /// Opens `path` and reads its newest valid meta page.
    pub fn open(path: &Path) -> Result<BoltReader, BoltError> {
        let file = File::open(path).map_err(|source| BoltError::Io {
            path: path.display().to_string(),
            what: "open",
            source,
        })?;
        let mut reader = BoltReader {
            file,
            path: path.to_path_buf(),
            page_size: 4096,
            pages: 0,
            root: 0,
        };
        // Page 0's meta says the page size; page 1 sits one page size further.
        let mut first = vec![0u8; PAGE_HEADER + 64];
        reader.read_at(&mut first, 0)?;
        let page_size = u32_at(&first, PAGE_HEADER + 8) as usize;
        if !(512..=65536).contains(&page_size) || !page_size.is_power_of_two() {
            return Err(reader.invalid(format!("page size {page_size} in meta page 0")));
        }
        reader.page_size = page_size;
        let mut best: Option<Meta> = None;
        for id in 0..2u64 {
            let mut bytes = vec![0u8; PAGE_HEADER + 64];
            reader.read_at(&mut bytes, id * page_size as u64)?;
            if let Some(meta) = Meta::parse(&bytes)
                && best.as_ref().is_none_or(|b| meta.txid > b.txid)
            {
                best = Some(meta);
            }
        }
        let meta = best.ok_or_else(|| reader.invalid("no valid meta page".to_string()))?;
        reader.pages = meta.pages;
        reader.root = meta.root;
        Ok(reader)
    }

    /// The page size, which the written file keeps.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// The buckets of the root, in name order.
    pub fn buckets(&self) -> Result<Vec<BucketRef>, BoltError> {
        let mut out = Vec::new();
        self.walk(&Root::Page(self.root), &mut |flags, key, value| {
            if flags & BUCKET_FLAG == 0 {
                return Ok(());
            }
            if value.len() < 16 {
                return Err(format!(
                    "bucket {:?} has a short header",
                    String::from_utf8_lossy(key)
                ));
            }
            let root = u64_at(value, 0);
            out.push(BucketRef {
                name: key.to_vec(),
                sequence: u64_at(value, 8),
                root: if root == 0 {
                    Root::Inline(value[16..].to_vec())
                } else {
                    Root::Page(root)
                },
            });
            Ok(())
        })?;
        Ok(out)
    }

    /// Calls `f` with every key and value of `bucket` in key order (nested buckets are not
    /// used by etcd and are refused).
    pub fn for_each(
        &self,
        bucket: &BucketRef,
        f: &mut KeyValueVisitor<'_>,
    ) -> Result<(), BoltError> {
        let name = String::from_utf8_lossy(&bucket.name).into_owned();
        self.walk(&bucket.root, &mut |flags, key, value| {
            if flags & BUCKET_FLAG != 0 {
                return Err(format!("bucket {name} holds a nested bucket"));
            }
            f(key, value)
        })
    }

    fn walk(&self, root: &Root, f: &mut ElementVisitor<'_>) -> Result<(), BoltError> {
        match root {
            Root::Inline(page) => self.visit(page, 0, f),
            Root::Page(id) => self.visit_page(*id, f),
        }
    }

    fn visit_page(&self, id: u64, f: &mut ElementVisitor<'_>) -> Result<(), BoltError> {
        if id < 2 || id >= self.pages {
            return Err(self.invalid(format!(
                "page {id} is outside the file's {} pages",
                self.pages
            )));
        }
        let mut header = [0u8; PAGE_HEADER];
        self.read_at(&mut header, id * self.page_size as u64)?;
        let overflow = u32_at(&header, 12) as u64;
        let mut page = vec![0u8; (1 + overflow as usize) * self.page_size];
        self.read_at(&mut page, id * self.page_size as u64)?;
        self.visit(&page, id, f)
    }

    fn visit(&self, page: &[u8], id: u64, f: &mut ElementVisitor<'_>) -> Result<(), BoltError> {
        if page.len() < PAGE_HEADER {
            return Err(self.invalid(format!("page {id} is shorter than its header")));
        }
        let flags = u16_at(page, 8);
        let count = u16_at(page, 10) as usize;
        let slice = |from: usize, len: usize| -> Result<&[u8], BoltError> {
            page.get(from..from + len)
                .ok_or_else(|| self.invalid(format!("page {id}: an element runs past the page")))
        };
        for i in 0..count {
            let at = PAGE_HEADER + i * ELEMENT;
            let element = slice(at, ELEMENT)?;
            if flags & LEAF != 0 {
                let (eflags, pos, ksize, vsize) = (
                    u32_at(element, 0),
                    u32_at(element, 4) as usize,
                    u32_at(element, 8) as usize,
                    u32_at(element, 12) as usize,
                );
                let key = slice(at + pos, ksize)?;
                let value = slice(at + pos + ksize, vsize)?;
                f(eflags, key, value)
                    .map_err(|problem| self.invalid(format!("page {id}: {problem}")))?;
            } else if flags & BRANCH != 0 {
                let child = u64_at(element, 8);
                self.visit_page(child, f)?;
            } else {
                return Err(
                    self.invalid(format!("page {id} has flags {flags:#x}, not a tree page"))
                );
            }
        }
        Ok(())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), BoltError> {
        self.file
            .read_exact_at(buf, offset)
            .map_err(|source| BoltError::Io {
                path: self.path.display().to_string(),
                what: "read",
                source,
            })
    }

    fn invalid(&self, problem: String) -> BoltError {
        BoltError::Invalid {
            path: self.path.display().to_string(),
            problem,
        }
    }
}

struct Meta {
    root: u64,
    pages: u64,
    txid: u64,
}

impl Meta {
    /// A meta page's fields, if its magic, version and checksum hold.
    fn parse(page: &[u8]) -> Option<Meta> {
        let m = &page[PAGE_HEADER..PAGE_HEADER + 64];
        if u16_at(page, 8) & META == 0 || u32_at(m, 0) != MAGIC || u32_at(m, 4) != VERSION {
            return None;
        }
        if fnv1a64(&m[..56]) != u64_at(m, 56) {
            return None;
        }
        Some(Meta {
            root: u64_at(m, 16),
            pages: u64_at(m, 40),
            txid: u64_at(m, 48),
        })
    }
}

/// Writes a new database file front to back: buckets one after another, each from keys in
/// order, then the root and the meta pages.
pub struct BoltWriter {
    out: BufWriter<File>,
    path: PathBuf,
    page_size: usize,
    next_page: u64,
    buckets: Vec<(Vec<u8>, u64, u64)>,
}

impl std::fmt::Debug for BoltWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoltWriter")
            .field("path", &self.path)
            .field("next_page", &self.next_page)
            .finish()
    }
}

impl BoltWriter {
    /// Creates `path` for a database with pages of `page_size` bytes.
    pub fn create(path: &Path, page_size: usize) -> Result<BoltWriter, BoltError> {
        let io = |what| {
            let path = path.display().to_string();
            move |source| BoltError::Io { path, what, source }
        };
        let mut file = File::create(path).map_err(io("create"))?;
        // Pages 0 and 1 (meta) and 2 (the empty freelist) are written at the end.
        file.seek(SeekFrom::Start(3 * page_size as u64))
            .map_err(io("seek"))?;
        Ok(BoltWriter {
            out: BufWriter::with_capacity(1 << 20, file),
            path: path.to_path_buf(),
            page_size,
            next_page: 3,
            buckets: Vec::new(),
        })
    }

    /// Starts bucket `name`; its keys must then come in order through [`BucketBuilder::put`].
    pub fn bucket(&mut self, name: &[u8], sequence: u64) -> BucketBuilder {
        BucketBuilder {
            name: name.to_vec(),
            sequence,
            leaf: Vec::new(),
            leaf_bytes: PAGE_HEADER,
            first_keys: Vec::new(),
            last_key: None,
        }
    }

    /// Writes the root bucket and the meta pages and syncs the file.
    pub fn finish(mut self, txid: u64) -> Result<(), BoltError> {
        let mut buckets = std::mem::take(&mut self.buckets);
        buckets.sort();
        let items: Vec<(Vec<u8>, Vec<u8>, u32)> = buckets
            .into_iter()
            .map(|(name, root, sequence)| {
                let mut value = Vec::with_capacity(16);
                value.extend_from_slice(&root.to_le_bytes());
                value.extend_from_slice(&sequence.to_le_bytes());
                (name, value, BUCKET_FLAG)
            })
            .collect();
        let root = self.tree(items)?;
        let io = |what| {
            let path = self.path.display().to_string();
            move |source| BoltError::Io { path, what, source }
        };
        let file = self.out.into_inner().map_err(|e| BoltError::Io {
            path: self.path.display().to_string(),
            what: "flush",
            source: e.into_error(),
        })?;
        for id in 0..2u64 {
            let mut page = vec![0u8; self.page_size];
            page[..8].copy_from_slice(&id.to_le_bytes());
            page[8..10].copy_from_slice(&META.to_le_bytes());
            let m = &mut page[PAGE_HEADER..PAGE_HEADER + 64];
            m[0..4].copy_from_slice(&MAGIC.to_le_bytes());
            m[4..8].copy_from_slice(&VERSION.to_le_bytes());
            m[8..12].copy_from_slice(&(self.page_size as u32).to_le_bytes());
            m[16..24].copy_from_slice(&root.to_le_bytes());
            m[32..40].copy_from_slice(&2u64.to_le_bytes());
            m[40..48].copy_from_slice(&self.next_page.to_le_bytes());
            m[48..56].copy_from_slice(&(txid + id).to_le_bytes());
            let sum = fnv1a64(&m[..56]);
            m[56..64].copy_from_slice(&sum.to_le_bytes());
            file.write_all_at(&page, id * self.page_size as u64)
                .map_err(io("write meta"))?;
        }
        let mut freelist = vec![0u8; self.page_size];
        freelist[..8].copy_from_slice(&2u64.to_le_bytes());
        freelist[8..10].copy_from_slice(&FREELIST.to_le_bytes());
        file.write_all_at(&freelist, 2 * self.page_size as u64)
            .map_err(io("write freelist"))?;
        file.sync_all().map_err(io("sync"))
    }

    /// Writes a tree of sorted `items` (key, value, element flags); returns its root page.
    fn tree(&mut self, items: Vec<(Vec<u8>, Vec<u8>, u32)>) -> Result<u64, BoltError> {
        let mut builder = self.bucket(&[], 0);
        for (key, value, flags) in items {
            builder.push(self, key, value, flags)?;
        }
        builder.close(self)
    }

    /// Writes one page (leaf or branch) of `elements`; returns its ID.
    fn page(
        &mut self,
        flags: u16,
        elements: &[(Vec<u8>, Vec<u8>, u32, u64)],
    ) -> Result<u64, BoltError> {
        let id = self.next_page;
        let data: usize = elements.iter().map(|(k, v, _, _)| k.len() + v.len()).sum();
        let size = PAGE_HEADER + elements.len() * ELEMENT + data;
        let pages = size.div_ceil(self.page_size).max(1);
        let mut page = vec![0u8; pages * self.page_size];
        page[..8].copy_from_slice(&id.to_le_bytes());
        page[8..10].copy_from_slice(&flags.to_le_bytes());
        page[10..12].copy_from_slice(&(elements.len() as u16).to_le_bytes());
        page[12..16].copy_from_slice(&((pages - 1) as u32).to_le_bytes());
        let mut off = PAGE_HEADER + elements.len() * ELEMENT;
        for (i, (key, value, eflags, child)) in elements.iter().enumerate() {
            let at = PAGE_HEADER + i * ELEMENT;
            let pos = (off - at) as u32;
            if flags == LEAF {
                page[at..at + 4].copy_from_slice(&eflags.to_le_bytes());
                page[at + 4..at + 8].copy_from_slice(&pos.to_le_bytes());
                page[at + 8..at + 12].copy_from_slice(&(key.len() as u32).to_le_bytes());
                page[at + 12..at + 16].copy_from_slice(&(value.len() as u32).to_le_bytes());
            } else {
                page[at..at + 4].copy_from_slice(&pos.to_le_bytes());
                page[at + 4..at + 8].copy_from_slice(&(key.len() as u32).to_le_bytes());
                page[at + 8..at + 16].copy_from_slice(&child.to_le_bytes());
            }
            page[off..off + key.len()].copy_from_slice(key);
            off += key.len();
            page[off..off + value.len()].copy_from_slice(value);
            off += value.len();
        }
        self.out.write_all(&page).map_err(|source| BoltError::Io {
            path: self.path.display().to_string(),
            what: "write",
            source,
        })?;
        self.next_page += pages as u64;
        Ok(id)
    }
}

/// One bucket being written: keys in order fill leaf pages; closing it writes the branch
/// levels above them.
#[derive(Debug)]
pub struct BucketBuilder {
    name: Vec<u8>,
    sequence: u64,
    leaf: Vec<(Vec<u8>, Vec<u8>, u32, u64)>,
    leaf_bytes: usize,
    first_keys: Vec<(Vec<u8>, u64)>,
    last_key: Option<Vec<u8>>,
}

impl BucketBuilder {
    /// Adds `key` with `value`; keys must come in strictly increasing order.
    pub fn put(
        &mut self,
        writer: &mut BoltWriter,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), BoltError> {
        self.push(writer, key.to_vec(), value.to_vec(), 0)
    }

    fn push(
        &mut self,
        writer: &mut BoltWriter,
        key: Vec<u8>,
        value: Vec<u8>,
        flags: u32,
    ) -> Result<(), BoltError> {
        if key.is_empty() || self.last_key.as_ref().is_some_and(|last| *last >= key) {
            return Err(BoltError::Invalid {
                path: writer.path.display().to_string(),
                problem: format!(
                    "bucket {:?}: key {:?} is empty or not after the previous one",
                    String::from_utf8_lossy(&self.name),
                    String::from_utf8_lossy(&key)
                ),
            });
        }
        let size = ELEMENT + key.len() + value.len();
        if !self.leaf.is_empty() && self.leaf_bytes + size > writer.page_size {
            self.flush_leaf(writer)?;
        }
        self.last_key = Some(key.clone());
        self.leaf_bytes += size;
        self.leaf.push((key, value, flags, 0));
        Ok(())
    }

    fn flush_leaf(&mut self, writer: &mut BoltWriter) -> Result<(), BoltError> {
        let first = self.leaf[0].0.clone();
        let id = writer.page(LEAF, &self.leaf)?;
        self.first_keys.push((first, id));
        self.leaf.clear();
        self.leaf_bytes = PAGE_HEADER;
        Ok(())
    }

    /// Writes what is left and the branch pages; returns the root page ID.
    fn close(mut self, writer: &mut BoltWriter) -> Result<u64, BoltError> {
        if !self.leaf.is_empty() || self.first_keys.is_empty() {
            // An empty bucket still gets a (empty) leaf page as its root.
            let first = self.leaf.first().map(|e| e.0.clone()).unwrap_or_default();
            let id = writer.page(LEAF, &self.leaf)?;
            self.first_keys.push((first, id));
        }
        let mut level = self.first_keys;
        while level.len() > 1 {
            let mut next = Vec::new();
            let mut page: Vec<(Vec<u8>, Vec<u8>, u32, u64)> = Vec::new();
            let mut bytes = PAGE_HEADER;
            for (key, child) in level {
                let size = ELEMENT + key.len();
                if !page.is_empty() && bytes + size > writer.page_size {
                    let first = page[0].0.clone();
                    next.push((first, writer.page(BRANCH, &page)?));
                    page.clear();
                    bytes = PAGE_HEADER;
                }
                bytes += size;
                page.push((key, Vec::new(), 0, child));
            }
            let first = page[0].0.clone();
            next.push((first, writer.page(BRANCH, &page)?));
            level = next;
        }
        Ok(level[0].1)
    }

    /// Closes the bucket and records it in the writer's root.
    pub fn finish(self, writer: &mut BoltWriter) -> Result<(), BoltError> {
        let (name, sequence) = (self.name.clone(), self.sequence);
        let root = self.close(writer)?;
        writer.buckets.push((name, root, sequence));
        Ok(())
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_database_reads_back_in_order_across_levels_and_overflow_pages() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let mut w = BoltWriter::create(&path, 4096).unwrap();
        let mut many = w.bucket(b"key", 7);
        for i in 0..20_000u32 {
            many.put(&mut w, &i.to_be_bytes(), format!("value {i}").as_bytes())
                .unwrap();
        }
        many.put(&mut w, &u32::MAX.to_be_bytes(), &vec![9u8; 10_000])
            .unwrap();
        assert!(many.put(&mut w, &1u32.to_be_bytes(), b"late").is_err());
        many.finish(&mut w).unwrap();
        w.bucket(b"alarm", 0).finish(&mut w).unwrap();
        w.finish(5).unwrap();

        let r = BoltReader::open(&path).unwrap();
        let buckets = r.buckets().unwrap();
        let names: Vec<_> = buckets.iter().map(|b| b.name.clone()).collect();
        assert_eq!(names, vec![b"alarm".to_vec(), b"key".to_vec()]);
        assert_eq!(buckets[1].sequence, 7);
        let mut seen = Vec::new();
        r.for_each(&buckets[1], &mut |k, v| {
            seen.push((k.to_vec(), v.len()));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen.len(), 20_001);
        assert!(seen.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(seen.last().unwrap().1, 10_000);
        let mut none = 0;
        r.for_each(&buckets[0], &mut |_, _| {
            none += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(none, 0);
    }
}
