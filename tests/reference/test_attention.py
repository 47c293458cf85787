"""Reference test of `vitc attention` (attention-map pictures) against the independent PyTorch reference models of
the other reference tests, each of whose attention modules keeps its maps in `.maps` ({view: (B, H, N, M)});
the *_ref.py modules do so only with their RECORD_MAPS set, as this test sets it.

For every block type in the ViT host on Fashion-MNIST-sized inputs (vit_fmnist_tiny; GMA: vit_fmnist_tiny_gap),
random weights, three image files (PNG, one RGB of another size: vitc preprocesses them, the reference runs on the
preprocessed `input` that --save-maps writes back), the maps vitc saves equal the reference's, max|a-b| /
max|b| <= 1e-5 (reference in float64):
  mhsa      vit_ref.Attention: softmax(q·kᵀ·s)
  hmhsa     test_hmhsa_cffn.HAttention: softmax([A_r, CHH(IHH(A_r))]) (computed heads, then hallucinated)
  refiner   test_refiner.TransformAttn: the softmax map and the refined one adapt_bn(DLA(·)); and Refined-ViT-S
            (refiner_vit_s at 32 px, test_refiner.RefinedViT): plain blocks' softmax, shared blocks' incoming
            (`.before`) and refined maps
  msf       test_msf.HostAttn: the Gaussian-kernel probabilities and softmax(q·kᵀ·s) of the same q, k
  flatten   test_flatten.FocusedLinearAttention: flatten_ref.implied(φ(q), φ(k)) and the same with ReLU on the raw
            q, k + positional encoding (plain linear attention)
  gma       gmf_ref.EfficientAtt: the implied token weights scale·q·softmax(k)ᵀ
Rollout (--rollout): equals Abnar & Zuidema's rollout written here (per block the head mean + I, rows renormalised,
R ← A·R) on the reference maps, <= 1e-5. The drawn rows (NAME.rows) equal the class token's row (mean query's
without one) of the reference maps. Swin (swin_fmnist_tiny, shifted windows): the per-window maps equal swin_ref's
and the drawn rows are each window's mean query put back where the window took its tokens (unpartition, roll
back). The PNG decodes (PIL) to the size attention.h documents, for all blocks
and heads, for --blocks 1,3 --heads mean and for --heads 0,2. Clear errors: an unknown block or head index, a
malformed list, rollout over per-window maps (Swin) or without probabilities (GMA), an unreadable or missing
image, no output (a model without maps: the `attention` unit suite, no registered model lacks attention).
CSwin (reduced CSwin-T, stripes 1 and 2): each branch's per-stripe maps equal cswin_ref's and the drawn rows are
each stripe's mean query put back in place.
Run: /usr/bin/python3 tests/reference/test_attention.py     (needs ./vitc or $VITC)
"""
import math
import shutil

import numpy as np
import torch
from PIL import Image

import cswin_ref
import gmf_ref
import st
import test_flatten
import test_hmhsa_cffn
import test_msf
import swin_ref
import test_refiner
import vit_ref
from common import Report, have_vitc, info, scale_err, tmpdir, vitc, vitc_ok

# the references record their attention maps (.maps) only when asked: this test compares them
vit_ref.RECORD_MAPS = swin_ref.RECORD_MAPS = cswin_ref.RECORD_MAPS = gmf_ref.RECORD_MAPS = True
torch.set_default_dtype(torch.float32)  # test_refiner sets float64 when imported; each reference is made double
TOL = 1e-5
MODEL = "vit_fmnist_tiny"


def write_images(tmp):
    """Three images: 28×28 grayscale shapes, a noisy one, and a 40×33 RGB one (resized and cropped by vitc)."""
    g = np.random.default_rng(0)
    a = np.zeros((28, 28), np.uint8)
    a[6:22, 9:19] = 200
    a[12:16, 3:25] = 120
    b = (g.random((28, 28)) * 255).astype(np.uint8)
    c = (g.random((33, 40, 3)) * 255).astype(np.uint8)
    paths = [tmp / "shapes.png", tmp / "noise.png", tmp / "rgb.png"]
    Image.fromarray(a).save(paths[0])
    Image.fromarray(b).save(paths[1])
    Image.fromarray(c).save(paths[2])
    return paths


