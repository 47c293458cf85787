"""`vitc predict`: image decoding, timm's eval preprocessing, top-k output, and bad images.

Reference preprocessing (written here from timm/torchvision's documented eval transform, not from the C code):
resize the shorter side to floor(S / crop_pct) (longer side int(size * long / short)) with PIL's bicubic (PIL 9.4's
Image.resize, what timm runs; torch's antialiased bicubic differs from it by up to 18/255 when enlarging);
CenterCrop(S): zero padding when S is larger, offset int(round((side - S) / 2)); x/255; (x - mean) / std.
`vitc predict --output` writes the preprocessed `input` and the `logits`; checked:
  - exact size, no resize (fmnist 28×28 grayscale PNG, crop_pct 1): input equal to (x/255 - mean)/std (1e-6)
  - resizes (RGB noise PNG / PPM shrunk and enlarged, DeiT-T at 224 and 64 px): every pixel equal to PIL's
    (within float rounding of the normalisation, 1e-5 in pixel units); a one-pixel shift of the crop or swapped
    axes would give ~0.3 on noise
  - crop_pct 1.13 (Refined-ViT-L's, via --crop-pct): the padded frame is exactly the normalised 0 pixel
  - a FLatten model (FLatten-PVT-T at 64 px): both sides resized to floor(64 / 0.875), the aspect not kept, as its
    data/build.py's Resize((s, s)), then the centre crop: every pixel equal to PIL's
  - logits equal `vitc forward` on the same input; the JSON top-k equals softmax(logits)'s top-k (1e-5)
  - Fashion-MNIST models name their classes
  - JPEG (RGB, grayscale, CMYK, and with bytes between markers) decoded exactly as PIL decodes it
  - GIF (PIL's writer: 256 colours with a full code table, interlaced, 2 colours; a first image inside a larger
    canvas, with a transparent colour, a local palette) decoded exactly as PIL decodes it
  - 16-bit PNG (gray, gray with tRNS, RGB, RGBA, gray+alpha), PGM/PPM of maxvals 1 to 65535 and 16-bit BMP (5-5-5,
    5-6-5) decoded exactly as PIL's convert('L') and convert('RGB') give them (edge_images)
Bad images (each must exit 1 with a message naming the file, no crash, and the good image of the same call must
still be predicted): missing file, empty file, random bytes, truncated PNG, PNG headers claiming 100000×100000
(stb refuses it) and 17000×10 pixels (over vitc's 16384-pixel side limit, refused before decoding), a JPEG whose
scan data was cut in the middle, a GIF whose LZW data ends before its last pixel.
Run: /usr/bin/python3 tests/reference/test_predict.py
"""
import io
import json
import math
import struct
import zlib

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

import st
from common import Report, have_vitc, scale_err, tmpdir, vitc, vitc_ok

IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
FMNIST = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
CRASH = ["sanitizer", "runtime error:", "segmentation fault", "core dumped"]


def png_bytes(pix):
    """PNG file bytes of a uint8 (H, W) or (H, W, C) array, C in 1, 3, 4 (filter 0, one IDAT)."""
    pix = np.ascontiguousarray(pix, dtype=np.uint8)
    h, w = pix.shape[:2]
    c = 1 if pix.ndim == 2 else pix.shape[2]
    ctype = {1: 0, 3: 2, 4: 6}[c]
    raw = b"".join(b"\x00" + pix[y].tobytes() for y in range(h))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, ctype, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def ppm_bytes(pix):
    h, w = pix.shape[:2]
    return f"P6\n{w} {h}\n255\n".encode() + np.ascontiguousarray(pix, dtype=np.uint8).tobytes()


