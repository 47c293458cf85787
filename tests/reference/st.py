"""Hand-written safetensors reader/writer (numpy / torch), independent of vitc.

Format: 8-byte little-endian u64 N, then N bytes of JSON header (padded with spaces so N is a
multiple of 8), then the data buffer.  The header maps tensor names to
{"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data buffer) plus an
optional "__metadata__" str->str map.  Supported dtypes: F32, F16, BF16, F64, I64, I32.

`load` is strict (it is also used to sanity-check the malformed files): duplicate keys, unknown
dtypes, byte counts that do not match the shape, offsets that overlap, leave gaps or leave
trailing bytes, and headers running past the end of the file are all rejected.

Helpers for bad-input tests: `serialize` gives (header dict, data bytes) to mutate, `header_json`
writes a header from (key, value) pairs (duplicates allowed), `encode` assembles a file with an
optional forged header length.

Self-test: /usr/bin/python3 tests/reference/st.py
"""
import json
import struct

import numpy as np

NP = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "F64": np.dtype("<f8"),
      "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "BF16": np.dtype("<u2")}
FROM_NP = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.float64): "F64",
           np.dtype(np.int64): "I64", np.dtype(np.int32): "I32"}


class SafetensorsError(ValueError):
    pass


def f32_to_bf16_bits(a):
    """float32 array -> uint16 bfloat16 bits, round to nearest even."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_bits_to_f32(b):
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _to_numpy(t):
    """numpy array, torch tensor or Python number -> (numpy array, dtype string)."""
    try:
        import torch
        if isinstance(t, torch.Tensor):
            t = t.detach().cpu()
            if t.dtype == torch.bfloat16:
                return t.view(torch.int16).numpy().view(np.uint16), "BF16"
            t = t.numpy()
    except ImportError:
        pass
    a = np.asarray(t)
    if a.dtype not in FROM_NP:
        raise SafetensorsError(f"unsupported numpy dtype {a.dtype}")
    return a, FROM_NP[a.dtype]


def serialize(tensors, dtypes=None, metadata=None):
    """dict name -> array -> (header dict in insertion order, data bytes).

    dtypes: optional {name: "F16"|"BF16"|"F32"|...} to convert a float tensor on the way out."""
    header, chunks, off = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        a, dt = _to_numpy(t)
        want = (dtypes or {}).get(name, dt)
        if want == "BF16" and dt != "BF16":
            a = f32_to_bf16_bits(a.astype(np.float32))
        elif want != dt:
            a = a.astype(NP[want])
        raw = np.ascontiguousarray(a, dtype=NP[want]).tobytes()
        header[name] = {"dtype": want, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    return header, b"".join(chunks)


def header_json(items):
    """JSON object text from a list of (key, value) pairs; duplicate keys are kept."""
    return "{" + ",".join(json.dumps(k) + ":" + json.dumps(v, separators=(",", ":"))
                          for k, v in items) + "}"


def encode(header, data, header_len=None, pad=True):
    """Assemble a file. header: dict, str or bytes; header_len forges the length field."""
    if isinstance(header, dict):
        header = json.dumps(header, separators=(",", ":"))
    if isinstance(header, str):
        header = header.encode("utf-8")
    if pad:
        header += b" " * (-len(header) % 8)
    n = len(header) if header_len is None else header_len
    return struct.pack("<Q", n) + header + data


def save(path, tensors, dtypes=None, metadata=None):
    header, data = serialize(tensors, dtypes, metadata)
    write_bytes(path, encode(header, data))


def write_bytes(path, b):
    with open(path, "wb") as f:
        f.write(b)


def _no_dupes(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise SafetensorsError(f"duplicate key {k!r}")
        d[k] = v
    return d


def parse(buf):
    """bytes -> (header dict, data memoryview), with every structural check."""
    if len(buf) < 8:
        raise SafetensorsError("file shorter than 8 bytes")
    (n,) = struct.unpack("<Q", buf[:8])
    if n > len(buf) - 8:
        raise SafetensorsError(f"header length {n} runs past end of file ({len(buf)} bytes)")
    text = bytes(buf[8:8 + n])
    if not text.startswith(b"{"):
        raise SafetensorsError("header does not start with '{'")
    try:
        header = json.loads(text.decode("utf-8"), object_pairs_hook=_no_dupes)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"header is not JSON: {e}")
    data = memoryview(buf)[8 + n:]
    spans = []
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
            raise SafetensorsError(f"{name}: bad header entry")
        if e["dtype"] not in NP:
            raise SafetensorsError(f"{name}: unknown dtype {e['dtype']!r}")
        shape, (b, end) = e["shape"], e["data_offsets"]
        if any((not isinstance(s, int)) or s < 0 for s in shape):
            raise SafetensorsError(f"{name}: bad shape {shape}")
        nbytes = int(np.prod(shape, dtype=object)) * NP[e["dtype"]].itemsize
        if not (0 <= b <= end <= len(data)) or end - b != nbytes:
            raise SafetensorsError(f"{name}: data_offsets {[b, end]} invalid for shape {shape} "
                                   f"{e['dtype']} (data buffer {len(data)} bytes)")
        spans.append((b, end, name))
    pos = 0
    for b, end, name in sorted(spans):
        if b != pos:
            raise SafetensorsError(f"{name}: offsets {'overlap' if b < pos else 'leave a gap'}")
        pos = end
    if pos != len(data):
        raise SafetensorsError(f"{len(data) - pos} trailing bytes after the last tensor")
    return header, data


def load(path, bf16_as_f32=True):
    """path -> dict name -> numpy array (BF16 converted to float32 unless told otherwise)."""
    with open(path, "rb") as f:
        buf = f.read()
    header, data = parse(buf)
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        a = np.frombuffer(data[b:end], dtype=NP[e["dtype"]]).reshape(e["shape"]).copy()
        if e["dtype"] == "BF16" and bf16_as_f32:
            a = bf16_bits_to_f32(a)
        out[name] = a
    return out


def load_torch(path, dtype=None):
    import torch
    t = {k: torch.from_numpy(v) for k, v in load(path).items()}
    return {k: v.to(dtype) for k, v in t.items()} if dtype is not None else t


def _selftest():
    import os
    import tempfile
    rng = np.random.default_rng(0)
    ts = {"a": rng.standard_normal((3, 5)).astype(np.float32), "s": np.array(2.5, np.float32),
          "h": rng.standard_normal(7).astype(np.float16), "i": np.arange(4, dtype=np.int64),
          "j": np.arange(6, dtype=np.int32).reshape(2, 3), "e": np.zeros((0, 3), np.float32),
          "b": rng.standard_normal(9).astype(np.float32)}
    p = os.path.join(tempfile.mkdtemp(), "t.safetensors")
    save(p, ts, dtypes={"b": "BF16"}, metadata={"format": "pt"})
    with open(p, "rb") as f:
        assert struct.unpack("<Q", f.read(8))[0] % 8 == 0
    back = load(p)
    for k, v in ts.items():
        if k == "b":
            assert np.abs(back[k] - v).max() <= 2 ** -8 * np.abs(v).max(), k
        else:
            assert back[k].dtype == v.dtype and back[k].shape == v.shape and np.array_equal(back[k], v), k
    assert np.array_equal(bf16_bits_to_f32(f32_to_bf16_bits(np.float32([1.0, -2.5, 1 + 2 ** -9]))),
                          np.float32([1.0, -2.5, 1.0]))
    h, d = serialize(ts)
    bad = [encode(h, d)[:-3], encode(h, d, header_len=10 ** 9), encode("[1]", b""),
           encode('{"a":', b""), encode(header_json([("a", h["a"]), ("a", h["a"])]), d),
           encode(h, d + b"\0" * 8), encode({**h, "a": {**h["a"], "dtype": "F99"}}, d), b"\1\0"]
    for i, b in enumerate(bad):
        try:
            parse(b)
        except SafetensorsError:
            continue
        raise AssertionError(f"malformed case {i} accepted")
    print("PASS st.py self-test")


if __name__ == "__main__":
    _selftest()