def ref_maps(model):
    """{vitc map name: (B, H, N, M) numpy} from every module's .maps (name: module path [+ '.' + view])."""
    out = {}
    for name, mod in model.named_modules():
        for view, a in getattr(mod, "maps", {}).items():
            out[name + ("." + view if view else "")] = a.detach().numpy()
    return out


def rollout_ref(maps):
    """Abnar & Zuidema 2020: for each block in order, A = mean over heads + I, rows renormalised; R ← A·R."""
    B, _, N, _ = maps[0].shape
    R = np.broadcast_to(np.eye(N), (B, N, N)).copy()
    for a in maps:
        A = a.mean(1) + np.eye(N)
        A /= A.sum(-1, keepdims=True)
        R = A @ R
    return R


def rows_ref(a, lead):
    """The drawn rows (B, H, g, g) of maps a (B, H, N, N) on a g×g grid after `lead` tokens: the class token's row,
    or (no class token) the mean over the queries."""
    r = a[:, :, 0, lead:] if lead else a.mean(2)
    g = math.isqrt(r.shape[-1])
    return r.reshape(*r.shape[:2], g, g)


def png_size(S, cols, rows):
    """The grid's size as include/vitc/attention.h documents it (tile T = S·⌈128/S⌉), for titles it fits."""
    T = S * math.ceil(128 / S)
    return 4 + (1 + cols) * (T + 4), 4 + rows * (24 + T + 4)


def png_widened(size, S, cols, rows, title):
    """A grid too narrow for its title is widened to fit it (include/vitc/attention.h): stb_easy_font's characters
    are 3 to 7 pixels wide, plus 4 pixels each side; title is wider than the tiles even at 3 pixels a character."""
    w, h = png_size(S, cols, rows)
    return 8 + 3 * len(title) > w and size[1] == h and 8 + 3 * len(title) <= size[0] <= 8 + 7 * len(title)


def check_case(rep, tmp, tag, model, args, ref, sd, imgs, rollout=True, img=28):
    """Run vitc attention with the state dict sd and compare its saved maps (and rollout, PNG size) with ref."""
    w, maps, png = tmp / f"{tag}_w.safetensors", tmp / f"{tag}_maps.safetensors", tmp / f"{tag}.png"
    st.save(w, sd)
    extra = ["--rollout"] if rollout else []
    if vitc_ok(rep, f"{tag} attention", "attention", model, *args, "--weights", w, *imgs, "-o", png, "--save-maps",
               maps, *extra) is None:
        return
    got = st.load(maps)
    x = torch.from_numpy(got["input"]).double()
    ref = ref.double().eval()
    ref.load_state_dict({k: (v if v.dtype == torch.int64 else torch.as_tensor(v).double()) for k, v in sd.items()},
                        strict=True)
    with torch.no_grad():
        ref(x)
    want = ref_maps(ref)
    names = sorted(k for k in got if k not in ("input", "rollout") and not k.endswith(".rows"))
    rep.check(f"{tag} map names", names == sorted(want), f"vitc {names[:8]}, reference {sorted(want)[:8]}")
    worst, where = 0.0, ""
    for k in names:
        if k in want:
            if got[k].shape != want[k].shape:
                rep.check(f"{tag} {k} shape", False, f"{got[k].shape}, want {want[k].shape}")
                continue
            e = scale_err(got[k], want[k])
            if e > worst:
                worst, where = e, k
    rep.check(f"{tag} maps == reference", worst <= TOL, f"worst {worst:.2e} ({where}) over {len(names)} maps")
    lead = 0 if "gap" in model else 1
    e = max((scale_err(got[k + ".rows"], rows_ref(want[k], lead)) if k + ".rows" in got else float("inf"))
            for k in want)
    rep.check(f"{tag} drawn rows == reference", e <= TOL, f"class-token (or mean-query) rows: max err {e:.2e}")
    if rollout:
        plain = [want[k] for k in sorted(want, key=lambda s: int(s.split(".")[1])) if k.count(".") == 2]
        r = rollout_ref(plain)
        e = scale_err(got.get("rollout", np.zeros(1)), r) if got.get("rollout") is not None and \
            got["rollout"].shape == r.shape else float("inf")
        rep.check(f"{tag} rollout == reference", e <= TOL, f"max err {e:.2e}")
    H = max(a.shape[1] for a in want.values())
    rows = len(imgs) * (len(names) + (1 if rollout else 0))
    size = Image.open(png).size
    rep.check(f"{tag} PNG size", size == png_size(img, H, rows), f"{size}, want {png_size(img, H, rows)}")


