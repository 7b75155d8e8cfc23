/* Decoded images: buffers, JPEG (libjpeg-turbo) and PNG (libpng) decoding
 * with every library error caught (longjmp / setjmp), and PNG writing. */
#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <jpeglib.h>
/* after jpeglib.h, which it needs */
#include <jerror.h>
#include <png.h>

#include "core/error.h"
#include "core/mem.h"
#include "data/data.h"

/* The largest encoded file we read (a hostile size cannot exhaust RAM). */
#define MAX_FILE_BYTES ((size_t)1 << 30)

cl_status cl_image_reserve(cl_image *img, int h, int w, int c)
{
    size_t n;
    if (h < 0 || w < 0 || c < 0)
        return cl_error(CL_ERR_ARG, "image %dx%dx%d: negative size", h, w, c);
    CL_TRY(cl_mul_size((size_t)h * (size_t)w, (size_t)c, &n, "image"));
    if (n > img->cap) {
        uint8_t *p = cl_alloc(n, "image");
        if (!p)
            return CL_ERR_NOMEM;
        cl_free(img->data);
        img->data = p;
        img->cap = n;
    }
    img->h = h;
    img->w = w;
    img->c = c;
    return CL_OK;
}

void cl_image_free(cl_image *img)
{
    cl_free(img->data);
    cl_free(img->raw);
    memset(img, 0, sizeof *img);
}

static cl_status check_pixels(const char *name, uint64_t w, uint64_t h,
                              uint64_t max_pixels)
{
    if (w == 0 || h == 0)
        return cl_error(CL_ERR_FORMAT, "%s: image is %llux%llu (empty)", name,
                        (unsigned long long)w, (unsigned long long)h);
    if (w * h > max_pixels)
        return cl_error(CL_ERR_LIMIT,
                        "%s: image is %llux%llu = %llu pixels, above the "
                        "limit of %llu (max_pixels)",
                        name, (unsigned long long)w, (unsigned long long)h,
                        (unsigned long long)(w * h),
                        (unsigned long long)max_pixels);
    return CL_OK;
}

/* ------------------------------------------------------------------ JPEG */

typedef struct jerr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
    int eof; /* libjpeg's "premature end" warning was raised */
} jerr;

static void j_error_exit(j_common_ptr c)
{
    jerr *e = (jerr *)c->err;
    (*c->err->format_message)(c, e->msg);
    longjmp(e->jb, 1);
}

/* libjpeg would print warnings to stderr: keep them, print nothing. */
static void j_emit_message(j_common_ptr c, int level)
{
    jerr *e = (jerr *)c->err;
    if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF && !e->eof) {
        e->eof = 1;
        (*c->err->format_message)(c, e->msg);
    }
}

static void j_output_message(j_common_ptr c)
{
    (void)c;
}

static void jpeg_setup(struct jpeg_decompress_struct *ci, jerr *e)
{
    ci->err = jpeg_std_error(&e->pub);
    e->pub.error_exit = j_error_exit;
    e->pub.emit_message = j_emit_message;
    e->pub.output_message = j_output_message;
    e->msg[0] = '\0';
    e->eof = 0;
}

static cl_status decode_jpeg(const uint8_t *buf, size_t len, const char *name,
                             int min_side, uint64_t max_pixels, cl_image *img,
                             int probe_only)
{
    struct jpeg_decompress_struct ci;
    jerr e;
    uint8_t *volatile cmyk = NULL;
    cl_status s = CL_OK;
    memset(&ci, 0, sizeof ci);
    jpeg_setup(&ci, &e);
    if (setjmp(e.jb)) {
        jpeg_destroy_decompress(&ci);
        cl_free(cmyk);
        return cl_error(CL_ERR_FORMAT, "%s: corrupt JPEG: %s", name, e.msg);
    }
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, buf, (unsigned long)len);
    jpeg_read_header(&ci, TRUE);
    s = check_pixels(name, ci.image_width, ci.image_height, max_pixels);
    if (s != CL_OK)
        goto done;
    int c = 3;
    if (ci.jpeg_color_space == JCS_GRAYSCALE) {
        ci.out_color_space = JCS_GRAYSCALE;
        c = 1;
    } else if (ci.jpeg_color_space == JCS_CMYK ||
               ci.jpeg_color_space == JCS_YCCK) {
        ci.out_color_space = JCS_CMYK;
    } else {
        ci.out_color_space = JCS_RGB;
    }
    /* DCT-domain downscaling: the cheapest resize there is. */
    int denom = 1;
    unsigned short_side =
        ci.image_width < ci.image_height ? ci.image_width : ci.image_height;
    if (min_side > 0)
        while (denom < 8 &&
               (short_side + (unsigned)denom * 2 - 1) / ((unsigned)denom * 2) >=
                   (unsigned)min_side)
            denom *= 2;
    ci.scale_num = 1;
    ci.scale_denom = (unsigned)denom;
    jpeg_calc_output_dimensions(&ci);
    if (probe_only) {
        img->w = (int)ci.output_width;
        img->h = (int)ci.output_height;
        img->c = c;
        goto done;
    }
    s = cl_image_reserve(img, (int)ci.output_height, (int)ci.output_width, c);
    if (s != CL_OK)
        goto done;
    if (ci.out_color_space == JCS_CMYK) {
        cmyk = cl_alloc((size_t)ci.output_width * 4, "CMYK row");
        if (!cmyk) {
            s = CL_ERR_NOMEM;
            goto done;
        }
    }
    jpeg_start_decompress(&ci);
    size_t stride = (size_t)ci.output_width * (size_t)c;
    while (ci.output_scanline < ci.output_height) {
        uint8_t *row = img->data + (size_t)ci.output_scanline * stride;
        JSAMPROW rp = cmyk ? cmyk : row;
        if (jpeg_read_scanlines(&ci, &rp, 1) != 1)
            break;
        if (cmyk) {
            /* Adobe writes inverted CMYK: R = C*K/255 and so on. */
            for (size_t x = 0; x < ci.output_width; x++) {
                unsigned k = cmyk[4 * x + 3];
                for (int q = 0; q < 3; q++)
                    row[3 * x + (size_t)q] =
                        (uint8_t)((cmyk[4 * x + (size_t)q] * k + 127) / 255);
            }
        }
    }
    if (e.eof) {
        s = cl_error(CL_ERR_FORMAT, "%s: truncated JPEG: %s", name, e.msg);
        goto done;
    }
    jpeg_finish_decompress(&ci);