def edge_images(rng, w=28, h=28):
    """Files where vitc's decoders had differed from PIL 9.4's convert(): 16-bit gray PNG (PIL's mode I, clipped at
    255; also with a tRNS colour), 16-bit RGB, RGBA and gray+alpha PNG (the high byte), binary PGM/PPM of maxvals
    other than 255 (scaled with Python's round half to even; a P5 of maxval > 255 is mode I, scaled to 65535 and
    clipped), and 16-bit BMPs (5-5-5 and 5-6-5 fields widened as v * 255 // (2^k - 1)). Name -> file bytes."""
    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    def png16(ctype, chans, extra=b""):
        v = rng.integers(0, 65536, (h, w * chans))
        v[: h // 2] = rng.integers(0, 600, (h // 2, w * chans))   # many values near 255
        raw = b"".join(b"\x00" + v[y].astype(">u2").tobytes() for y in range(h))
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, ctype, 0, 0, 0)) + extra
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))

    def pnm(magic, chans, maxval):
        s = rng.integers(0, min(maxval + 2, 256 if maxval < 256 else 65536), h * w * chans)   # a few above maxval
        s[: min(maxval + 1, s.size)] = np.arange(min(maxval + 1, s.size))
        return b"%s\n%d %d\n%d\n" % (magic, w, h, maxval) + s.astype(">u2" if maxval > 255 else "u1").tobytes()

    def bmp16(masks, hsz=40, top_down=False):
        v = rng.integers(0, 65536, h * w)
        row = (w * 2 + 3) // 4 * 4
        order = range(h) if top_down else range(h - 1, -1, -1)
        data = b"".join(v[y * w:(y + 1) * w].astype("<u2").tobytes() + bytes(row - 2 * w) for y in order)
        info = struct.pack("<IiiHHIIiiII", hsz, w, -h if top_down else h, 1, 16, 3 if masks else 0, len(data), 2835,
                           2835, 0, 0)
        if hsz == 40:
            info += struct.pack("<3I", *masks) if masks else b""
        else:
            info += struct.pack("<4I", *(masks or (0, 0, 0)), 0) + bytes(hsz - 56)
        off = 14 + len(info)
        return b"BM" + struct.pack("<IHHI", off + len(data), 0, 0, off) + info + data

    files = {"g16.png": png16(0, 1), "g16trns.png": png16(0, 1, chunk(b"tRNS", struct.pack(">H", 7))),
             "rgb16.png": png16(2, 3), "rgba16.png": png16(6, 4), "la16.png": png16(4, 2)}
    for m in (1, 3, 10, 100, 254, 256, 1000, 65534, 65535):
        files[f"m{m}.pgm"] = pnm(b"P5", 1, m)
        files[f"m{m}.ppm"] = pnm(b"P6", 3, m)
    files["b555.bmp"] = bmp16(None)
    files["b555bf.bmp"] = bmp16((0x7C00, 0x3E0, 0x1F))
    files["b565.bmp"] = bmp16((0xF800, 0x7E0, 0x1F))
    files["b565v4td.bmp"] = bmp16((0xF800, 0x7E0, 0x1F), hsz=108, top_down=True)
    return files


def check_edge_decoders(rep, tmp, rng):
    """Every pixel of each edge_images file as vitc decodes it (the exact 28×28 path of vit_fmnist_tiny, 1 channel
    and 3) equal to PIL's convert('L') and convert('RGB')."""
    files = edge_images(rng)
    for fn, data in files.items():
        (tmp / fn).write_bytes(data)
    paths = [tmp / fn for fn in files]
    for chans, mode in ((1, "L"), (3, "RGB")):
        w = tmp / f"fm_c{chans}.safetensors"
        if vitc_ok(rep, f"init vit_fmnist_tiny --in-chans {chans}", "init", "vit_fmnist_tiny", "-o", w,
                   "--in-chans", chans) is None:
            continue
        res, _ = predict(rep, f"predict the edge images ({mode})", "vit_fmnist_tiny", w, paths,
                         tmp / f"edge{chans}.safetensors", "--in-chans", chans)
        if res is None:
            continue
        for i, fn in enumerate(files):
            got = np.rint((res["input"][i].astype(np.float64) * 0.3530 + 0.2860) * 255).astype(int)
            ref = np.asarray(Image.open(tmp / fn).convert(mode)).reshape(28, 28, chans).transpose(2, 0, 1)
            bad = int((got != ref).sum())
            rep.check(f"{fn} decoded as PIL's convert('{mode}')", bad == 0,
                      f"{bad} values differ, max {np.abs(got - ref).max()}; PIL mode {Image.open(tmp / fn).mode}")


