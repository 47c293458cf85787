/* Writes small valid images (PNG, JPEG, BMP, TGA, PPM, PGM, HDR, GIF, PSD) into the image fuzzer's seed corpus $1. */
#include <stdio.h>
#include <string.h>

#include <stb_image_write.h>

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    unsigned char pix[6 * 5 * 3];
    for (int i = 0; i < (int)sizeof pix; i++) pix[i] = (unsigned char)(i * 37 % 256);
    char p[4096];
    int ok = 1;
    snprintf(p, sizeof p, "%s/a.png", argv[1]), ok &= stbi_write_png(p, 6, 5, 3, pix, 18) != 0;
    snprintf(p, sizeof p, "%s/g.png", argv[1]), ok &= stbi_write_png(p, 6, 5, 1, pix, 6) != 0;
    snprintf(p, sizeof p, "%s/a.jpg", argv[1]), ok &= stbi_write_jpg(p, 6, 5, 3, pix, 80) != 0;
    snprintf(p, sizeof p, "%s/a.bmp", argv[1]), ok &= stbi_write_bmp(p, 6, 5, 3, pix) != 0;
    snprintf(p, sizeof p, "%s/a.tga", argv[1]), ok &= stbi_write_tga(p, 6, 5, 3, pix) != 0;
    snprintf(p, sizeof p, "%s/a.ppm", argv[1]);
    FILE *f = fopen(p, "wb");
    if (f) fprintf(f, "P6\n6 5\n255\n"), fwrite(pix, 1, sizeof pix, f), fclose(f);
    snprintf(p, sizeof p, "%s/a.pgm", argv[1]);
    f = fopen(p, "wb");
    if (f) fprintf(f, "P5\n6 5\n255\n"), fwrite(pix, 1, 30, f), fclose(f);
    float hdr[9 * 2 * 3];
    for (int i = 0; i < (int)(sizeof hdr / sizeof *hdr); i++) hdr[i] = (float)(i % 5) / 4.0f;
    snprintf(p, sizeof p, "%s/a.hdr", argv[1]), ok &= stbi_write_hdr(p, 9, 2, 3, hdr) != 0; /* RLE scanlines */
    snprintf(p, sizeof p, "%s/b.hdr", argv[1]), ok &= stbi_write_hdr(p, 3, 2, 3, hdr) != 0; /* flat */
    /* a 2×2 GIF: 4-entry global table, LZW codes clear, 0, 1, 2 (3 bits), 3, end (4 bits) */
    static const unsigned char gif[] = "GIF89a\x02\x00\x02\x00\x81\x00\x00"
                                       "\x00\x00\x00\xff\x00\x00\x00\xff\x00\x00\x00\xff"
                                       "\x2c\x00\x00\x00\x00\x02\x00\x02\x00\x00\x02\x03\x44\x34\x05\x00\x3b";
    /* a 2×1 RGB PSD, raw planes */
    static const unsigned char psd[] = "8BPS\x00\x01\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x01"
                                       "\x00\x00\x00\x02\x00\x08\x00\x03\x00\x00\x00\x00\x00\x00\x00\x00"
                                       "\x00\x00\x00\x00\x00\x00\x10\x20\x30\x40\x50\x60";
    static const struct {
        const char *name;
        const unsigned char *b;
        size_t n;
    } raw[] = {{"a.gif", gif, sizeof gif - 1}, {"a.psd", psd, sizeof psd - 1}};
    for (int k = 0; k < 2; k++) {
        snprintf(p, sizeof p, "%s/%s", argv[1], raw[k].name);
        f = fopen(p, "wb");
        ok &= f && fwrite(raw[k].b, 1, raw[k].n, f) == raw[k].n;
        if (f) fclose(f);
    }
    return ok ? 0 : 1;
}