done:
    jpeg_destroy_decompress(&ci);
    cl_free(cmyk);
    return s;
}

/* ------------------------------------------------------------------- PNG */

typedef struct psrc {
    const uint8_t *p;
    size_t len, off;
    char msg[256];
} psrc;

static void p_error(png_structp png, png_const_charp msg)
{
    psrc *src = png_get_error_ptr(png);
    snprintf(src->msg, sizeof src->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void p_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

static void p_read(png_structp png, png_bytep out, png_size_t n)
{
    psrc *src = png_get_io_ptr(png);
    if (n > src->len - src->off)
        png_error(png, "file ends early (truncated)");
    memcpy(out, src->p + src->off, n);
    src->off += n;
}

static cl_status decode_png(const uint8_t *buf, size_t len, const char *name,
                            uint64_t max_pixels, cl_image *img, int probe_only)
{
    psrc src = {buf, len, 0, ""};
    cl_status s = CL_OK;
    png_structp png =
        png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, p_error, p_warning);
    if (!png)
        return cl_error(CL_ERR_NOMEM, "%s: cannot create a PNG reader", name);
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return cl_error(CL_ERR_NOMEM, "%s: cannot create a PNG reader", name);
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        return cl_error(CL_ERR_FORMAT, "%s: corrupt PNG: %s", name, src.msg);
    }
    png_set_read_fn(png, &src, p_read);
    /* Our own limit decides; libpng's defaults would refuse first. */
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
    png_read_info(png, info);
    png_uint_32 w = png_get_image_width(png, info);
    png_uint_32 h = png_get_image_height(png, info);
    s = check_pixels(name, w, h, max_pixels);
    if (s != CL_OK)
        goto done;
    int ct = png_get_color_type(png, info);
    int bd = png_get_bit_depth(png, info);
    if (ct == PNG_COLOR_TYPE_PALETTE)
        png_set_palette_to_rgb(png);
    if (ct == PNG_COLOR_TYPE_GRAY && bd < 8)
        png_set_expand_gray_1_2_4_to_8(png);
    if (bd == 16)
        png_set_strip_16(png);
    /* Alpha is dropped, as PIL's convert("RGB") does; a tRNS chunk (palette
     * or gray transparency) expands into alpha, so it is dropped too. */
    if ((ct & PNG_COLOR_MASK_ALPHA) || png_get_valid(png, info, PNG_INFO_tRNS))
        png_set_strip_alpha(png);
    int passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);
    int c = png_get_channels(png, info);
    if (c != 1 && c != 3) {
        s = cl_error(CL_ERR_UNSUPPORTED, "%s: PNG decodes to %d channels", name,
                     c);
        goto done;
    }
    if (probe_only) {
        img->w = (int)w;
        img->h = (int)h;
        img->c = c;
        goto done;
    }
    s = cl_image_reserve(img, (int)h, (int)w, c);
    if (s != CL_OK)
        goto done;
    size_t stride = (size_t)w * (size_t)c;
    for (int p = 0; p < passes; p++)
        for (png_uint_32 y = 0; y < h; y++)
            png_read_row(png, img->data + (size_t)y * stride, NULL);
done:
    png_destroy_read_struct(&png, &info, NULL);
    return s;
}

