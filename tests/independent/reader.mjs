// An independent reader of the s3log on-store format, written from docs/format.md alone
// (no s3log code), to show that the specification is precise enough to implement.
//
//   node tests/independent/reader.mjs ROOT [--prefix P] [--trusted-ed25519 PEMFILE [--bucket B | --log-id ID]] [--session SID ...]
//
// ROOT is a dump of a store: each object is the file ROOT/<key>. Prints one JSON object
// {sid: result} on stdout; see tests/independent/README.md for the result form.

import { createHash, createPublicKey, verify as cryptoVerify } from "node:crypto";
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

// ---------------------------------------------------------------------------------------
// CBOR decoding (RFC 8949). A decoded item is a node {t, v, s, e}: t its type, v its value,
// s/e its byte span in the buffer (so a data item can be returned "as stored").
//   t: "int" (v BigInt; also bignums, tags 2/3), "float" (v number), "text", "bytes"
//   (v Buffer), "array" (v [node]), "map" (v [[knode, vnode]] in stored order), "tag"
//   (tag BigInt, v node), "bool", "null", "simple" (v number; 23 is `undefined`).
// Strict everywhere: definite lengths only (deterministic encoding has no others), no
// shared values (tags 28/29), no reserved additional-info values, valid UTF-8, no
// duplicate map keys (RFC 8949 §5.6: not valid CBOR), nothing after the item.

export class Corrupt extends Error {}
// A tombstone ("Head", `expired`): the session expired; its head is checked, its chain is not read.
export class Expired extends Corrupt {}

const MAX_DEPTH = 1000; // refuse absurd nesting rather than overflow the JS stack
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }); // a leading U+FEFF is text, not a mark to drop

// `object`: a head or segment, which never holds tags 55799 or 256 ("Format v2": they
// may appear only inside data items, which are byte strings in a v2 object).
export function decodeOne(buf, what = "item", object = false) {
  const dec = new Decoder(buf, object);
  const node = dec.item(0);
  if (dec.pos !== buf.length) throw new Corrupt(`${what}: ${buf.length - dec.pos} byte(s) after the CBOR item`);
  return node;
}

class Decoder {
  constructor(buf, object = false) { this.buf = buf; this.pos = 0; this.object = object; }

  need(n) {
    if (this.pos + n > this.buf.length) throw new Corrupt("CBOR item runs past the end of its bytes");
  }

  // The argument of a head byte: returns a BigInt, or throws on 28-31.
  arg(ai) {
    if (ai < 24) return BigInt(ai);
    if (ai > 27) throw new Corrupt(ai === 31 ? "indefinite-length CBOR item" : `reserved CBOR additional info ${ai}`);
    const n = 1 << (ai - 24);
    this.need(n);
    let v = 0n;
    for (let i = 0; i < n; i++) v = (v << 8n) | BigInt(this.buf[this.pos + i]);
    this.pos += n;
    return v;
  }

  // A length must fit in what is left (each element takes at least one byte).
  len(ai) {
    const n = this.arg(ai);
    if (n > BigInt(this.buf.length - this.pos)) throw new Corrupt("CBOR length runs past the end of its bytes");
    return Number(n);
  }

  item(depth) {
    if (depth > MAX_DEPTH) throw new Corrupt("CBOR nested too deeply");
    this.need(1);
    const s = this.pos;
    const ib = this.buf[this.pos++];
    const mt = ib >> 5, ai = ib & 31;
    const node = (t, v) => ({ t, v, s, e: this.pos });
    switch (mt) {
      case 0: return node("int", this.arg(ai));
      case 1: return node("int", -1n - this.arg(ai));
      case 2: case 3: {
        const n = this.len(ai);
        const raw = this.buf.subarray(this.pos, this.pos + n);
        this.pos += n;
        if (mt === 2) return node("bytes", raw);
        try { return node("text", utf8.decode(raw)); } catch { throw new Corrupt("CBOR text string is not UTF-8"); }
      }
      case 4: {
        const n = this.len(ai), out = [];
        for (let i = 0; i < n; i++) out.push(this.item(depth + 1));
        return node("array", out);
      }
      case 5: {
        const n = this.len(ai), out = [], seen = new Set();
        for (let i = 0; i < n; i++) {
          const k = this.item(depth + 1);
          const id = encode(k).toString("hex"); // equal keys encode equally
          if (seen.has(id)) throw new Corrupt("CBOR map with a duplicate key");
          seen.add(id);
          out.push([k, this.item(depth + 1)]);
        }
        return node("map", out);
      }
      case 6: {
        const tag = this.arg(ai);
        if (tag === 28n || tag === 29n) throw new Corrupt(`CBOR shared value (tag ${tag})`);
        if (this.object && (tag === 55799n || tag === 256n)) throw new Corrupt(`tag ${tag} in a head or segment`);
        const inner = this.item(depth + 1);
        if (tag === 2n || tag === 3n) { // bignum: an integer like any other
          if (inner.t !== "bytes") throw new Corrupt(`CBOR bignum (tag ${tag}) of a non-byte-string`);
          let m = 0n;
          for (const b of inner.v) m = (m << 8n) | BigInt(b);
          return node("int", tag === 2n ? m : -1n - m);
        }
        return { t: "tag", tag, v: inner, s, e: this.pos };
      }
      default: { // major type 7
        if (ai < 20) return node("simple", ai);
        if (ai === 20 || ai === 21) return node("bool", ai === 21);
        if (ai === 22) return node("null", null);
        if (ai === 23) return node("simple", 23);
        if (ai === 24) {
          this.need(1);
          const v = this.buf[this.pos++];
          if (v < 32) throw new Corrupt("CBOR two-byte simple value below 32");
          return node("simple", v);
        }
        if (ai === 25) { this.need(2); const v = halfToNumber(this.buf.readUInt16BE(this.pos)); this.pos += 2; return node("float", v); }
        if (ai === 26) { this.need(4); const v = this.buf.readFloatBE(this.pos); this.pos += 4; return node("float", v); }
        if (ai === 27) { this.need(8); const v = this.buf.readDoubleBE(this.pos); this.pos += 8; return node("float", v); }
        throw new Corrupt(ai === 31 ? "CBOR break outside an indefinite-length item" : `reserved CBOR additional info ${ai}`);
      }
    }
  }
}