def reference(pix, size, crop_pct, mean, std, squash=False, resample=Image.BICUBIC):
    """timm eval transform of a uint8 (H, W, C) array -> (C, size, size) float64; squash: the Swin code base's
    Resize((s, s)) (FLatten's), both sides to s. size (H, W) with H != W: timm 0.4.12's tuple size,
    Resize((int(H / crop_pct), int(W / crop_pct))) then CenterCrop((H, W)), the aspect not kept."""
    h, w, c = pix.shape
    sh, sw = size if isinstance(size, tuple) else (size, size)
    scale = math.floor(sh / crop_pct)
    if sh != sw:
        nh, nw = scale, math.floor(sw / crop_pct)
    elif squash:
        nw = nh = scale
    elif w <= h:
        nw, nh = scale, int(scale * h / w)
    else:
        nh, nw = scale, int(scale * w / h)
    if (nh, nw) != (h, w):
        img = Image.fromarray(pix[:, :, 0] if c == 1 else pix)
        pix = np.asarray(img.resize((nw, nh), resample)).reshape(nh, nw, c)
    t = torch.from_numpy(pix.astype(np.float64)).permute(2, 0, 1) / 255.0
    if sh > nh or sw > nw:   # torchvision pads (left/top = diff // 2) before cropping
        pl, pt = max(sw - nw, 0) // 2, max(sh - nh, 0) // 2
        pr, pb = max(sw - nw, 0) - pl, max(sh - nh, 0) - pt
        t = F.pad(t, (pl, pr, pt, pb))
        nh, nw = t.shape[1:]
    top, left = int(round((nh - sh) / 2.0)), int(round((nw - sw) / 2.0))
    t = t[:, top:top + sh, left:left + sw]
    m = torch.tensor(mean[:c], dtype=torch.float64)[:, None, None]
    s = torch.tensor(std[:c], dtype=torch.float64)[:, None, None]
    return ((t - m) / s).numpy()


def decoded_as_pil(rep, kind, model, w, tmp, files):
    """files (name -> bytes) written to tmp and predicted by model@64 (weights w) in one call: each image's input
    equal to the eval transform of PIL's decoding of it (PIL's decoder is the reference)."""
    for fn, data in files.items():
        (tmp / fn).write_bytes(data)
    res, _ = predict(rep, f"predict {model}@64 ({kind})", model, w, [tmp / fn for fn in files],
                     tmp / f"{kind}.safetensors", "--img-size", 64)
    if res is not None:
        for i, fn in enumerate(files):
            ref = reference(np.asarray(Image.open(tmp / fn).convert("RGB")), 64, 0.875, *IMAGENET)
            check_input(rep, f"preprocess {fn} (decoded as PIL does)", res["input"][i], ref, std=IMAGENET[1])


def predict(rep, name, model, w, images, out, *extra):
    p = vitc_ok(rep, name, "predict", model, "--weights", w, "--json", "--output", out, *extra, *images)
    if p is None:
        return None, None
    lines = [json.loads(l) for l in p.stdout.splitlines() if l.strip()]
    return st.load(out), lines


def check_topk(rep, name, lines, logits, k):
    ok, why = len(lines) == logits.shape[0], f"{len(lines)} JSON lines for {logits.shape[0]} images"
    for line, row in zip(lines, logits):
        pr = torch.softmax(torch.from_numpy(row.astype(np.float64)), 0).numpy()
        order = np.argsort(-pr, kind="stable")[:k]
        got = [(t["class"], t["prob"]) for t in line.get("top", [])]
        if [g[0] for g in got] != list(order) or max(abs(g[1] - pr[i]) for g, i in zip(got, order)) > 1e-5:
            ok, why = False, f"top-{k} {got} vs reference {[(int(i), round(float(pr[i]), 6)) for i in order]}"
    rep.check(name, ok, why if not ok else f"{len(lines)} images")


def check_input(rep, name, got, ref, border=0, tol_max=1e-5, tol_mean=1e-6, std=None):
    """Compare preprocessed inputs in pixel units (undo the std scaling)."""
    s = np.asarray(std, np.float64)[:, None, None]
    d = np.abs(got.astype(np.float64) - ref) * s
    inner = d[:, border:-border, border:-border] if border else d
    ok = got.shape == ref.shape and inner.max() <= tol_max and d.mean() <= tol_mean
    rep.check(name, ok, f"max {inner.max() * 255:.2f}/255 inside, mean {d.mean() * 255:.3f}/255, shape {got.shape}")


def expect_bad(rep, name, model, w, bad, good, words):
    p = vitc("predict", model, "--weights", w, "--json", bad, good)
    err = (p.stderr or "").lower()
    good_done = any(json.loads(l).get("image") == str(good) and "top" in json.loads(l)
                    for l in p.stdout.splitlines() if l.strip().startswith("{"))
    ok = (p.returncode == 1 and str(bad).lower() in err and any(x in err for x in words)
          and not any(c in err for c in CRASH) and good_done)
    rep.check(name, ok, f"rc {p.returncode}, good image predicted {good_done}, stderr {p.stderr.strip()[-200:]!r}")


