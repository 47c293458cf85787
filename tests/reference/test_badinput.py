"""Bad-input tests: vitc must reject malformed files and arguments cleanly.

Each bad case runs vitc (mostly `vitc forward vit_fmnist_tiny`, weights from `vitc init`) and
passes when: the exit status is > 0 (not 0, not killed by a signal, no timeout), stderr is
non-empty, has no sanitizer/crash report, and mentions one of the case's words (case-insensitive,
e.g. the offending tensor's name, 'header', 'unknown model').
Controls that must succeed: the unmodified files; the same weights stored as F16 and BF16 (logits
equal to the F32 run of the same rounded values, scale_err <= 1e-5); a header in another order
with __metadata__ (identical logits).  All successful outputs must be finite.
Run: /usr/bin/python3 tests/reference/test_badinput.py      (needs ./vitc or $VITC)
"""
import numpy as np

import st
from common import Report, have_vitc, scale_err, tmpdir, vitc, vitc_ok

FM, DEIT = "vit_fmnist_tiny", "deit_tiny_patch16_224"
OFFSETS = ["offset", "overlap", "gap", "range", "size", "bytes"]
CRASH = ["sanitizer", "runtime error:", "segmentation fault", "core dumped", "traceback"]


def expect_fail(rep, name, args, words, timeout=120):
    p = vitc(*args, timeout=timeout)
    err = (p.stderr or "").strip()
    low = err.lower()
    if p.returncode is None or p.returncode <= 0:
        why = "timed out" if p.returncode is None else ("exited 0" if p.returncode == 0 else f"killed by signal {-p.returncode}")
    elif not err:
        why = "empty stderr"
    elif any(c in low for c in CRASH):
        why = "crash report on stderr"
    elif not any(w.lower() in low for w in words):
        why = f"stderr mentions none of {words}"
    else:
        return rep.check(name, True)
    return rep.check(name, False, f"{why}; rc {p.returncode}; stderr: {err[-300:]!r}")


def run_forward(rep, name, model, w, x, out):
    """Control: must succeed with finite logits; returns them (or None)."""
    if vitc_ok(rep, name, "forward", model, "--weights", w, "--input", x, "--output", out, timeout=300) is None:
        return None
    y = st.load(out).get("logits")
    ok = y is not None and y.ndim == 2 and np.isfinite(y).all()
    rep.check(name, ok, "logits present, 2-D, finite" if ok else f"bad logits {None if y is None else (y.shape, y.dtype)}")
    return y if ok else None


