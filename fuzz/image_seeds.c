/* Writes small valid images (PNG, JPEG, BMP, TGA, PPM, PGM) into the image fuzzer's seed corpus $1. */
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
    return ok ? 0 : 1;
}