function halfToNumber(h) {
  const sign = h & 0x8000 ? -1 : 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 31) return mant ? NaN : sign * Infinity;
  return sign * (1024 + mant) * 2 ** (exp - 25);
}

// ---------------------------------------------------------------------------------------
// Deterministic CBOR encoding (RFC 8949 §4.2.1) of a node: needed for version 1 entry
// hashes, the signed payload and meta_digest. Integers in [-2^64, 2^64) use major types
// 0/1, larger ones bignums with no leading zero bytes; floats their shortest exact form
// (NaN as f97e00); map keys sorted by their encoded bytes.

function head(mt, n) {
  n = BigInt(n);
  const b = (x, len) => { const out = Buffer.alloc(len); for (let i = len - 1; i >= 0; i--) { out[i] = Number(x & 0xffn); x >>= 8n; } return out; };
  if (n < 24n) return Buffer.from([(mt << 5) | Number(n)]);
  if (n < 0x100n) return Buffer.concat([Buffer.from([(mt << 5) | 24]), b(n, 1)]);
  if (n < 0x10000n) return Buffer.concat([Buffer.from([(mt << 5) | 25]), b(n, 2)]);
  if (n < 0x100000000n) return Buffer.concat([Buffer.from([(mt << 5) | 26]), b(n, 4)]);
  return Buffer.concat([Buffer.from([(mt << 5) | 27]), b(n, 8)]);
}

function encodeFloat(x) {
  if (Number.isNaN(x)) return Buffer.from([0xf9, 0x7e, 0x00]);
  if (x === Infinity) return Buffer.from([0xf9, 0x7c, 0x00]);
  if (x === -Infinity) return Buffer.from([0xf9, 0xfc, 0x00]);
  const h = exactHalf(x);
  if (h !== null) { const out = Buffer.alloc(3); out[0] = 0xf9; out.writeUInt16BE(h, 1); return out; }
  if (Math.fround(x) === x) { const out = Buffer.alloc(5); out[0] = 0xfa; out.writeFloatBE(x, 1); return out; }
  const out = Buffer.alloc(9); out[0] = 0xfb; out.writeDoubleBE(x, 1); return out;
}

// The binary16 bits of x if x is exactly representable as one, else null.
function exactHalf(x) {
  const sign = x < 0 || Object.is(x, -0) ? 0x8000 : 0;
  const a = Math.abs(x);
  if (a === 0) return sign;
  if (Math.fround(a) !== a) return null;
  const f = Buffer.alloc(4); f.writeFloatBE(a);
  const bits = f.readUInt32BE(0), exp = ((bits >>> 23) & 0xff) - 127, mant = bits & 0x7fffff;
  if (exp >= -14 && exp <= 15) return (mant & 0x1fff) ? null : sign | ((exp + 15) << 10) | (mant >> 13);
  const m = a * 2 ** 24; // subnormal half: m * 2^-24 with m < 1024
  return exp < -14 && Number.isInteger(m) && m < 1024 ? sign | m : null;
}