def vit_cfg(rep):
    j = info(rep, MODEL) or {}
    return dict(patch_size=j.get("patch_size", 4), embed_dim=j.get("embed_dim", 64), depth=j.get("depth", 4),
                num_heads=j.get("num_heads", 4), img_size=j.get("img_size", 28), in_chans=j.get("in_chans", 1),
                num_classes=j.get("num_classes", 10), mlp_hidden=2 * j.get("embed_dim", 64))


def test_types(rep, tmp, imgs, cfg):
    D, H, g = cfg["embed_dim"], cfg["num_heads"], cfg["img_size"] // cfg["patch_size"]
    # mhsa: fan-in weights make the softmax peaked (a map that is not nearly uniform)
    check_case(rep, tmp, "mhsa", MODEL, [], vit_ref.ViT(cfg), vit_ref.random_state_dict(cfg, seed=1, std="fan_in"),
               imgs)
    m = vit_ref.ViT(cfg)
    for b in m.blocks:
        b.attn = test_hmhsa_cffn.HAttention(D, H, False, (g, g))
    check_case(rep, tmp, "hmhsa", MODEL, ["--attn", "hmhsa"], m, test_hmhsa_cffn.random_sd(m, 2), imgs)
    m = vit_ref.ViT(cfg)
    for b in m.blocks:
        b.attn = test_refiner.TransformAttn(D, H)
    # (no rollout: each block mixes its values with its refined map, which is no probability map; refused below)
    check_case(rep, tmp, "refiner", MODEL, ["--attn", "refiner"], m, test_refiner.randomise(m, 3), imgs,
               rollout=False)
    # Refined-ViT-S at 32 px (2×2 patches + class token): plain blocks' softmax maps, shared blocks' incoming and
    # refined maps (no rollout: the shared blocks have no probabilities)
    m = test_refiner.RefinedViT("refiner_vit_s", img=32, classes=10)
    check_case(rep, tmp, "refiner_vit_s", "refiner_vit_s", ["--img-size", 32, "--num-classes", 10], m,
               test_refiner.randomise(m, 9), imgs, rollout=False, img=32)
    m = test_msf.MSFViT(cfg, 1)
    check_case(rep, tmp, "msf", MODEL, ["--attn", "msf"], m, test_msf.random_state_dict(m, 4), imgs)
    check_case(rep, tmp, "flatten", MODEL, ["--attn", "flatten"], test_flatten.FLattenViT(cfg),
               test_flatten.random_state_dict(cfg, 5), imgs)
    m = gmf_ref.ViTGMA(28, 4, 80, 4, 160, 1, 10)
    check_case(rep, tmp, "gma", "vit_fmnist_tiny_gap", ["--attn", "gma"], m, gmf_ref.randomize(m, 6), imgs,
               rollout=False)


def run_windowed(rep, tmp, tag, name, args, ref, sd, imgs):
    """Loads sd into ref (float64, eval), runs `vitc attention name args` with the same weights on imgs saving the
    maps, then ref on the input vitc saved (its modules record their maps); vitc's saved maps, or None on failure."""
    ref.double().eval()
    ref.load_state_dict({k: (v if v.dtype == torch.int64 else torch.as_tensor(v).double()) for k, v in sd.items()},
                        strict=True)
    w, maps = tmp / f"{tag}_w.safetensors", tmp / f"{tag}_maps.safetensors"
    st.save(w, {k: torch.as_tensor(v) for k, v in sd.items()})
    if vitc_ok(rep, f"{tag} attention", "attention", name, *args, "--weights", w, *imgs, "--save-maps", maps) is None:
        return None
    got = st.load(maps)
    with torch.no_grad():
        ref(torch.from_numpy(got["input"]).double())
    return got


