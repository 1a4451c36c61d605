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
//!
//! A snapshot is input from the bucket, so the reader trusts none of it: every page reference
//! is checked against the meta page's page count and the file's size (with the pages it spans),
//! a page reached twice (a cycle or a shared subtree) and a tree deeper than [`MAX_DEPTH`] are
//! refused, and the walk keeps its own stack instead of recursing, so no file can make it
//! allocate beyond the file's size or overflow the thread's stack. [`check`] walks a whole file
//! that way before etcd's tools see it.

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
/// Levels a tree may have: a B+tree of etcd's largest database (8 GiB in 4 KiB pages) has
/// fewer than 10, even at two elements a branch page it has 22.
pub const MAX_DEPTH: usize = 64;

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
    #[error("{path} is not a valid etcd database: {problem}; it cannot be used")]
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
    /// How errors name the file (the object it came from, or its path).
    label: String,
    page_size: usize,
    pages: u64,
    root: u64,
    freelist: u64,
}

impl BoltReader {
    /// Opens `path` and reads its newest valid meta page.
    pub fn open(path: &Path) -> Result<BoltReader, BoltError> {
        BoltReader::open_as(path, &path.display().to_string())
    }

    /// Opens `path`, naming it `label` (e.g. the object it was downloaded from) in errors.
    pub fn open_as(path: &Path, label: &str) -> Result<BoltReader, BoltError> {
        let file = File::open(path).map_err(|source| BoltError::Io {
            path: label.to_string(),
            what: "open",
            source,
        })?;
        let len = file
            .metadata()
            .map_err(|source| BoltError::Io {
                path: label.to_string(),
                what: "stat",
                source,
            })?
            .len();
        let mut reader = BoltReader {
            file,
            path: path.to_path_buf(),
            label: label.to_string(),
            page_size: 4096,
            pages: 0,
            root: 0,
            freelist: 0,
        };
        if len < 2 * (PAGE_HEADER as u64 + 64) {
            return Err(reader.invalid(format!("it holds {len} bytes, less than two meta pages")));
        }
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
        let needed = meta.pages.checked_mul(page_size as u64);
        if meta.pages < 3 || needed.is_none_or(|needed| needed > len) {
            return Err(reader.invalid(format!(
                "its meta page counts {} pages of {page_size} bytes, but the file holds {len} \
                 bytes (it is truncated or the meta page is forged)",
                meta.pages
            )));
        }
        reader.pages = meta.pages;
        reader.root = meta.root;
        reader.freelist = meta.freelist;
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
        let mut seen = PageSet::new(self.pages);
        match root {
            Root::Inline(page) => {
                // An inline bucket is one leaf page; a branch there would point anywhere.
                if page.len() >= PAGE_HEADER && u16_at(page, 8) & LEAF == 0 {
                    return Err(self.invalid("an inline bucket page is not a leaf".to_string()));
                }
                self.visit(page, 0, &mut Vec::new(), f)
            }
            Root::Page(id) => {
                // Depth-first with an explicit stack: children pushed last-first, so leaves are
                // visited in key order and no file can drive a recursion.
                let mut stack = vec![(*id, 1usize)];
                let mut children = Vec::new();
                while let Some((id, depth)) = stack.pop() {
                    if depth > MAX_DEPTH {
                        return Err(self.invalid(format!(
                            "page {id} lies {depth} levels deep, more than any etcd database \
                             ({MAX_DEPTH})"
                        )));
                    }
                    let page = self.page(id, &mut seen)?;
                    children.clear();
                    self.visit(&page, id, &mut children, f)?;
                    stack.extend(children.iter().rev().map(|child| (*child, depth + 1)));
                }
                Ok(())
            }
        }
    }