export function encode(n) {
  switch (n.t) {
    case "int": {
      const v = n.v;
      if (v >= 0n && v < 1n << 64n) return head(0, v);
      if (v < 0n && v >= -(1n << 64n)) return head(1, -1n - v);
      let m = v >= 0n ? v : -1n - v;
      const bytes = [];
      while (m > 0n) { bytes.unshift(Number(m & 0xffn)); m >>= 8n; }
      return Buffer.concat([head(6, v >= 0n ? 2 : 3), head(2, bytes.length), Buffer.from(bytes)]);
    }
    case "float": return encodeFloat(n.v);
    case "bytes": return Buffer.concat([head(2, n.v.length), n.v]);
    case "text": { const b = Buffer.from(n.v, "utf8"); return Buffer.concat([head(3, b.length), b]); }
    case "array": return Buffer.concat([head(4, n.v.length), ...n.v.map(encode)]);
    case "map": {
      const pairs = n.v.map(([k, v]) => [encode(k), encode(v)]).sort((a, b) => Buffer.compare(a[0], b[0]));
      return Buffer.concat([head(5, pairs.length), ...pairs.flat()]);
    }
    case "tag": return Buffer.concat([head(6, n.tag), encode(n.v)]);
    case "bool": return Buffer.from([n.v ? 0xf5 : 0xf4]);
    case "null": return Buffer.from([0xf6]);
    case "simple": return n.v < 24 ? Buffer.from([0xe0 | n.v]) : Buffer.from([0xf8, n.v]);
  }
  throw new Error(`cannot encode ${n.t}`);
}

// Node constructors, for building maps to encode.
export const N = {
  int: (v) => ({ t: "int", v: BigInt(v) }),
  text: (v) => ({ t: "text", v }),
  bytes: (v) => ({ t: "bytes", v }),
  nul: () => ({ t: "null", v: null }),
  map: (obj) => ({ t: "map", v: Object.entries(obj).map(([k, v]) => [N.text(k), v]) }),
};

// ---------------------------------------------------------------------------------------
// JSON output. Built by hand so that map key order is the stored order (JS objects move
// integer-like keys first), integers beyond 2^53 stay exact and floats stay floats.

class Float { constructor(v) { this.v = v; } }
class Ordered { constructor(pairs) { this.pairs = pairs; } }

// The JSON form of a data item (rep() in tests/independent_sessions.py).
export function rep(n) {
  switch (n.t) {
    case "null": case "bool": case "text": return n.v;
    case "int": return n.v <= 2n ** 53n && n.v >= -(2n ** 53n) ? n.v : new Ordered([["$int", String(n.v)]]);
    case "float":
      if (Number.isNaN(n.v)) return new Ordered([["$float", "nan"]]);
      if (!Number.isFinite(n.v)) return new Ordered([["$float", n.v > 0 ? "inf" : "-inf"]]);
      return new Float(n.v);
    case "bytes": return new Ordered([["$bytes", n.v.toString("hex")]]);
    case "array": return n.v.map(rep);
    case "map":
      if (n.v.every(([k]) => k.t === "text")) return new Ordered(n.v.map(([k, v]) => [k.v, rep(v)]));
      return new Ordered([["$map", n.v.map(([k, v]) => [rep(k), rep(v)])]]);
    case "tag": return new Ordered([["$tag", n.tag], ["value", rep(n.v)]]);
    case "simple": return new Ordered([["$simple", n.v]]); // not produced by s3log's test data
  }
  throw new Error(`no JSON form for ${n.t}`);
}

export function toJSON(x, ind = "") {
  const next = ind + " ";
  if (x === null || typeof x === "boolean" || typeof x === "string") return JSON.stringify(x);
  if (typeof x === "bigint") return x.toString();
  if (typeof x === "number") return String(x); // seq etc.: always integers here
  if (x instanceof Float) {
    if (Object.is(x.v, -0)) return "-0.0";
    const s = String(x.v);
    return /[.e]/.test(s) ? s : s + ".0"; // keep 65504.0 a float for JSON readers
  }
  const pairs = x instanceof Ordered ? x.pairs : Array.isArray(x) ? null : Object.entries(x);
  if (pairs === null) return x.length ? `[\n${x.map((v) => next + toJSON(v, next)).join(",\n")}\n${ind}]` : "[]";
  if (!pairs.length) return "{}";
  return `{\n${pairs.map(([k, v]) => `${next}${JSON.stringify(k)}: ${toJSON(v, next)}`).join(",\n")}\n${ind}}`;
}

// ---------------------------------------------------------------------------------------
// Field access and type checks on decoded objects. A field of the wrong type makes the
// object corrupt ("like any malformed field").

const hex = (b) => b.toString("hex");
const sha256 = (b) => createHash("sha256").update(b).digest();

function field(map, name) {
  for (const [k, v] of map.v) if (k.t === "text" && k.v === name) return v;
  return undefined;
}

function need(cond, msg) { if (!cond) throw new Corrupt(msg); }