def main():
    rep = Report()
    if not have_vitc(rep):
        rep.finish()
    tmp = tmpdir()
    base = tmp / "fm.safetensors"
    if vitc_ok(rep, f"init {FM}", "init", FM, "-o", base, "--seed", 0) is None:
        rep.finish()
    sd = st.load(base)
    C, P = sd["patch_embed.proj.weight"].shape[1:3]
    S = int(round((sd["pos_embed"].shape[1] - 1) ** 0.5)) * P
    K = sd["head.weight"].shape[0]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, C, S, S)).astype(np.float32)
    xin, out = tmp / "x.safetensors", tmp / "y.safetensors"
    st.save(xin, {"input": x, "labels": np.array([0, K - 1], np.int64)})

    # ---- controls
    y32 = run_forward(rep, "control: valid F32 weights", FM, base, xin, out)
    for dt in ("F16", "BF16"):
        rounded = tmp / f"r_{dt}.safetensors"
        half = tmp / f"w_{dt}.safetensors"
        st.save(half, sd, dtypes={k: dt for k in sd})
        st.save(rounded, st.load(half))          # the same rounded values as F32
        a = run_forward(rep, f"control: {dt} weights", FM, half, xin, out)
        b = run_forward(rep, f"control: {dt}-rounded F32 weights", FM, rounded, xin, out)
        if a is not None and b is not None:
            e = scale_err(a, b)
            rep.check(f"control: {dt} == F32 of same values", e <= 1e-5, f"scale err {e:.2e}")
    h, d = st.serialize(sd, metadata={"format": "pt"})
    names = list(sd)
    shuffled = {"__metadata__": h.pop("__metadata__"), **{k: h[k] for k in reversed(names)}}
    st.write_bytes(tmp / "w_meta.safetensors", st.encode(shuffled, d))
    ym = run_forward(rep, "control: __metadata__ + reordered header", FM, tmp / "w_meta.safetensors", xin, out)
    if ym is not None and y32 is not None:
        rep.check("control: reordered header gives identical logits", np.array_equal(ym, y32))
    vitc_ok(rep, "control: grad on valid input", "grad", FM, "--weights", base, "--input", xin, "--output", out)

    # ---- malformed weight files (header h / data d of the valid file, mutated)
    first, qkv, last = names[0], "blocks.0.attn.qkv.weight", names[-1]
    i = names.index(qkv)
    nxt = names[i + 1]
    full = st.encode(h, d)

    def ent(k, **kw):
        return {**h[k], **kw}

    def with_entry(k, **kw):
        return st.encode({**h, k: ent(k, **kw)}, d)

    def shifted(delta):  # every tensor after qkv moves by delta bytes
        return {k: (ent(k, data_offsets=[v["data_offsets"][0] + delta, v["data_offsets"][1] + delta])
                    if j > i else v) for j, (k, v) in enumerate(h.items())}

    qb, qe = h[qkv]["data_offsets"]
    hdr_text = st.encode(h, b"")[8:]
    ids = dict(sd, **{qkv: sd[qkv].astype(np.int64)})
    bad = {
        "empty file": (b"", ["header", "short", "truncat", "small", "empty", "size"]),
        "shorter than 8 bytes": (full[:5], ["header", "short", "truncat", "small", "size"]),
        "truncated data": (full[:len(full) - len(d) // 2], ["truncat", "short", "eof", "end of file"] + OFFSETS + names),
        "truncated header": (full[:8 + len(hdr_text) // 2], ["header", "truncat", "short", "eof"]),
        "header length > file": (st.encode(h, d, header_len=len(full)), ["header"]),
        "header length 2^63": (st.encode(h, d, header_len=2 ** 63), ["header"]),
        "header not JSON": (st.encode('{"cls_token": {"dtype": "F32", "shape": [1,', d), ["header", "json", "parse"]),
        "header not starting with {": (st.encode(b"[" + hdr_text[1:].rstrip() + b"]", d), ["header", "json", "object", "{"]),
        "header not UTF-8 / binary": (st.encode(b"{\xff\xfe\x00\x01}", d), ["header", "json", "parse", "utf"]),
        "entry not an object": (st.encode({**h, first: 5}, d), [first]),
        "entry missing data_offsets": (st.encode({**h, qkv: {"dtype": "F32", "shape": h[qkv]["shape"]}}, d), [qkv, "data_offsets"]),
        "duplicate key": (st.encode(st.header_json(list(h.items()) + [(qkv, h[qkv])]), d), ["duplicate", qkv]),
        "offsets overlap": (with_entry(nxt, data_offsets=[h[nxt]["data_offsets"][0] - 4, h[nxt]["data_offsets"][1] - 4]), [qkv, nxt] + OFFSETS),
        "offsets leave a gap": (st.encode(shifted(8), d[:qe] + b"\0" * 8 + d[qe:]), [qkv, nxt] + OFFSETS),
        "trailing data": (st.encode(h, d + b"\0" * 16), ["trailing", "extra"] + OFFSETS),
        "offsets past end of data": (with_entry(last, data_offsets=[h[last]["data_offsets"][0] + 8, h[last]["data_offsets"][1] + 8]), [last] + OFFSETS),
        "offsets end < begin": (with_entry(qkv, data_offsets=[qe, qb]), [qkv]),
        "offsets != shape bytes": (with_entry(qkv, shape=[h[qkv]["shape"][0], h[qkv]["shape"][1] + 1]), [qkv]),
        "unknown dtype": (with_entry(qkv, dtype="F99"), [qkv, "F99", "dtype"]),
        "dtype I32 for a weight": (with_entry(qkv, dtype="I32"), [qkv]),
        "dtype I64 for a weight": (st.encode(*st.serialize(ids)), [qkv]),
        "negative shape dim": (with_entry(qkv, shape=[-1, h[qkv]["shape"][1]]), [qkv, "shape"]),
        "shape overflowing 64 bits": (with_entry(qkv, shape=[2 ** 32, 2 ** 32, 16]), [qkv, "shape", "overflow"] + OFFSETS),
        "wrong shape (transposed qkv)": (with_entry(qkv, shape=h[qkv]["shape"][::-1]), [qkv]),
        "missing tensor": (st.encode(*st.serialize({k: v for k, v in sd.items() if k != "blocks.0.mlp.fc2.bias"})), ["blocks.0.mlp.fc2.bias"]),
        "extra tensor": (st.encode(*st.serialize(dict(sd, **{"bogus.extra_tensor": np.zeros(3, np.float32)}))), ["bogus.extra_tensor"]),
    }
    for case, (blob, words) in bad.items():
        w = tmp / "bad.safetensors"
        st.write_bytes(w, blob)
        try:                                  # our own strict reader must agree it is malformed
            st.parse(blob)
            ok = case in ("dtype I32 for a weight", "dtype I64 for a weight", "wrong shape (transposed qkv)",
                          "missing tensor", "extra tensor")
        except st.SafetensorsError:
            ok = True
        if not ok:
            rep.check(f"weights: {case}", False, "test bug: st.parse accepts this file")
            continue
        expect_fail(rep, f"weights: {case}", ["forward", FM, "--weights", w, "--input", xin, "--output", out], words)
    expect_fail(rep, "weights: file does not exist", ["forward", FM, "--weights", tmp / "nope.safetensors",
                "--input", xin, "--output", out], ["nope.safetensors", "no such", "open"])

    # ---- bad inputs
    shape_words = ["input", "shape", "size", "channel"]
    inputs = {
        "no `input` tensor": ({"x": x}, ["input"]),
        "wrong image size": ({"input": np.zeros((1, C, S + 4, S + 4), np.float32)}, shape_words),
        "wrong channels": ({"input": np.zeros((1, C + 2, S, S), np.float32)}, shape_words),
        "2-D input": ({"input": x.reshape(2, -1)}, shape_words + ["dim"]),
        "I64 input": ({"input": x.astype(np.int64)}, ["input", "dtype", "I64"]),
    }
    for case, (tensors, words) in inputs.items():
        st.save(tmp / "badx.safetensors", tensors)
        expect_fail(rep, f"input: {case}", ["forward", FM, "--weights", base, "--input", tmp / "badx.safetensors", "--output", out], words)
    labels = {
        "no `labels`": ({"input": x}, ["labels"]),
        "label = num_classes": ({"input": x, "labels": np.array([0, K], np.int64)}, ["label"]),
        "negative label": ({"input": x, "labels": np.array([-1, 0], np.int64)}, ["label"]),
        "labels wrong length": ({"input": x, "labels": np.zeros(3, np.int64)}, ["label"]),
    }
    for case, (tensors, words) in labels.items():
        st.save(tmp / "badx.safetensors", tensors)
        expect_fail(rep, f"grad: {case}", ["grad", FM, "--weights", base, "--input", tmp / "badx.safetensors", "--output", out], words)
    deit = tmp / "deit.safetensors"
    if vitc_ok(rep, f"init {DEIT}", "init", DEIT, "-o", deit, "--seed", 0):
        st.save(tmp / "badx.safetensors", {"input": np.zeros((1, 3, 32, 32), np.float32)})
        expect_fail(rep, "input: 1x3x32x32 to a 224 model", ["forward", DEIT, "--weights", deit, "--input",
                    tmp / "badx.safetensors", "--output", out], shape_words)
        expect_fail(rep, "weights: deit_tiny weights for vit_fmnist_tiny", ["forward", FM, "--weights", deit,
                    "--input", xin, "--output", out], ["shape", "missing", "blocks", "cls_token", "pos_embed", "patch_embed"])

    # ---- unknown model names
    for cmd in (["info", "vit_no_such_model", "--json"], ["init", "vit_no_such_model", "-o", tmp / "u.safetensors"],
                ["forward", "vit_no_such_model", "--weights", base, "--input", xin, "--output", out]):
        expect_fail(rep, f"unknown model ({cmd[0]})", cmd, ["unknown model", "vit_no_such_model"])
    rep.finish()


if __name__ == "__main__":
    main()