def test_swin_windows(rep, tmp, imgs):
    """swin_fmnist_tiny (14×14 tokens, windows of 7, shift 3 in odd blocks of stage 0; stage 1 one 7×7 window):
    the per-window maps (images, windows, heads, N, N) equal swin_ref's, and the drawn rows are each window's mean
    query put back where its tokens came from (the reference's unpartition and roll back)."""
    name = "swin_fmnist_tiny"
    swin_ref.MODELS[name] = dict(swin_ref._cfg("microsoft", 48, [2, 2], [3, 6], 7, 28, 0.0), patch=2, in_chans=1,
                                 num_classes=10, dims=[48, 96], attn="SS", focusing_factor=None, kernel_size=None)
    ref = swin_ref.build(name)
    png = tmp / "swin.png"
    got = run_windowed(rep, tmp, "swin", name, ["-o", png], ref, swin_ref.randomize(ref, 8), imgs)
    if got is None:
        return
    n, worst, rows_worst, where = len(imgs), 0.0, 0.0, ""
    for mname, mod in ref.named_modules():
        if not hasattr(mod, "maps") or not mname.endswith(".attn"):
            continue
        blk = ref.get_submodule(mname[: -len(".attn")])
        a = mod.maps[""]                                            # (n·nW, H, N, N)
        nW = a.shape[0] // n
        g = got.get(mname)
        want = a.numpy().reshape(n, nW, *a.shape[1:]) if nW > 1 else a.numpy()
        if g is None or g.shape != want.shape:
            rep.check(f"swin {mname} shape", False, f"{None if g is None else g.shape}, want {want.shape}")
            continue
        e = scale_err(g, want)
        if e > worst:
            worst, where = e, mname
        rows = a.mean(2).transpose(1, 2)                             # (n·nW, N, H): each window's mean query
        r = swin_ref.unpartition(rows, blk.w, n, blk.res, blk.res)    # (n, res, res, H)
        if blk.s:
            r = torch.roll(r, shifts=(blk.s, blk.s), dims=(1, 2))
        rows_worst = max(rows_worst, scale_err(got.get(mname + ".rows", np.zeros(1)), r.permute(0, 3, 1, 2).numpy()))
    rep.check("swin per-window maps == reference", worst <= TOL, f"worst {worst:.2e} ({where})")
    rep.check("swin stitched rows == reference", rows_worst <= TOL, f"max err {rows_worst:.2e}")
    size = Image.open(png).size
    rep.check("swin PNG size", size == png_size(28, 6, n * 4), f"{size}, want {png_size(28, 6, n * 4)}")


def test_cswin_stripes(rep, tmp, imgs):
    """CSwin-T reduced (64 px, dims 16..128, one block per stage, stripes 1, 2, 2, then the global last stage): each
    branch's per-stripe maps equal cswin_ref's, and the drawn rows are each stripe's mean query put back in place."""
    name, img = "cswin_tiny_224", 64
    args = ["--img-size", img, "--dims", "16,32,64,128", "--depths", "1,1,1,1", "--windows", "1,2,2,2",
            "--num-classes", 10]
    ref = cswin_ref.build(name, img_size=img, dims=[16, 32, 64, 128], depths=[1, 1, 1, 1], heads=[2, 4, 8, 16],
                          split_size=[1, 2, 2, 2], num_classes=10, in_chans=3)
    got = run_windowed(rep, tmp, "cswin", name, args, ref, cswin_ref.randomize(ref, 10), imgs)
    if got is None:
        return
    n, worst, rows_worst, where, count = len(imgs), 0.0, 0.0, "", 0
    for mname, mod in ref.named_modules():
        if not isinstance(mod, cswin_ref.StripeAttention):
            continue
        a, R = mod.maps[""], mod.res                                  # (n·nW, h, hs·ws, hs·ws)
        nW = a.shape[0] // n
        want = a.numpy().reshape(n, nW, *a.shape[1:]) if nW > 1 else a.numpy()
        g = got.get(mname)
        if g is None or g.shape != want.shape:
            rep.check(f"cswin {mname} shape", False, f"{None if g is None else g.shape}, want {want.shape}")
            continue
        count += 1
        e = scale_err(g, want)
        if e > worst:
            worst, where = e, mname
        rows = cswin_ref.from_windows(a.mean(2).transpose(1, 2), n, R, R, mod.hs, mod.ws)     # (n, R·R, h)
        rows = rows.transpose(1, 2).reshape(n, -1, R, R).numpy()
        rows_worst = max(rows_worst, scale_err(got.get(mname + ".rows", np.zeros(1)), rows))
    rep.check("cswin stripe maps == reference", worst <= TOL and count == 7,
              f"worst {worst:.2e} ({where}) over {count} branches (want 7: 2 per striped stage, 1 global)")
    rep.check("cswin stitched rows == reference", rows_worst <= TOL, f"max err {rows_worst:.2e}")