// Typed getters: each throws Corrupt naming the field.
const get = {
  any(map, name) { const v = field(map, name); need(v !== undefined, `no \`${name}\``); return v; },
  uint(map, name) { const v = get.any(map, name); need(v.t === "int" && v.v >= 0n, `\`${name}\` is not a uint`); return v.v; },
  int(map, name) { const v = get.any(map, name); need(v.t === "int", `\`${name}\` is not an int`); return v.v; },
  text(map, name) { const v = get.any(map, name); need(v.t === "text", `\`${name}\` is not text`); return v.v; },
  map(map, name) { const v = get.any(map, name); need(v.t === "map", `\`${name}\` is not a map`); return v; },
  array(map, name) { const v = get.any(map, name); need(v.t === "array", `\`${name}\` is not an array`); return v.v; },
  hash(map, name) { const v = get.any(map, name); need(v.t === "bytes" && v.v.length === 32, `\`${name}\` is not a 32-byte string`); return v.v; },
  hashOrNull(map, name) { const v = get.any(map, name); if (v.t === "null") return null; return get.hash(map, name); },
  intOrNull(map, name) { const v = get.any(map, name); need(v.t === "int" || v.t === "null", `\`${name}\` is not an int or null`); return v.v; },
  // An optional field ("Head": what an absent one reads as) that is absent, as null.
  opt(map, name) { return field(map, name) ?? { t: "null", v: null }; },
};

// ---------------------------------------------------------------------------------------
// Keys.

const SID_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const validSid = (sid) => SID_RE.test(sid) && !sid.includes("..");

// A segment key of session sid: {first_seq:012d}-{64 hex}[-{16 hex}].cbor under .../seg/.
// Returns {firstSeq, lastHash} or null. The seq must be written exactly as "%012d" writes
// it (no extra leading zeros), so that one segment has one key.
function parseSegKey(key, prefix, sid) {
  const dir = `${prefix}/sessions/${sid}/seg/`;
  if (!key.startsWith(dir)) return null;
  const m = /^(\d{12,})-([0-9a-f]{64})(?:-[0-9a-f]{16})?\.cbor$/.exec(key.slice(dir.length));
  if (!m) return null;
  const firstSeq = BigInt(m[1]);
  if (String(firstSeq).padStart(12, "0") !== m[1]) return null;
  return { firstSeq, lastHash: m[2] };
}

// ---------------------------------------------------------------------------------------
// Entries. An entry is {seq, kind, ts, prev, hash, data (node), dataBytes (as stored)}.

const KEY = Object.fromEntries(["ts", "seq", "data", "kind", "prev"].map((k) => [k, encode(N.text(k))]));

// The record of an entry (format v2): the deterministic encoding of {seq, prev, kind, ts,
// data}, laid out in its fixed key order around the data item's bytes as stored.
function record(seq, prev, kind, ts, dataBytes) {
  return Buffer.concat([
    Buffer.from([0xa5]),
    KEY.ts, encode(N.int(ts)), KEY.seq, encode(N.int(seq)), KEY.data, dataBytes,
    KEY.kind, encode(N.text(kind)), KEY.prev, prev === null ? encode(N.nul()) : encode(N.bytes(prev)),
  ]);
}

// The fields of a decoded entry map, typed as in "Entry" (hash checked by the caller).
// A v1 entry map may hold other keys: its hash does not cover them, and they are ignored
// ("Entry"). A v2 record is exactly the five-key map its layout is checked against.
function entryFields(m, withHash) {
  need(m.t === "map", "entry is not a map");
  const want = withHash ? ["seq", "prev", "kind", "ts", "data", "hash"] : ["seq", "prev", "kind", "ts", "data"];
  need((withHash || m.v.length === want.length) && want.every((k) => field(m, k) !== undefined),
    `entry does not have the keys ${want.join(", ")}`);
  return {
    seq: get.uint(m, "seq"), prev: get.hashOrNull(m, "prev"), kind: get.text(m, "kind"),
    ts: get.int(m, "ts"), data: get.any(m, "data"), hash: withHash ? get.hash(m, "hash") : null,
  };
}

// A version 1 entry (segment `entries` or v1 head `tail`): the hash is over the
// deterministic encoding of the decoded entry without `hash` ("Format v1 hashes"), so the
// data is encoded again, and data_cbor is that encoding (whatever bytes were stored).
function v1Entry(m, buf) {
  const f = entryFields(m, true);
  const label = `seq ${f.seq}`;
  const dataBytes = encode(f.data);
  const rec = record(f.seq, f.prev, f.kind, f.ts, dataBytes);
  need(sha256(rec).equals(f.hash), `${label}: hash does not match the entry`);
  return { ...f, dataBytes };
}

// A data item stored on its own (v2 `data[i]`): exactly one item, decoded strictly.
function dataItem(bytes, label) {
  try { return decodeOne(bytes, "data item"); } catch (e) { throw new Corrupt(`${label}: data: ${e.message}`); }
}