def main():
    rep = Report()
    if not have_vitc(rep):
        rep.finish()
    tmp = tmpdir()
    rng = np.random.default_rng(5)
    deit = "deit_tiny_patch16_224"

    # ImageNet-style model at its own size and at 64 px: noise images shrunk, enlarged, PNG and PPM
    for size in (224, 64):
        common = ["--img-size", size]
        w = tmp / f"deit{size}.safetensors"
        if vitc_ok(rep, f"init {deit}@{size}", "init", deit, "-o", w, *common) is None:
            continue
        imgs = {"wide.png": rng.integers(0, 256, (260, 300, 3)), "tall.ppm": rng.integers(0, 256, (301, 257, 3)),
                "small.png": rng.integers(0, 256, (40, 50, 3)), "rgba.png": rng.integers(0, 256, (230, 230, 4))}
        paths = []
        for fn, pix in imgs.items():
            (tmp / fn).write_bytes(png_bytes(pix) if fn.endswith(".png") else ppm_bytes(pix))
            paths.append(tmp / fn)
        res, lines = predict(rep, f"predict {deit}@{size}", deit, w, paths, tmp / "p.safetensors", *common,
                             "--topk", 7, "--batch-size", 3)
        if res is None:
            continue
        for i, (fn, pix) in enumerate(imgs.items()):
            ref = reference(pix[..., :3].astype(np.uint8), size, 0.875, *IMAGENET)
            check_input(rep, f"preprocess {fn}@{size}", res["input"][i], ref, std=IMAGENET[1])
        check_topk(rep, f"top-7 {deit}@{size}", lines, res["logits"], 7)
        x = tmp / "x.safetensors"
        st.save(x, {"input": res["input"]})
        if vitc_ok(rep, f"forward {deit}@{size}", "forward", deit, "--weights", w, "--input", x, "--output",
                   tmp / "y.safetensors", *common):
            # predict ran the four images as batches of 3 and 1, forward as one batch of 4: the GEMM kernels block
            # those row counts differently, so the logits agree to float rounding (7.9e-7 to 1.04e-6 seen on an AMD
            # EPYC Zen 3, 2026-11-30), where a wrong image order or preprocessing would differ at order 1
            e = scale_err(res["logits"], st.load(tmp / "y.safetensors")["logits"])
            rep.check(f"logits = forward {deit}@{size}", e <= 1e-5, f"{e:.2e}")

    # SimpleViT's eval transform is the MSF script's (torchvision's ClassificationPresetEval): bilinear, not bicubic
    sv = "simplevit_ti_msf_g2"
    w = tmp / "sv64.safetensors"
    if vitc_ok(rep, f"init {sv}@64", "init", sv, "-o", w, "--img-size", 64) is not None:
        pix = rng.integers(0, 256, (90, 70, 3))
        (tmp / "sv.png").write_bytes(png_bytes(pix))
        res, _ = predict(rep, f"predict {sv}@64", sv, w, [tmp / "sv.png"], tmp / "sv.safetensors", "--img-size", 64)
        if res is not None:
            ref = reference(pix.astype(np.uint8), 64, 0.875, *IMAGENET, resample=Image.BILINEAR)
            check_input(rep, f"preprocess sv.png@64 ({sv}: bilinear)", res["input"][0], ref, std=IMAGENET[1])

    # JPEG as PIL decodes it (PIL's own decoder is the reference): an RGB and a grayscale JPEG, a CMYK JPEG (Adobe's
    # inverted values, PIL's "CMYK;I" and its cmyk2rgb: vitc had refused it), and one with bytes between two markers
    # (libjpeg's "extraneous bytes" warning, which PIL ignores and vitc had refused): every pixel equal to PIL's. A
    # JPEG whose scan data was cut in the middle (libjpeg's "premature end of data segment") is refused below, where
    # PIL draws grey blocks.
    w = tmp / "deit64.safetensors"
    jpegs = {}
    for fn, mode in (("rgb.jpg", "RGB"), ("gray.jpg", "L"), ("cmyk.jpg", "CMYK")):
        pix = rng.integers(0, 256, (70, 90, 3)).astype(np.uint8)
        img = Image.fromarray(pix)
        buf = io.BytesIO()
        (img.convert(mode) if mode != "RGB" else img).save(buf, "JPEG", quality=92)
        jpegs[fn] = buf.getvalue()
    clean = jpegs["rgb.jpg"]
    sos = clean.index(b"\xff\xda")
    jpegs["extra.jpg"] = clean[:sos] + b"\x00\x07\x00" + clean[sos:]
    rep.check("the CMYK JPEG is CMYK to PIL", Image.open(io.BytesIO(jpegs["cmyk.jpg"])).mode == "CMYK",
              Image.open(io.BytesIO(jpegs["cmyk.jpg"])).mode)
    decoded_as_pil(rep, "JPEG", deit, w, tmp, jpegs)
    eoi = clean.rindex(b"\xff\xd9")
    scan = sos + 4 + int.from_bytes(clean[sos + 2:sos + 4], "big") - 2   # the entropy-coded data's first byte
    (tmp / "cutscan.jpg").write_bytes(clean[:scan + (eoi - scan) // 3] + clean[eoi:])
    expect_bad(rep, "bad image cutscan.jpg (scan data cut, EOI kept)", deit, w, tmp / "cutscan.jpg", tmp / "rgb.jpg",
               ["premature end of data segment"])

    # GIF as PIL decodes it: PIL's LZW writer over 256 colours (its code table filling up: 12-bit codes and clear
    # codes), interlaced, and over 2 colours (2-bit codes); a GIF whose LZW data ends before its last pixel (the end
    # code after the first sub-block, the blocks terminated) is refused, where stb_image left the rest black
    gifs = {}
    pal = Image.fromarray(rng.integers(0, 256, (70, 90)).astype(np.uint8), "P")
    pal.putpalette([int(v) for v in rng.integers(0, 256, 768)])
    two = Image.fromarray((rng.integers(0, 2, (70, 90)) * 255).astype(np.uint8), "L").convert("1")
    for fn, img, kw in (("p256.gif", pal, {}), ("p256i.gif", pal, {"interlace": True}), ("p2.gif", two, {})):
        buf = io.BytesIO()
        img.save(buf, "GIF", **kw)
        gifs[fn] = buf.getvalue()
    # ... and a first image smaller than the canvas, placed inside it (the canvas outside it: PIL fills it with
    # palette[0], or the transparent index's colour, of the image's own palette if it has one; stb_image painted the
    # background index's colour with red and blue swapped): a background index set, a transparent colour, and the
    # global palette moved into a local one
    def descriptor(g):                           # the offset of the first image descriptor's 0x2c
        at = 13 + (3 * (2 << (g[10] & 7)) if g[10] & 0x80 else 0)
        while g[at] == 0x21:                    # extensions: label, then sub-blocks to a zero-length one
            at += 2
            while g[at]:
                at += 1 + g[at]
            at += 1
        return at

    def on_canvas(g, local=False):
        g = bytearray(g)
        g[6:10] = struct.pack("<HH", 100, 84)   # the canvas
        g[11] = 200                             # its background index
        d = descriptor(g)
        g[d + 1:d + 5] = struct.pack("<HH", 5, 7)  # the image at (5, 7)
        if local:                               # the global table moved into the image's own
            size = 3 * (2 << (g[10] & 7))
            table, flags = g[13:13 + size], g[10]
            g[10] &= 0x7f
            g[d + 9] = 0x80 | (flags & 7)
            g = g[:13] + g[13 + size:d + 10] + table + g[d + 10:]
        return bytes(g)

    def four_local(g, index=None):
        """a 4-colour GIF (global table of 4) given a global table of 256 other colours and its own 4 as the
        image's local table; index: the transparent index written into its graphic control extension"""
        g = bytearray(g)
        size, d = 3 * (2 << (g[10] & 7)), descriptor(g)
        own, big = g[13:13 + size], bytes(int(v) for v in rng.integers(0, 256, 768))
        if index is not None:
            gce = bytes(g).index(b"\x21\xf9\x04")
            g[gce + 6] = index
        lflags = 0x80 | (g[10] & 7)
        g[10] = 0x80 | (g[10] & 0x70) | 7
        g[d + 9] = lflags
        return on_canvas(bytes(g[:13] + big + g[13 + size:d + 10] + own + g[d + 10:]))

    buf = io.BytesIO()
    pal.save(buf, "GIF", transparency=37)
    four = Image.fromarray(rng.integers(0, 4, (70, 90)).astype(np.uint8), "P")
    four.putpalette([int(v) for v in rng.integers(0, 256, 12)])
    fbuf = io.BytesIO()
    four.save(fbuf, "GIF", transparency=2)
    canvas = {"canvas.gif": on_canvas(gifs["p256.gif"]), "canvas_t.gif": on_canvas(buf.getvalue()),
              "canvas_l.gif": on_canvas(gifs["p256.gif"], local=True),
              "canvas_tl.gif": on_canvas(buf.getvalue(), local=True),
              "canvas_4l.gif": four_local(fbuf.getvalue(), 2), "canvas_4l37.gif": four_local(fbuf.getvalue(), 37)}
    decoded_as_pil(rep, "GIF", deit, w, tmp, {**gifs, **canvas})
    g = gifs["p256.gif"]
    at = descriptor(g)
    at += 10 + (3 * (2 << (g[at + 9] & 7)) if g[at + 9] & 0x80 else 0)   # descriptor, local table: the code size
    (tmp / "cutlzw.gif").write_bytes(g[:at + 2 + g[at + 1]] + b"\x00\x3b")
    expect_bad(rep, "bad image cutlzw.gif (LZW data ending early, its blocks terminated)", deit, w,
               tmp / "cutlzw.gif", tmp / "p256.gif", ["its data ends after"])
    cs = g[at]                                   # LZW data of a clear code and the end code alone: no pixel
    codes = (1 << cs) | (((1 << cs) + 1) << (cs + 1))
    data = codes.to_bytes((2 * (cs + 1) + 7) // 8, "little")
    (tmp / "nolzw.gif").write_bytes(g[:at + 1] + bytes([len(data)]) + data + b"\x00\x3b")
    expect_bad(rep, "bad image nolzw.gif (LZW data of no pixel)", deit, w, tmp / "nolzw.gif", tmp / "p256.gif",
               ["its data ends after 0 of its"])

    # FLatten's eval transform (its data/build.py, the Swin code base's): both sides to floor(S / 0.875), centre crop
    fl = "flatten_pvt_tiny"
    w = tmp / "fl.safetensors"
    if vitc_ok(rep, f"init {fl}@64", "init", fl, "-o", w, "--img-size", 64) is not None:
        imgs = {"flwide.png": rng.integers(0, 256, (90, 140, 3)), "fltall.png": rng.integers(0, 256, (150, 70, 3))}
        for fn, pix in imgs.items():
            (tmp / fn).write_bytes(png_bytes(pix))
        res, _ = predict(rep, f"predict {fl}@64", fl, w, [tmp / fn for fn in imgs], tmp / "fl.out.safetensors",
                         "--img-size", 64)
        if res is not None:
            for i, (fn, pix) in enumerate(imgs.items()):
                ref = reference(pix.astype(np.uint8), 64, 0.875, *IMAGENET, squash=True)
                check_input(rep, f"preprocess {fn} (FLatten: aspect not kept)", res["input"][i], ref,
                            std=IMAGENET[1])

    # a non-square model (GroupMixFormer at 32x64 and 64x32, its official code's rule): timm's eval transform of a
    # tuple size, both sides resized, then the centre crop; with crop_pct 1.2 the crop pads; the logits as `forward`
    # gives them on that input
    gm = "groupmixformer_test"
    for hw, crop in (((32, 64), 0.875), ((64, 32), 1.2)):
        tag = f"{gm}@{hw[0]}x{hw[1]} crop_pct {crop}"
        size = ["--img-size", f"{hw[0]}x{hw[1]}"]
        w = tmp / f"gm{hw[0]}x{hw[1]}.safetensors"
        if vitc_ok(rep, f"init {tag}", "init", gm, "-o", w, *size) is None:
            continue
        imgs = {"gmwide.png": rng.integers(0, 256, (50, 130, 3)), "gmtall.png": rng.integers(0, 256, (97, 41, 3))}
        for fn, pix in imgs.items():
            (tmp / fn).write_bytes(png_bytes(pix))
        res, lines = predict(rep, f"predict {tag}", gm, w, [tmp / fn for fn in imgs], tmp / "gm.out.safetensors",
                             "--crop-pct", crop)
        if res is None:
            continue
        rep.check(f"{tag}: input (2, 3, {hw[0]}, {hw[1]})", res["input"].shape == (2, 3) + hw, str(res["input"].shape))
        for i, (fn, pix) in enumerate(imgs.items()):
            ref = reference(pix.astype(np.uint8), hw, crop, *IMAGENET)
            check_input(rep, f"preprocess {fn} ({tag})", res["input"][i], ref, std=IMAGENET[1])
        x = tmp / "gx.safetensors"
        st.save(x, {"input": res["input"]})
        if vitc_ok(rep, f"forward {tag}", "forward", gm, "--weights", w, "--input", x, "--output",
                   tmp / "gy.safetensors"):
            e = scale_err(res["logits"], st.load(tmp / "gy.safetensors")["logits"])
            rep.check(f"logits = forward {tag}", e <= 1e-5, f"{e:.2e}")

    # crop_pct > 1 pads: the frame outside the resized image is the normalised black pixel
    w = tmp / "deit224.safetensors"
    pix = rng.integers(0, 256, (240, 240, 3))
    (tmp / "pad.png").write_bytes(png_bytes(pix))
    res, _ = predict(rep, "predict --crop-pct 1.13", deit, w, [tmp / "pad.png"], tmp / "q.safetensors",
                     "--crop-pct", 1.13)
    if res is not None:
        ref = reference(pix.astype(np.uint8), 224, 1.13, *IMAGENET)
        check_input(rep, "preprocess crop_pct 1.13", res["input"][0], ref, std=IMAGENET[1])
        black = (0 - np.array(IMAGENET[0])) / np.array(IMAGENET[1])
        frame = res["input"][0][:, :13, :]   # resize 198 -> 13-pixel frame at the top
        rep.check("padding is black", np.abs(frame - black[:, None, None]).max() < 1e-6,
                  f"max |frame - black| {np.abs(frame - black[:, None, None]).max():.2e}")

    # Fashion-MNIST model: grayscale 28×28 PNG goes through unresized; class names in the output
    fm = "vit_fmnist_tiny"
    w = tmp / "fm.safetensors"
    if vitc_ok(rep, f"init {fm}", "init", fm, "-o", w):
        pix = rng.integers(0, 256, (28, 28))
        (tmp / "fm.png").write_bytes(png_bytes(pix))
        res, lines = predict(rep, f"predict {fm}", fm, w, [tmp / "fm.png"], tmp / "f.safetensors")
        if res is not None:
            exact = ((pix / 255.0 - 0.2860) / 0.3530)[None]
            e = np.abs(res["input"][0] - exact).max()
            rep.check("preprocess 28×28 exact", e <= 1e-6, f"max err {e:.2e}")
            check_topk(rep, f"top-5 {fm}", lines, res["logits"], 5)
            names = [t.get("name") for t in lines[0]["top"]] if lines else []
            want = [FMNIST[t["class"]] for t in lines[0]["top"]] if lines else None
            rep.check("fashion-mnist class names", len(names) == 5 and names == want, f"{names} vs {want}")

        # bad images: each named, exit 1, the good one still predicted
        good = tmp / "fm.png"
        (tmp / "empty.png").write_bytes(b"")
        (tmp / "noise.jpg").write_bytes(rng.integers(0, 256, 4000).astype(np.uint8).tobytes())
        full = png_bytes(rng.integers(0, 256, (64, 64, 3)))
        (tmp / "trunc.png").write_bytes(full[:len(full) // 2])
        ihdr = struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0)
        huge = (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr
                + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr) & 0xFFFFFFFF))
        (tmp / "huge.png").write_bytes(huge)
        ihdr = struct.pack(">IIBBBBB", 17000, 10, 8, 2, 0, 0, 0)
        (tmp / "toowide.png").write_bytes(b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr
                                       + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr) & 0xFFFFFFFF))
        for fn, words in (("missing.png", ["no such file", "cannot open"]), ("empty.png", ["decode"]),
                          ("noise.jpg", ["decode"]), ("trunc.png", ["decode"]),
                          ("huge.png", ["decode"]), ("toowide.png", ["17000×10 pixels"])):
            expect_bad(rep, f"bad image {fn}", fm, w, tmp / fn, good, words)
        p = vitc("predict", fm, "--weights", w)
        rep.check("no image given", p.returncode not in (0, None) and "image" in p.stderr.lower(), p.stderr.strip())
    check_edge_decoders(rep, tmp, rng)
    rep.finish()


if __name__ == "__main__":
    main()