    /// Reads page `id` with the pages it spans, after checking it lies within the file and
    /// was not reached before.
    fn page(&self, id: u64, seen: &mut PageSet) -> Result<Vec<u8>, BoltError> {
        self.check_range(id, 0)?;
        if !seen.insert(id) {
            return Err(self.invalid(format!(
                "page {id} is reached twice (a cycle or a shared subtree)"
            )));
        }
        let mut header = [0u8; PAGE_HEADER];
        self.read_at(&mut header, id * self.page_size as u64)?;
        let overflow = u64::from(u32_at(&header, 12));
        self.check_range(id, overflow)?;
        if u64_at(&header, 0) != id {
            return Err(self.invalid(format!("page {id} says it is page {}", u64_at(&header, 0))));
        }
        // Within the file (checked above), so the allocation is bounded by its size.
        let mut page = vec![0u8; (1 + overflow as usize) * self.page_size];
        self.read_at(&mut page, id * self.page_size as u64)?;
        Ok(page)
    }

    /// Page `id` and the `overflow` pages after it lie within the meta page's page count.
    fn check_range(&self, id: u64, overflow: u64) -> Result<(), BoltError> {
        if id < 2 || id >= self.pages {
            return Err(self.invalid(format!(
                "page {id} is outside the file's {} pages",
                self.pages
            )));
        }
        if id.checked_add(overflow).is_none_or(|end| end >= self.pages) {
            return Err(self.invalid(format!(
                "page {id} spans {overflow} overflow pages, past the file's {} pages",
                self.pages
            )));
        }
        Ok(())
    }

    /// Calls `f` with a leaf page's elements, or collects a branch page's children.
    fn visit(
        &self,
        page: &[u8],
        id: u64,
        children: &mut Vec<u64>,
        f: &mut ElementVisitor<'_>,
    ) -> Result<(), BoltError> {
        if page.len() < PAGE_HEADER {
            return Err(self.invalid(format!("page {id} is shorter than its header")));
        }
        let flags = u16_at(page, 8);
        let count = u16_at(page, 10) as usize;
        let slice = |from: usize, len: usize| -> Result<&[u8], BoltError> {
            from.checked_add(len)
                .and_then(|end| page.get(from..end))
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
                children.push(u64_at(element, 8));
            } else {
                return Err(
                    self.invalid(format!("page {id} has flags {flags:#x}, not a tree page"))
                );
            }
        }
        Ok(())
    }

    /// Checks the freelist page's place and span (its content is not used).
    fn check_freelist(&self) -> Result<(), BoltError> {
        if self.freelist == u64::MAX {
            // bbolt's "no freelist synced" marker.
            return Ok(());
        }
        self.check_range(self.freelist, 0)?;
        let mut header = [0u8; PAGE_HEADER];
        self.read_at(&mut header, self.freelist * self.page_size as u64)?;
        if u16_at(&header, 8) & FREELIST == 0 {
            return Err(self.invalid(format!(
                "the meta page's freelist page {} is not a freelist page",
                self.freelist
            )));
        }
        self.check_range(self.freelist, u64::from(u32_at(&header, 12)))
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), BoltError> {
        self.file
            .read_exact_at(buf, offset)
            .map_err(|source| BoltError::Io {
                path: format!("{} ({})", self.label, self.path.display()),
                what: "read",
                source,
            })
    }

    fn invalid(&self, problem: String) -> BoltError {
        BoltError::Invalid {
            path: self.label.clone(),
            problem,
        }
    }
}

/// Pages reached in one walk: one bit a page, so bounded by the file's size.
struct PageSet(Vec<u64>);

impl PageSet {
    fn new(pages: u64) -> PageSet {
        PageSet(vec![0; pages.div_ceil(64) as usize])
    }

    /// Marks `id` (in range); false when it was marked before.
    fn insert(&mut self, id: u64) -> bool {
        let (word, bit) = ((id / 64) as usize, 1u64 << (id % 64));
        let fresh = self.0[word] & bit == 0;
        self.0[word] |= bit;
        fresh
    }
}

/// Walks every page of database `path` (downloaded as `object`) the way a restore reads it:
/// the meta pages, the freelist page's span, and each bucket's tree with every reference
/// checked. A file that passes cannot make quorate's reader, or send etcd's tools, past the
/// file's own pages.
pub fn check(path: &Path, object: &str) -> Result<(), BoltError> {
    let reader = BoltReader::open_as(path, object)?;
    reader.check_freelist()?;
    for bucket in reader.buckets()? {
        let name = String::from_utf8_lossy(&bucket.name).into_owned();
        reader.walk(&bucket.root, &mut |flags, _, _| {
            if flags & BUCKET_FLAG != 0 {
                return Err(format!("bucket {name} holds a nested bucket"));
            }
            Ok(())
        })?;
    }
    Ok(())
}