// A version 2 segment: columns, each record's hash checked before anything is decoded.
function v2Segment(seg) {
  const seq0 = get.uint(seg, "seq");
  const prev0 = get.hashOrNull(seg, "prev");
  const cols = ["ts", "kinds", "data", "hashes"].map((k) => get.array(seg, k));
  const [ts, kinds, data, hashes] = cols;
  need(ts.length >= 1 && cols.every((c) => c.length === ts.length), "`ts`, `kinds`, `data`, `hashes` are not arrays of one length >= 1");
  need(ts.every((x) => x.t === "int"), "`ts` holds a value that is not an integer");
  need(kinds.every((x) => x.t === "text"), "`kinds` holds a value that is not text");
  need(data.every((x) => x.t === "bytes"), "`data` holds a value that is not a byte string");
  need(hashes.every((x) => x.t === "bytes" && x.v.length === 32), "`hashes` holds a value that is not a 32-byte string");
  const out = [];
  for (let i = 0; i < ts.length; i++) {
    const seq = seq0 + BigInt(i), prev = i === 0 ? prev0 : hashes[i - 1].v;
    const rec = record(seq, prev, kinds[i].v, ts[i].v, data[i].v);
    need(sha256(rec).equals(hashes[i].v), `seq ${seq}: hash does not match the record`);
    out.push({ seq, prev, kind: kinds[i].v, ts: ts[i].v, hash: hashes[i].v, dataBytes: data[i].v });
  }
  for (const e of out) e.data = dataItem(e.dataBytes, `seq ${e.seq}`); // only after every hash checked
  return out;
}

// A version 2 head's tail: records with their hashes; each record must be laid out
// exactly as the deterministic encoding of what it decodes to (apart from the data item).
function v2Tail(tail, hashes) {
  need(tail.every((x) => x.t === "bytes"), "`tail` holds a value that is not a byte string");
  need(hashes.length === tail.length && hashes.every((x) => x.t === "bytes" && x.v.length === 32),
    "`tail_hashes` is not one 32-byte string per record");
  tail.forEach((r, i) => need(sha256(r.v).equals(hashes[i].v), `tail record ${i}: hash does not match the record`));
  return tail.map((r, i) => {
    const bytes = r.v;
    let m;
    try { m = decodeOne(bytes, "record"); } catch (e) { throw new Corrupt(`tail record ${i}: ${e.message}`); }
    need(bytes[0] === 0xa5, `tail record ${i}: does not start with a5`);
    const f = entryFields(m, false);
    const label = `seq ${f.seq}`;
    const dataBytes = bytes.subarray(f.data.s, f.data.e);
    need(record(f.seq, f.prev, f.kind, f.ts, dataBytes).equals(bytes), `${label}: record is not laid out deterministically`);
    return { ...f, hash: hashes[i].v, dataBytes };
  });
}

// ---------------------------------------------------------------------------------------
// Heads.

// The four values of a parent pointer, typed as "Head" says a reader checks them.
function checkParent(p) {
  need(p.t === "map", "`parent` is not a map or null");
  const session = get.text(p, "session"), seq = get.int(p, "seq"), hash = get.hashOrNull(p, "hash"), reason = get.text(p, "reason");
  need(validSid(session), "`parent.session` is not a session id");
  return { session, seq, hash, reason, node: p };
}