/* -------------------------------------------------------------- dispatch */

static cl_status decode_any(const uint8_t *buf, size_t len, const char *name,
                            int min_side, uint64_t max_pixels, cl_image *img,
                            int probe_only)
{
    static const uint8_t png_sig[8] = {0x89, 'P',  'N',  'G',
                                       0x0d, 0x0a, 0x1a, 0x0a};
    if (max_pixels == 0)
        max_pixels = CL_DATA_DEFAULT_MAX_PIXELS;
    if (len >= 3 && buf[0] == 0xff && buf[1] == 0xd8 && buf[2] == 0xff)
        return decode_jpeg(buf, len, name, min_side, max_pixels, img,
                           probe_only);
    if (len >= 8 && memcmp(buf, png_sig, 8) == 0)
        return decode_png(buf, len, name, max_pixels, img, probe_only);
    if (len == 0)
        return cl_error(CL_ERR_FORMAT, "%s: empty file, not an image", name);
    uint8_t h[4] = {0, 0, 0, 0};
    memcpy(h, buf, len < 4 ? len : 4);
    return cl_error(CL_ERR_FORMAT,
                    "%s: not a JPEG or PNG file (starts with %02x %02x %02x "
                    "%02x)",
                    name, h[0], h[1], h[2], h[3]);
}

cl_status cl_image_decode(const uint8_t *buf, size_t len, const char *name,
                          int min_side, uint64_t max_pixels, cl_image *img)
{
    return decode_any(buf, len, name, min_side, max_pixels, img, 0);
}

/* Reads a whole file into img->raw; *len receives its size. */
static cl_status read_raw(const char *path, cl_image *img, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return cl_error(CL_ERR_IO, "%s: cannot open: %s", path,
                        strerror(errno));
    struct stat st;
    cl_status s = CL_OK;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        s = cl_error(CL_ERR_IO, "%s: not a regular file", path);
        goto done;
    }
    size_t n = (size_t)st.st_size;
    if (n > MAX_FILE_BYTES) {
        s = cl_error(CL_ERR_LIMIT,
                     "%s: %zu bytes, above the %zu-byte limit "
                     "for an image file",
                     path, n, MAX_FILE_BYTES);
        goto done;
    }
    if (n > img->raw_cap || !img->raw) {
        uint8_t *p = cl_alloc(n, path);
        if (!p) {
            s = CL_ERR_NOMEM;
            goto done;
        }
        cl_free(img->raw);
        img->raw = p;
        img->raw_cap = n;
    }
    if (n && fread(img->raw, 1, n, f) != n) {
        s = cl_error(CL_ERR_IO, "%s: cannot read: %s", path,
                     ferror(f) ? strerror(errno) : "file shrank");
        goto done;
    }
    *len = n;
done:
    fclose(f);
    return s;
}

cl_status cl_image_load(const char *path, int min_side, uint64_t max_pixels,
                        cl_image *img)
{
    size_t len = 0;
    CL_TRY(read_raw(path, img, &len));
    return decode_any(img->raw, len, path, min_side, max_pixels, img, 0);
}

cl_status cl_image_probe(const char *path, int *w, int *h, int *c)
{
    cl_image tmp = {0};
    size_t len = 0;
    cl_status s = read_raw(path, &tmp, &len);
    if (s == CL_OK)
        s = decode_any(tmp.raw, len, path, 0, UINT64_MAX, &tmp, 1);
    if (s == CL_OK) {
        *w = tmp.w;
        *h = tmp.h;
        *c = tmp.c;
    }
    cl_image_free(&tmp);
    return s;
}

/* ----------------------------------------------------------- PNG writing */

cl_status cl_image_save_png(const char *path, const cl_image *img)
{
    if (img->c != 1 && img->c != 3)
        return cl_error(CL_ERR_ARG, "%s: cannot write %d channels as PNG", path,
                        img->c);
    FILE *volatile f = fopen(path, "wb");
    if (!f)
        return cl_error(CL_ERR_IO, "%s: cannot create: %s", path,
                        strerror(errno));
    psrc ctx = {NULL, 0, 0, ""};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &ctx,
                                              p_error, p_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info) {
        png_destroy_write_struct(&png, NULL);
        fclose(f);
        return cl_error(CL_ERR_NOMEM, "%s: cannot create a PNG writer", path);
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        fclose(f);
        return cl_error(CL_ERR_IO, "%s: cannot write PNG: %s", path, ctx.msg);
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)img->w, (png_uint_32)img->h, 8,
                 img->c == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    size_t stride = (size_t)img->w * (size_t)img->c;
    for (int y = 0; y < img->h; y++)
        png_write_row(png, img->data + (size_t)y * stride);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    if (fclose(f) != 0)
        return cl_error(CL_ERR_IO, "%s: cannot write: %s", path,
                        strerror(errno));
    return CL_OK;
}