struct Meta {
    root: u64,
    freelist: u64,
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
            freelist: u64_at(m, 32),
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
            let page = meta_page(self.page_size, id, root, self.next_page, txid + id);
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

/// Meta page `id` of a database of `pages` pages whose root bucket is at page `root`.
fn meta_page(page_size: usize, id: u64, root: u64, pages: u64, txid: u64) -> Vec<u8> {
    let mut page = vec![0u8; page_size];
    page[..8].copy_from_slice(&id.to_le_bytes());
    page[8..10].copy_from_slice(&META.to_le_bytes());
    let m = &mut page[PAGE_HEADER..PAGE_HEADER + 64];
    m[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    m[4..8].copy_from_slice(&VERSION.to_le_bytes());
    m[8..12].copy_from_slice(&(page_size as u32).to_le_bytes());
    m[16..24].copy_from_slice(&root.to_le_bytes());
    m[32..40].copy_from_slice(&2u64.to_le_bytes());
    m[40..48].copy_from_slice(&pages.to_le_bytes());
    m[48..56].copy_from_slice(&txid.to_le_bytes());
    let sum = fnv1a64(&m[..56]);
    m[56..64].copy_from_slice(&sum.to_le_bytes());
    page
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

    const PS: usize = 4096;

    /// A page `id` with `flags` and one element per `(key, value_or_child)`.
    fn raw_page(id: u64, flags: u16, elements: &[(&[u8], u64)]) -> Vec<u8> {
        let mut page = vec![0u8; PS];
        page[..8].copy_from_slice(&id.to_le_bytes());
        page[8..10].copy_from_slice(&flags.to_le_bytes());
        page[10..12].copy_from_slice(&(elements.len() as u16).to_le_bytes());
        let mut off = PAGE_HEADER + elements.len() * ELEMENT;
        for (i, (key, n)) in elements.iter().enumerate() {
            let at = PAGE_HEADER + i * ELEMENT;
            let pos = (off - at) as u32;
            if flags == LEAF {
                // A bucket element: its value is the root page and a sequence.
                page[at..at + 4].copy_from_slice(&BUCKET_FLAG.to_le_bytes());
                page[at + 4..at + 8].copy_from_slice(&pos.to_le_bytes());
                page[at + 8..at + 12].copy_from_slice(&(key.len() as u32).to_le_bytes());
                page[at + 12..at + 16].copy_from_slice(&16u32.to_le_bytes());
                page[off..off + key.len()].copy_from_slice(key);
                page[off + key.len()..off + key.len() + 8].copy_from_slice(&n.to_le_bytes());
                off += key.len() + 16;
            } else {
                page[at..at + 4].copy_from_slice(&pos.to_le_bytes());
                page[at + 4..at + 8].copy_from_slice(&(key.len() as u32).to_le_bytes());
                page[at + 8..at + 16].copy_from_slice(&n.to_le_bytes());
                page[off..off + key.len()].copy_from_slice(key);
                off += key.len();
            }
        }
        page
    }

    /// A database whose root bucket (page 3) holds bucket `key` rooted at page 4, followed by
    /// `pages` (from page 4 on).
    fn raw_db(dir: &Path, pages: &[Vec<u8>]) -> PathBuf {
        let path = dir.join("raw.db");
        let count = 4 + pages.len() as u64;
        let mut bytes = meta_page(PS, 0, 3, count, 10);
        bytes.extend(meta_page(PS, 1, 3, count, 11));
        bytes.extend(raw_page(2, FREELIST, &[]));
        bytes.extend(raw_page(3, LEAF, &[(b"key", 4)]));
        for page in pages {
            bytes.extend_from_slice(page);
        }
        std::fs::write(&path, bytes).unwrap();
        path
    }

    /// A chain of `depth` branch pages from page 4, each with one child, ending in an empty
    /// leaf.
    fn chain(depth: u64) -> Vec<Vec<u8>> {
        let mut pages: Vec<Vec<u8>> = (0..depth)
            .map(|i| raw_page(4 + i, BRANCH, &[(b"a", 5 + i)]))
            .collect();
        pages.push(raw_page(4 + depth, LEAF, &[]));
        pages
    }

    /// The check's verdict on `path`, which must be a refusal naming the object, reached in
    /// bounded time and memory (the process's peak stays far below what a followed cycle or a
    /// trusted overflow count would allocate).
    fn refused(path: &Path) -> String {
        let started = std::time::Instant::now();
        let err = check(path, "p/v2/Full-00000000-00000009-1.gz").unwrap_err();
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        let usage =
            nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).unwrap();
        let peak = usage.max_rss() as u64 * 1024;
        assert!(peak < 512 << 20, "peak memory {peak} bytes");
        let text = err.to_string();
        assert!(text.contains("p/v2/Full-00000000-00000009-1.gz"), "{text}");
        text
    }

    #[test]
    fn hand_built_trees_within_the_depth_bound_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = raw_db(dir.path(), &chain(20));
        check(&path, "obj").unwrap();
        let r = BoltReader::open(&path).unwrap();
        let buckets = r.buckets().unwrap();
        let mut n = 0;
        r.for_each(&buckets[0], &mut |_, _| {
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 0);
    }

    #[test]
    fn a_page_cycle_is_refused_naming_the_page_without_recursing() {
        let dir = tempfile::tempdir().unwrap();
        // Page 5 points back to page 4; page 6 to itself.
        let looped = vec![
            raw_page(4, BRANCH, &[(b"a", 5)]),
            raw_page(5, BRANCH, &[(b"a", 4)]),
        ];
        let err = refused(&raw_db(dir.path(), &looped));
        assert!(err.contains("page 4 is reached twice"), "{err}");
        let own = vec![raw_page(4, BRANCH, &[(b"a", 4), (b"b", 4)])];
        let err = refused(&raw_db(dir.path(), &own));
        assert!(err.contains("page 4 is reached twice"), "{err}");
    }

    #[test]
    fn a_tree_deeper_than_any_etcd_database_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let err = refused(&raw_db(dir.path(), &chain(MAX_DEPTH as u64 + 5)));
        assert!(err.contains("levels deep"), "{err}");
    }