// Every field of the head, typed; the manifest checked before anything it lists is read.
// `tombstone`: the head of an expired session, whose `seq` and `hash` name no entry.
function parseHead(h, sid, prefix, tombstone = false) {
  need(h.t === "map", "head is not a map");
  const vn = get.any(h, "v");
  need(vn.t === "int" && (vn.v === 1n || vn.v === 2n), "unknown format version `v`");
  const v = Number(vn.v);
  need(get.text(h, "session") === sid, "`session` is not the session of the key");
  get.uint(h, "version"); // a commit counter; s3log stores 1 first, but readers check only the type
  const seq = get.int(h, "seq"), hashNode = get.opt(h, "hash");
  need(hashNode.t === "null" || (hashNode.t === "bytes" && hashNode.v.length === 32), "`hash` is not null or a 32-byte string");
  const hash = hashNode.t === "null" ? null : hashNode.v;
  if (!tombstone) {
    need(seq >= -1n, "`seq` is below -1");
    need((seq === -1n) === (hash === null), "`seq` -1 and a null `hash` go together");
  }
  const segments = get.array(h, "segments");
  need(segments.length <= 4096, "`segments` holds more than 4096 keys");
  const segs = segments.map((k) => {
    need(k.t === "text", "`segments` holds a value that is not text");
    const parsed = parseSegKey(k.v, prefix, sid);
    need(parsed, `\`segments\` holds ${JSON.stringify(k.v)}, not a segment key of this session`);
    return { key: k.v, ...parsed };
  });
  const levelsNode = field(h, "levels"); // optional: level 0 for each segment
  need(levelsNode === undefined || levelsNode.t === "array", "`levels` is not an array");
  const levels = levelsNode ? levelsNode.v : segments.map(() => ({ t: "int", v: 0n }));
  need(levels.length === segments.length && levels.every((x) => x.t === "int" && x.v >= 0n),
    "`levels` is not one uint per segment");
  const tail = get.array(h, "tail");
  const tailHashes = v === 2 ? get.array(h, "tail_hashes") : null;
  const pn = get.opt(h, "parent");
  const parent = pn.t === "null" ? null : checkParent(pn);
  let meta = get.opt(h, "meta"); // absent or null: {}
  if (meta.t === "null") meta = N.map({});
  need(meta.t === "map", "`meta` is not a map");
  get.uint(h, "created_at"); get.uint(h, "updated_at"); get.text(h, "writer");
  for (const name of ["ts_min", "ts_max", "retired_at"]) {
    need(["int", "null"].includes(get.opt(h, name).t), `\`${name}\` is not an int or null`);
  }
  // `pending` (null reads as absent), in a head of either version: checked, never read.
  if (get.opt(h, "pending").t !== "null") {
    const p = get.map(h, "pending");
    withKey("`pending`", () => {
      need(parseSegKey(get.text(p, "key"), prefix, sid), "`key` is not a segment key of this session");
      get.int(p, "last"); get.uint(p, "level"); get.uint(p, "take");
    });
  }
  // `lease` and `sig` (null reads as absent): shape-checked here whether or not
  // signatures are verified ("Required and optional").
  const lease = get.opt(h, "lease");
  if (lease.t !== "null") withKey("`lease`", () => { need(lease.t === "map", "not a map"); get.text(lease, "owner"); get.int(lease, "expires_at"); });
  // `append_keys` (null reads as absent): shape-checked, never read.
  const keys = get.opt(h, "append_keys");
  if (keys.t !== "null") withKey("`append_keys`", () => {
    need(keys.t === "array", "not an array");
    for (const item of keys.v) {
      need(item.t === "array" && (item.v.length === 3 || item.v.length === 4), "an item is not [key, seq, digest(, session)]");
      const [k, seq, digest, session] = item.v;
      need(k.t === "text" && k.v.length > 0, "an item's key is not non-empty text");
      need(seq.t === "int" && seq.v >= 0n, "an item's seq is not a uint");
      need(digest.t === "bytes" && digest.v.length === 16, "an item's digest is not bytes(16)");
      need(session === undefined || session.t === "text", "an item's session is not text");
    }
  });
  const sigNode = get.opt(h, "sig");
  if (sigNode.t !== "null") {
    withKey("`sig`", () => {
      need(sigNode.t === "map", "not a map");
      get.text(sigNode, "alg"); get.text(sigNode, "key_id");
      need(get.any(sigNode, "value").t === "bytes", "`value` is not a byte string");
    });
  }
  return { v, seq, hash, segs, tail, tailHashes, parent, meta, sig: sigNode.t === "null" ? undefined : sigNode, node: h };
}

// "Signed heads": the payload is the deterministic encoding of the ten-key map (eleven with a
// non-empty `append_keys`), whose `log`
// is the identity of the log this reader reads (BUCKET/PREFIX unless named), never a value
// taken from the head.
function verifySig(head, trusted, logId) {
  const sig = head.sig;
  need(sig !== undefined, "head is unsigned (no `sig`) but trusted keys are configured");
  need(sig.t === "map", "`sig` is not a map");
  const alg = get.text(sig, "alg"), keyId = get.text(sig, "key_id"), value = get.any(sig, "value");
  need(value.t === "bytes", "`sig.value` is not a byte string");
  const key = trusted.get(keyId);
  need(key, `\`sig.key_id\` ${JSON.stringify(keyId)} names no trusted key`);
  need(alg === key.alg, `\`sig.alg\` ${JSON.stringify(alg)} is not the scheme of key ${keyId}`);
  const h = head.node;
  const fields = {
    purpose: N.text("s3log/head"), v: get.any(h, "v"), log: N.text(logId), session: get.any(h, "session"),
    seq: get.any(h, "seq"), hash: get.opt(h, "hash"), parent: get.opt(h, "parent"),
    meta_digest: N.bytes(sha256(encode(head.meta))), alg: N.text(alg), key_id: N.text(keyId),
  };
  // A non-empty `append_keys` is signed too, as the digest of its deterministic encoding.
  const keys = get.opt(h, "append_keys");
  if (keys.t === "array" && keys.v.length > 0) fields.append_keys_digest = N.bytes(sha256(encode(keys)));
  const payload = encode(N.map(fields));
  need(value.v.length === 64 && cryptoVerify(null, payload, key.key, value.v), "`sig` is not a valid signature of the head");
}

export function loadTrusted(pemFile) {
  const key = createPublicKey(readFileSync(pemFile));
  if (key.asymmetricKeyType !== "ed25519") throw new Error(`${pemFile}: not an Ed25519 public key`);
  const raw = Buffer.from(key.export({ format: "jwk" }).x, "base64url");
  const keyId = "ed25519:" + hex(sha256(raw).subarray(0, 16));
  return new Map([[keyId, { alg: "Ed25519", key }]]);
}