def test_swin_padded(rep, tmp, imgs):
    """Swin-T in torchvision's layout at 40 px (10×10 tokens padded to 14×14 for windows of 7, shift 3 in the second
    block; stage 2 5×5 padded to one 7×7 window): the per-window maps equal swin_ref's, and the drawn rows are each
    window's mean over its queries from the image (not the zero padding) put back where its tokens came from."""
    name, img = "swin_t", 40
    args = ["--img-size", img, "--dims", "24,48,96,192", "--depths", "2,1,1,1"]   # swin_t's heads, 3 to 24
    ref = swin_ref.build(name, img_size=img, dims=[24, 48, 96, 192], depths=[2, 1, 1, 1], heads=[3, 6, 12, 24])
    got = run_windowed(rep, tmp, "swin_t", name, args, ref, swin_ref.randomize(ref, 12), imgs)
    if got is None:
        return
    n, worst, rows_worst, where, count = len(imgs), 0.0, 0.0, "", 0
    for mname, mod in ref.named_modules():
        if not isinstance(mod, swin_ref.TVWindowAttention):
            continue
        a, wd = mod.maps[""], mod.w                                   # (n·nW, H, N, N)
        g, rows_got = got.get(mname), got.get(mname + ".rows")
        if g is None or rows_got is None:
            rep.check(f"swin_t {mname} exported", False, "no map or rows")
            continue
        R = rows_got.shape[-1]                                        # the stage's token grid (R × R)
        Hp = -(-R // wd) * wd
        s = 0 if wd >= Hp else mod.s
        want = a.numpy().reshape(n, a.shape[0] // n, *a.shape[1:])  # per window, one padded window too
        count += 1
        e = scale_err(g, want) if g.shape == want.shape else float("inf")
        if e > worst:
            worst, where = e, mname
        real = torch.zeros(n, Hp, Hp, 1, dtype=torch.float64)
        real[:, :R, :R] = 1.0
        real = torch.roll(real, shifts=(-s, -s), dims=(1, 2))
        mask = swin_ref.partition(real, wd).reshape(a.shape[0], 1, -1, 1)   # (n·nW, 1, N, 1): 1 for image queries
        rows = (a * mask).sum(2) / mask.sum(2).clamp(min=1)              # (n·nW, H, N keys)
        r = swin_ref.unpartition(rows.transpose(1, 2), wd, n, Hp, Hp)  # (n, Hp, Hp, H)
        r = torch.roll(r, shifts=(s, s), dims=(1, 2))[:, :R, :R]
        rows_worst = max(rows_worst, scale_err(rows_got, r.permute(0, 3, 1, 2).numpy()))
    rep.check("swin_t padded windows: maps == reference", worst <= TOL and count == 5,
              f"worst {worst:.2e} ({where}) over {count} blocks (want 5)")
    rep.check("swin_t padded windows: rows are the image queries' mean", rows_worst <= TOL,
              f"max err {rows_worst:.2e}")


def test_nextvit_pooled_keys(rep, tmp, imgs):
    """Next-ViT at 80 px (stage 2: 10×10 tokens, 6 keys each pooling 16 raster tokens, a tail of 4 that no key pools;
    stage 3: 5×5, 6 keys of 4): the drawn rows put each key's mean-query weight on the tokens it pools, in raster
    order, and 0 on the tail."""
    name, args = "nextvit_small", ["--img-size", 80, "--depths", "1,1,5,1"]
    w, maps = tmp / "nextvit_w.safetensors", tmp / "nextvit_maps.safetensors"
    if vitc_ok(rep, "init nextvit", "init", name, *args, "-o", w) is None:
        return
    if vitc_ok(rep, "nextvit attention", "attention", name, *args, "--weights", w, imgs[2], "--save-maps",
               maps) is None:
        return
    got = st.load(maps)
    worst, pooled = 0.0, 0
    for k in sorted(k for k in got if k.endswith("e_mhsa")):
        a, rows = got[k], got[k + ".rows"]                           # (1, H, N, n), (1, H, gh, gw)
        N, nk = a.shape[2], a.shape[3]
        r = N // nk if nk < N else 1
        pooled += r > 1
        want = np.zeros((a.shape[1], N))
        want[:, : nk * r] = np.repeat(a[0].mean(1), r, axis=1)       # key j on tokens [j·r, (j+1)·r)
        worst = max(worst, scale_err(rows[0].reshape(a.shape[1], -1), want))
    rep.check("nextvit rows spread pooled keys over their raster tokens", worst <= TOL and pooled == 2,
              f"max err {worst:.2e}, {pooled} pooled stages (want 2)")


def fails(rep, tag, want, *args):
    """vitc must exit non-zero with `want` (a lowercase fragment) in its message, and no traceback-like crash."""
    p = vitc(*args)
    msg = (p.stderr or "").strip()
    ok = p.returncode not in (0, None) and p.returncode < 128 and want in msg.lower()
    rep.check(f"error: {tag}", ok, f"exit {p.returncode}, stderr {msg[-300:]!r}")


def test_selection_and_errors(rep, tmp, imgs, cfg):
    w = tmp / "sel_w.safetensors"
    st.save(w, vit_ref.random_state_dict(cfg, seed=7, std="fan_in"))
    base = ["attention", MODEL, "--weights", w]
    png, maps = tmp / "sel.png", tmp / "sel.safetensors"
    if vitc_ok(rep, "--blocks 1,3 --heads mean", *base, *imgs[:2], "-o", png, "--blocks", "1,3", "--heads", "mean",
               "--save-maps", maps) is not None:
        size = Image.open(png).size
        rep.check("--blocks 1,3 --heads mean PNG size", size == png_size(28, 1, 2 * 2), f"{size}")
    long = tmp / ("an_image_whose_file_name_is_long_enough_to_need_a_wider_picture_" + "x" * 24 + ".png")
    shutil.copy(imgs[0], long)
    if vitc_ok(rep, "a long file name", *base, long, "-o", png, "--blocks", "1", "--heads", "mean") is not None:
        size, title = Image.open(png).size, f"{long.name}  blocks.1.attn: class token's row"
        rep.check("... the picture is widened to fit its title", png_widened(size, 28, 1, 1, title),
                  f"{size}, {png_size(28, 1, 1)} for the tiles, a title of {len(title)} characters")
        names = sorted(k for k in st.load(maps) if k != "input" and not k.endswith(".rows"))
        rep.check("--blocks 1,3 saves those blocks", names == ["blocks.1.attn", "blocks.3.attn"], f"{names}")
    if vitc_ok(rep, "--heads 0,2", *base, imgs[0], "-o", png, "--heads", "0,2") is not None:
        size = Image.open(png).size
        rep.check("--heads 0,2 PNG size", size == png_size(28, 2, cfg["depth"]), f"{size}")
    out = ["-o", tmp / "err.png"]
    fails(rep, "unknown block", "block 4", *base, imgs[0], *out, "--blocks", "0,4")
    fails(rep, "unknown head", "head 4", *base, imgs[0], *out, "--heads", "4")
    fails(rep, "malformed --heads", "--heads", *base, imgs[0], *out, "--heads", "1,x")
    fails(rep, "malformed --blocks", "--blocks", *base, imgs[0], *out, "--blocks", "-1")
    bad = tmp / "not_an_image.png"
    bad.write_text("not a picture\n")
    fails(rep, "unreadable image", "not_an_image.png", *base, bad, *out)
    fails(rep, "missing image", "missing.png", *base, tmp / "missing.png", *out)
    fails(rep, "no output", "-o", *base, imgs[0])
    fails(rep, "-o not .png", "ending in .png", *base, imgs[0], "-o", tmp / "pic.jpg")
    wm = tmp / "swin.safetensors"
    if vitc_ok(rep, "init swin_fmnist_tiny", "init", "swin_fmnist_tiny", "-o", wm) is not None:
        fails(rep, "rollout over windows", "windows or stripes only", "attention", "swin_fmnist_tiny", "--weights", wm, imgs[0],
              *out, "--rollout")
    wg = tmp / "gma_w.safetensors"
    if vitc_ok(rep, "init gma", "init", "vit_fmnist_tiny_gap", "--attn", "gma", "-o", wg) is not None:
        fails(rep, "rollout without probabilities", "no softmax probabilities", "attention", "vit_fmnist_tiny_gap", "--attn", "gma",
              "--weights", wg, imgs[0], *out, "--rollout")
    fails(rep, "--heads without a picture", "without -o it can have no effect", "attention", MODEL, "--weights",
          w, imgs[0], "--save-maps", tmp / "err.safetensors", "--heads", "0")
    wr = tmp / "refiner_every_w.safetensors"
    if vitc_ok(rep, "init refiner", "init", MODEL, "--attn", "refiner", "-o", wr) is not None:
        fails(rep, "rollout over refined maps", "a refined map (scores, not probabilities) that mixes its values",
              "attention", MODEL, "--attn", "refiner", "--weights", wr, imgs[0], *out, "--rollout")


def test_uncovered(rep, tmp, imgs, cfg):
    """vit_fmnist_tiny at 31 px: its stride-4 patch conv covers the top-left 28 px (7x7 tokens), as timm's. The maps
    equal the reference's, and the PNG draws them over those 28 px only: in every map tile of the first row the
    last 3 columns and rows are the bare input tile's pixels, while the covered part is coloured."""
    S, cover, H = 31, 28, cfg["num_heads"]
    check_case(rep, tmp, "mhsa@31", MODEL, ["--img-size", S], vit_ref.ViT(cfg),
               vit_ref.random_state_dict(cfg, seed=1, std="fan_in"), imgs[:1], rollout=False, img=S)
    png = tmp / "mhsa@31.png"
    if not png.exists():
        return
    a = np.asarray(Image.open(png).convert("RGB")).astype(int)
    T = S * math.ceil(128 / S)
    f, y0 = T // S, 4 + 24
    base = a[y0:y0 + T, 4:4 + T]
    bare, coloured = True, 0
    for c in range(1, H + 1):
        t = a[y0:y0 + T, 4 + c * (T + 4):4 + c * (T + 4) + T]
        c0 = cover * f
        bare &= np.array_equal(t[:, c0:], base[:, c0:]) and np.array_equal(t[c0:], base[c0:])
        coloured += int(np.any(t[:c0, :c0] != base[:c0, :c0]))
    rep.check("mhsa@31 PNG: uncovered pixels bare, covered ones coloured", bare and coloured == H,
              f"bare {bare}, {coloured} of {H} tiles coloured")


def test_uncovered_pvt(rep, tmp, imgs):
    """PVT v1 at 72 px: its unpadded patch embeds (stride 4, then 2, 2, 2) leave stage 4 a 2x2 grid of 32-pixel tokens
    over the top-left 64 px. The PNG draws that stage's map over those 64 px only, the last 8 columns and rows of the
    head's tile the bare input tile's pixels (drawn over all 72 px, each cell was shifted by up to 8 px)."""
    S, cover, w = 72, 64, tmp / "pvt72.safetensors"
    args = ["pvt_tiny", "--img-size", S, "--depths", 1]
    if vitc_ok(rep, "init pvt_tiny@72", "init", *args, "-o", w) is None:
        return
    png = tmp / "pvt72.png"
    if vitc_ok(rep, "attention pvt_tiny@72, stage 4", "attention", *args, "--weights", w, imgs[0], "-o", png,
               "--blocks", 3, "--heads", 0) is None:
        return
    a = np.asarray(Image.open(png).convert("RGB")).astype(int)
    T = S * math.ceil(128 / S)
    f, y0 = T // S, 4 + 24
    base, t = a[y0:y0 + T, 4:4 + T], a[y0:y0 + T, 4 + T + 4:4 + 2 * T + 4]
    c0 = cover * f
    bare = np.array_equal(t[:, c0:], base[:, c0:]) and np.array_equal(t[c0:], base[c0:])
    rep.check("pvt_tiny@72 stage 4 PNG: the 8 uncovered pixels bare, the covered ones coloured",
              bare and np.any(t[:c0, :c0] != base[:c0, :c0]), f"bare {bare}")


def main():
    rep = Report()
    if have_vitc(rep):
        tmp = tmpdir()
        imgs = write_images(tmp)
        cfg = vit_cfg(rep)
        test_types(rep, tmp, imgs, cfg)
        test_uncovered(rep, tmp, imgs, cfg)
        test_uncovered_pvt(rep, tmp, imgs)
        test_swin_windows(rep, tmp, imgs)
        test_cswin_stripes(rep, tmp, imgs)
        test_swin_padded(rep, tmp, imgs)
        test_nextvit_pooled_keys(rep, tmp, imgs)
        test_selection_and_errors(rep, tmp, imgs, cfg)
    rep.finish()


if __name__ == "__main__":
    main()