    #[test]
    fn out_of_range_pages_overflow_and_forged_page_counts_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let far = vec![raw_page(4, BRANCH, &[(b"a", 1_000_000)])];
        let err = refused(&raw_db(dir.path(), &far));
        assert!(
            err.contains("page 1000000 is outside the file's 5 pages"),
            "{err}"
        );
        let meta = vec![raw_page(4, BRANCH, &[(b"a", 0)])];
        assert!(refused(&raw_db(dir.path(), &meta)).contains("page 0 is outside"));
        let mut huge = raw_page(4, LEAF, &[]);
        huge[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        let err = refused(&raw_db(dir.path(), &[huge]));
        assert!(
            err.contains("page 4 spans 4294967295 overflow pages"),
            "{err}"
        );
        let mut liar = raw_page(4, LEAF, &[]);
        liar[..8].copy_from_slice(&7u64.to_le_bytes());
        let err = refused(&raw_db(dir.path(), &[liar]));
        assert!(err.contains("page 4 says it is page 7"), "{err}");
        // A meta page counting more pages than the file holds (checksum recomputed).
        let path = raw_db(dir.path(), &chain(1));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[..PS].copy_from_slice(&meta_page(PS, 0, 3, u64::MAX / 2, 20));
        std::fs::write(&path, &bytes).unwrap();
        let err = refused(&path);
        assert!(err.contains("but the file holds"), "{err}");
        // A freelist page overflowing past the end.
        let path = raw_db(dir.path(), &chain(1));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[2 * PS + 12..2 * PS + 16].copy_from_slice(&1000u32.to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        assert!(refused(&path).contains("page 2 spans 1000 overflow pages"));
    }

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