// ---------------------------------------------------------------------------------------
// Reading and verifying a session.

// Reads one object (the file at its key); a missing one is corrupt, naming the key.
function readObject(root, key, kind) {
  const path = join(root, ...key.split("/"));
  if (!existsSync(path)) throw new Corrupt(`${key}: ${kind} is missing`);
  return readFileSync(path);
}

// Runs fn, prefixing any Corrupt message with `key` (an object key or a field name).
function withKey(key, fn) {
  try { return fn(); } catch (e) {
    if (e instanceof Expired) throw e; // says its key already
    if (e instanceof Corrupt) throw new Corrupt(`${key}: ${e.message}`);
    throw e;
  }
}

export function readSession(root, prefix, sid, trusted, logId) {
  const headKey = `${prefix}/sessions/${sid}/head`;
  if (!validSid(sid)) throw new Corrupt(`${headKey}: ${JSON.stringify(sid)} is not a session id`);
  const headBuf = readObject(root, headKey, "head");
  const head = withKey(headKey, () => {
    const node = decodeOne(headBuf, "head", true);
    const expired = node.t === "map" ? field(node, "expired") : undefined;
    const tombstone = expired !== undefined && expired.t !== "null"; // null reads as absent
    if (tombstone) {
      withKey("`expired`", () => {
        need(expired.t === "map", "not a map or null");
        get.uint(expired, "at"); get.int(expired, "seq"); get.hashOrNull(expired, "hash"); get.uint(expired, "idle_for_ms");
      });
    }
    const h = parseHead(node, sid, prefix, tombstone);
    if (trusted) verifySig(h, trusted, logId);
    if (tombstone && trusted) {
      // "Signed heads": `expired` is outside the payload, so it counts only where the
      // signed `seq` and `hash` are the tombstone's of the chain it names.
      const gone = get.hashOrNull(expired, "hash");
      const mark = sha256(Buffer.concat([Buffer.from("s3log.expired\0"), Buffer.from(sid, "utf8"), Buffer.from([0]),
        gone ?? Buffer.alloc(0)]));
      need(h.seq === get.int(expired, "seq") && h.hash !== null && Buffer.compare(Buffer.from(h.hash), mark) === 0,
        "`expired` does not match the signed `seq` and `hash` (not this chain's tombstone)");
    }
    if (tombstone) {
      // A tombstone: checked as any head, its tail's records included, but no chain is
      // read or linked (its `seq` and `hash` name no entry).
      if (h.v === 1) h.tail.forEach((m, i) => withKey(`tail entry ${i}`, () => entryFields(m, true)));
      else v2Tail(h.tail, h.tailHashes);
      throw new Expired(`${headKey}: the session expired`);
    }
    return h;
  });

  // The chain: the segments' entries in manifest order, then the tail.
  const chain = [];
  for (const seg of head.segs) {
    const buf = readObject(root, seg.key, "segment (listed in the head)");
    chain.push(...withKey(seg.key, () => {
      const s = decodeOne(buf, "segment", true);
      need(s.t === "map", "segment is not a map");
      const vn = get.any(s, "v");
      need(vn.t === "int" && (vn.v === 1n || vn.v === 2n), "unknown format version `v`");
      need(get.text(s, "session") === sid, "`session` is not the session of the key");
      let entries;
      if (vn.v === 1n) {
        const list = get.array(s, "entries");
        need(list.length >= 1, "`entries` is empty");
        entries = list.map((m) => v1Entry(m, buf));
      } else {
        entries = v2Segment(s);
      }
      for (let i = 1; i < entries.length; i++) {
        need(entries[i].seq === entries[i - 1].seq + 1n, `seq ${entries[i].seq}: entries are not consecutive`);
        const prev = entries[i].prev;
        need(prev !== null && prev.equals(entries[i - 1].hash), `seq ${entries[i].seq}: \`prev\` is not the hash of the entry before`);
      }
      need(entries[0].seq === seg.firstSeq, `seq ${entries[0].seq}: first seq is not the key's ${seg.firstSeq}`);
      const last = entries[entries.length - 1];
      need(hex(last.hash) === seg.lastHash, `seq ${last.seq}: hash of the last entry is not the key's`);
      return entries.map((e) => ({ ...e, from: seg.key }));
    }));
  }
  chain.push(...withKey(headKey, () => {
    const tail = head.v === 1 ? head.tail.map((m, i) => withKey(`tail entry ${i}`, () => v1Entry(m, headBuf))) : v2Tail(head.tail, head.tailHashes);
    return tail.map((e) => ({ ...e, from: headKey }));
  }));

  // Chain links, reported against the object that holds the offending entry.
  chain.forEach((e, i) => withKey(e.from, () => {
    need(e.seq === BigInt(i), `seq ${e.seq}: expected seq ${i} (a gap or overlap in the chain)`);
    const prev = i === 0 ? null : chain[i - 1].hash;
    need(prev === null ? e.prev === null : e.prev !== null && e.prev.equals(prev),
      `seq ${e.seq}: \`prev\` is not the hash of entry ${i - 1}`);
  }));
  withKey(headKey, () => {
    const last = chain[chain.length - 1];
    need(head.seq === (last ? last.seq : -1n), `\`seq\` ${head.seq} does not name the last entry (seq ${last ? last.seq : -1})`);
    need(last ? head.hash !== null && head.hash.equals(last.hash) : head.hash === null,
      `\`hash\` is not the hash of the last entry${last ? ` (seq ${last.seq})` : ""}`);
    // Forks: entry 0 is s3log.fork exactly when `parent` is set, and carries the same parent.
    const first = chain[0];
    if (head.parent) {
      need(first && first.kind === "s3log.fork", "`parent` is set but entry 0 is not `s3log.fork`");
      const dp = first.data.t === "map" ? field(first.data, "parent") : undefined;
      // The same four values (checked as the head's are); `seed` may be anything.
      const fp = dp && withKey("seq 0: the fork entry's parent", () => checkParent(dp));
      const same = (a, b) => (a === null ? b === null : b !== null && a.equals(b));
      need(fp && fp.session === head.parent.session && fp.seq === head.parent.seq && same(fp.hash, head.parent.hash)
        && fp.reason === head.parent.reason, "seq 0: the fork entry's parent is not the head's `parent`");
    } else {
      need(!first || first.kind !== "s3log.fork", "seq 0: `s3log.fork` entry but the head has no `parent`");
    }
  });

  const p = head.parent;
  return {
    ok: true,
    parent: p && { session: p.session, seq: p.seq, hash: p.hash && hex(p.hash), reason: p.reason },
    entries: chain.map((e) => ({
      seq: e.seq, kind: e.kind, ts: e.ts, hash: hex(e.hash), prev: e.prev && hex(e.prev),
      data_cbor: hex(e.dataBytes), data: rep(e.data),
    })),
  };
}

// ---------------------------------------------------------------------------------------
// Command line.

function usage(msg) {
  process.stderr.write(`${msg}\nusage: node reader.mjs ROOT [--prefix P] [--trusted-ed25519 PEMFILE [--bucket B | --log-id ID]] [--session SID ...]\n`);
  process.exit(2);
}

function main(argv) {
  let root = null, prefix = "s3log", pem = null, bucket = null, logId = null;
  const sids = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--prefix" || a === "--trusted-ed25519" || a === "--bucket" || a === "--log-id") {
      if (i + 1 >= argv.length) usage(`${a} needs a value`);
      const value = argv[++i];
      if (a === "--prefix") prefix = value; else if (a === "--bucket") bucket = value;
      else if (a === "--log-id") logId = value; else pem = value;
    } else if (a === "--session") {
      if (i + 1 >= argv.length || argv[i + 1].startsWith("--")) usage("--session needs at least one id");
      while (i + 1 < argv.length && !argv[i + 1].startsWith("--")) sids.push(argv[++i]);
    } else if (a.startsWith("--")) usage(`unknown option ${a}`);
    else if (root === null) root = a;
    else usage(`unexpected argument ${a}`);
  }
  if (root === null) usage("ROOT is required");
  if (!existsSync(root)) usage(`ROOT ${root} does not exist`);
  if (!prefix || prefix.startsWith("/") || prefix.endsWith("/")) usage("the prefix has no leading or trailing slash");
  let trusted = null;
  if (pem !== null) {
    try { trusted = loadTrusted(pem); } catch (e) { usage(`--trusted-ed25519: ${e.message}`); }
    // "Signed heads": a signature is checked as one of a named log; a dump does not say
    // which bucket it came from, so the caller does.
    if ((bucket === null) === (logId === null)) usage("--trusted-ed25519 needs one of --bucket or --log-id");
    if (bucket !== null) logId = `${bucket}/${prefix}`;
    if (!logId) usage("the log id is not empty");
  }
  if (!sids.length) {
    const dir = join(root, ...prefix.split("/"), "sessions");
    const found = existsSync(dir) ? readdirSync(dir, { withFileTypes: true }) : []; // no sessions yet: {}
    for (const d of found.sort((a, b) => (a.name < b.name ? -1 : 1))) {
      if (d.isDirectory() && d.name !== "_probe" && existsSync(join(dir, d.name, "head"))) sids.push(d.name);
    }
  }
  const out = []; // [sid, result] pairs: a JS object would reorder integer-like ids
  for (const sid of sids) {
    try {
      out.push([sid, readSession(root, prefix, sid, trusted, logId)]);
    } catch (e) {
      if (!(e instanceof Corrupt)) throw e;
      out.push([sid, e instanceof Expired ? { ok: false, expired: true, error: e.message } : { ok: false, error: e.message }]);
    }
  }
  process.stdout.write(toJSON(new Ordered(out)) + "\n");
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) main(process.argv.slice(2));
